// `vllm generate`: offline batch generation, as vLLM's LLM.generate() driven from the shell.
//
// Prompts come from --prompt TEXT, --prompt-ids 5,17,42 (both repeatable) or --input
// FILE.jsonl (one {"prompt": "..."} or {"prompt_token_ids": [...]} per line, optionally with
// "structured_outputs": {...} as the API takes it). Structured outputs for every prompt:
// --json-schema, --regex, --choice, --grammar or --json-object. All prompts go
// into one engine together: continuous batching, chunked prefill, prefix caching and
// preemption as `vllm serve` would run them. Sampling defaults are vLLM's, overridden by the
// model's generation_config.json, overridden by the flags.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/logging.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/engine_flags.h"
#include "engine/engine_core.h"
#include "engine/output_processor.h"
#include "loader/hf_config.h"
#include "structured/structured_outputs.h"
#include "tokenizer/tokenizer.h"

namespace vllm::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::vector<std::string> prompts;
  std::vector<std::string> prompt_ids;
  std::string input;
  bool json = false;
  // Sampling (unset: generation_config.json, then vLLM's default).
  SamplerFlags sampler;
  std::optional<int32_t> max_tokens, min_tokens, n, logprobs, prompt_logprobs;
  std::optional<int64_t> seed;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  // Structured outputs for every prompt (vLLM's StructuredOutputsParams fields).
  std::string json_schema, regex, grammar;
  std::vector<std::string> choice;
  bool json_object = false;
  bool disable_any_whitespace = false;
  engine::EngineArgs engine;
};

Expected<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos
                                                                           : comma - start);
    char* end = nullptr;
    const long long value = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || end == item.c_str() || *end != '\0' || value < 0 || value > INT32_MAX) {
      return make_error(ErrorCode::kInvalidArgument,
                        "--prompt-ids '{}': '{}' is not a non-negative integer", text, item);
    }
    ids.push_back(static_cast<int32_t>(value));
    if (comma == std::string::npos) return ids;
    start = comma + 1;
  }
}

struct Prompt {
  std::optional<std::string> text;
  std::vector<int32_t> ids;
  std::optional<structured::StructuredOutputsParams> structured;  // from its --input line
};

// "@path" reads the file; anything else is the text itself.
Expected<std::string> text_or_file(const std::string& flag, const std::string& value) {
  if (value.empty() || value[0] != '@') return value;
  std::ifstream in(value.substr(1), std::ios::binary);
  if (!in) return make_error(ErrorCode::kNotFound, "{} {}: cannot open", flag, value.substr(1));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The structured-output flags as StructuredOutputsParams; nullopt when none is given.
Expected<std::optional<structured::StructuredOutputsParams>> structured_flags(
    const GenerateArgs& args) {
  structured::StructuredOutputsParams p;
  if (!args.json_schema.empty()) {
    VLLM_ASSIGN_OR_RETURN(std::string schema, text_or_file("--json-schema", args.json_schema));
    p.json = std::move(schema);
  }
  if (!args.regex.empty()) p.regex = args.regex;
  if (!args.choice.empty()) p.choice = args.choice;
  if (!args.grammar.empty()) {
    VLLM_ASSIGN_OR_RETURN(std::string grammar, text_or_file("--grammar", args.grammar));
    p.grammar = std::move(grammar);
  }
  p.json_object = args.json_object;
  p.disable_any_whitespace = args.disable_any_whitespace;
  if (p.num_constraints() == 0) {
    if (args.disable_any_whitespace) {
      return make_error(ErrorCode::kInvalidArgument,
                        "--disable-any-whitespace needs --json-schema or --json-object");
    }
    return std::optional<structured::StructuredOutputsParams>();
  }
  VLLM_RETURN_IF_ERROR(p.validate());
  return std::optional<structured::StructuredOutputsParams>(std::move(p));
}

Expected<std::vector<Prompt>> collect_prompts(const GenerateArgs& args, const Tokenizer* tokenizer) {
  std::vector<Prompt> prompts;
  auto add_text = [&](const std::string& text) -> Status {
    if (tokenizer == nullptr) {
      return make_error(ErrorCode::kInvalidArgument,
                        "text prompts need a tokenizer, and {} has no tokenizer.json (use "
                        "--prompt-ids)",
                        args.model);
    }
    VLLM_ASSIGN_OR_RETURN(auto ids, tokenizer->encode(text, /*add_special_tokens=*/true));
    prompts.push_back({text, std::move(ids), std::nullopt});
    return Status::ok();
  };
  for (const std::string& text : args.prompts) VLLM_RETURN_IF_ERROR(add_text(text));
  for (const std::string& ids : args.prompt_ids) {
    VLLM_ASSIGN_OR_RETURN(auto parsed, parse_ids(ids));
    prompts.push_back({std::nullopt, std::move(parsed), std::nullopt});
  }
  if (!args.input.empty()) {
    std::ifstream in(args.input);
    if (!in) return make_error(ErrorCode::kNotFound, "--input {}: cannot open", args.input);
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      auto j = nlohmann::ordered_json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        return make_error(ErrorCode::kInvalidArgument, "{}:{}: not a JSON object", args.input, number);
      }
      auto structured = structured::parse_structured_outputs(j);
      if (!structured) {
        return structured.status().with_context(fmt::format("{}:{}", args.input, number));
      }
      if (j.contains("prompt") && j["prompt"].is_string()) {
        Status s = add_text(j["prompt"].get<std::string>());
        if (!s.is_ok()) return s.with_context(fmt::format("{}:{}", args.input, number));
        prompts.back().structured = *structured;
      } else if (j.contains("prompt_token_ids") && j["prompt_token_ids"].is_array()) {
        Prompt p;
        for (const auto& id : j["prompt_token_ids"]) {
          if (!id.is_number_integer()) {
            return make_error(ErrorCode::kInvalidArgument,
                              "{}:{}: prompt_token_ids must hold integers", args.input, number);
          }
          p.ids.push_back(id.get<int32_t>());
        }
        p.structured = *structured;
        prompts.push_back(std::move(p));
      } else {
        return make_error(ErrorCode::kInvalidArgument,
                          "{}:{}: needs \"prompt\" (string) or \"prompt_token_ids\" (array)",
                          args.input, number);
      }
    }
  }
  if (prompts.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "no prompts: give --prompt, --prompt-ids or --input");
  }
  return prompts;
}

SamplingParams sampling_params(const GenerateArgs& args, const GenerationConfig& generation) {
  // The model's generation_config.json first (vLLM's --generation-config auto), then the flags.
  SamplingParams p = sampler_params(generation, args.sampler);
  if (args.max_tokens) p.max_tokens = *args.max_tokens;
  if (args.min_tokens) p.min_tokens = *args.min_tokens;
  if (args.n) p.n = *args.n;
  if (args.seed) p.seed = *args.seed;
  p.logprobs = args.logprobs;
  p.prompt_logprobs = args.prompt_logprobs;
  p.stop = args.stop;
  p.stop_token_ids = args.stop_token_ids;
  p.ignore_eos = args.ignore_eos;
  p.include_stop_str_in_output = args.include_stop_str_in_output;
  p.skip_special_tokens = args.skip_special_tokens;
  return p;
}

nlohmann::json logprobs_json(const std::vector<TokenLogprobs>& steps, bool with_top) {
  nlohmann::json out = nlohmann::json::array();
  for (const TokenLogprobs& t : steps) {
    if (!with_top) {
      out.push_back(t.logprob);
      continue;
    }
    nlohmann::json top = nlohmann::json::array();
    for (size_t i = 0; i < t.top_token_ids.size(); ++i) {
      top.push_back({{"token_id", t.top_token_ids[i]}, {"logprob", t.top_logprobs[i]}, {"rank", i + 1}});
    }
    out.push_back({{"token_id", t.token_id}, {"logprob", t.logprob}, {"rank", t.rank}, {"top", top}});
  }
  return out;
}

nlohmann::json completion_json(const engine::CompletionOutput& c, bool with_top) {
  nlohmann::json j = {{"token_ids", c.token_ids},
                      {"text", c.text},
                      {"logprobs", logprobs_json(c.logprobs, with_top)},
                      {"finish_reason", c.finish_reason}};
  if (c.stop_string) j["stop_reason"] = *c.stop_string;
  else if (c.stop_token) j["stop_reason"] = *c.stop_token;
  else j["stop_reason"] = nullptr;
  return j;
}

int run_generate(GenerateArgs& args) {
  auto model_dir = resolve_model_dir(args.model);
  if (!model_dir) {
    VLLM_LOG_ERROR("{}", model_dir.status().message());
    return 1;
  }
  args.model = *model_dir;
  args.engine.model = args.model;
  args.engine.seed = args.seed;
  auto loaded = engine::build_engine(args.engine);
  if (!loaded) {
    VLLM_LOG_ERROR("{}", loaded.status().to_string());
    return 1;
  }
  std::unique_ptr<Tokenizer> tokenizer = std::move(loaded->tokenizer);
  auto prompts = collect_prompts(args, tokenizer.get());
  if (!prompts) {
    VLLM_LOG_ERROR("{}", prompts.status().message());
    return 2;
  }
  auto& core = loaded->core;
  const GenerationConfig* generation = &loaded->generation;
  engine::OutputProcessor processor(tokenizer.get());
  SamplingParams params = sampling_params(args, *generation);
  auto structured = structured_flags(args);
  if (!structured) {
    VLLM_LOG_ERROR("{}", structured.status().message());
    return 2;
  }
  params.structured_outputs = *structured;
  std::map<std::string, size_t> order;  // request id -> prompt index
  for (size_t i = 0; i < prompts->size(); ++i) {
    const std::string id = std::to_string(i);
    SamplingParams prompt_params = params;
    if ((*prompts)[i].structured) prompt_params.structured_outputs = (*prompts)[i].structured;
    auto children = processor.add_request(id, (*prompts)[i].ids, prompt_params);
    if (!children) {
      VLLM_LOG_ERROR("prompt {}: {}", i, children.status().message());
      return 2;
    }
    for (const auto& child : *children) {
      Status s = core->add_request(child.request_id, (*prompts)[i].ids, child.params);
      if (!s.is_ok()) {
        VLLM_LOG_ERROR("prompt {}: {}", i, s.message());
        return 2;
      }
    }
    order[id] = i;
  }
  std::vector<std::optional<engine::RequestOutput>> results(prompts->size());
  while (core->has_unfinished_requests() || processor.has_unfinished()) {
    auto outputs = core->step();
    if (!outputs) {
      VLLM_LOG_ERROR("generation failed: {}", outputs.status().to_string());
      return 1;
    }
    std::vector<std::string> to_abort;
    for (auto& r : processor.process(*outputs, &to_abort)) {
      if (r.finished) results[order[r.request_id]] = std::move(r);
    }
    if (!to_abort.empty()) core->abort_requests(to_abort);
  }
  const bool with_top = args.logprobs.value_or(0) != 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const engine::RequestOutput& r = *results[i];
    if (args.json) {
      nlohmann::json line = completion_json(r.outputs[0], with_top);
      if ((*prompts)[i].text) line["prompt"] = *(*prompts)[i].text;
      line["prompt_token_ids"] = r.prompt_token_ids;
      if (args.prompt_logprobs) line["prompt_logprobs"] = logprobs_json(r.prompt_logprobs, true);
      if (r.outputs.size() > 1) {
        line["outputs"] = nlohmann::json::array();
        for (const auto& c : r.outputs) line["outputs"].push_back(completion_json(c, with_top));
      }
      std::printf("%s\n", line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      const std::string prompt = (*prompts)[i].text ? *(*prompts)[i].text
                                                    : fmt::format("{}", fmt::join(r.prompt_token_ids, ","));
      for (const auto& c : r.outputs) {
        std::printf("Prompt: %s\nGenerated: %s\n", prompt.c_str(),
                    tokenizer ? c.text.c_str() : fmt::format("{}", fmt::join(c.token_ids, ",")).c_str());
        std::printf("(%zu tokens, finish_reason=%s)\n\n", c.token_ids.size(), c.finish_reason.c_str());
      }
    }
  }
  return 0;
}

}  // namespace

Runner add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate completions of prompts offline");
  cmd->add_option("--model", args->model,
                  fmt::format("Model folder (Hugging Face layout); default: the demo model "
                              "models/{}",
                              kDefaultModelName));
  cmd->add_option("--prompt", args->prompts, "A text prompt (repeatable)");
  cmd->add_option("--prompt-ids", args->prompt_ids, "A prompt as token ids, e.g. 5,17,42 (repeatable)");
  cmd->add_option("--input", args->input, "JSONL file: {\"prompt\": ...} or {\"prompt_token_ids\": [...]} per line");
  cmd->add_flag("--json", args->json, "One JSON object per prompt per line");
  // Sampling, as vLLM's SamplingParams.
  add_sampler_flags(cmd, &args->sampler);
  cmd->add_option("--max-tokens", args->max_tokens, "Tokens to generate (default 16)");
  cmd->add_option("--min-tokens", args->min_tokens);
  cmd->add_option("--n", args->n, "Completions per prompt");
  cmd->add_option("--seed", args->seed, "Random seed (per request and engine)");
  cmd->add_option("--stop", args->stop, "Stop string (repeatable)");
  cmd->add_option("--stop-token-ids", args->stop_token_ids, "Stop token ids")->delimiter(',');
  cmd->add_flag("--ignore-eos", args->ignore_eos);
  cmd->add_flag("--include-stop-str-in-output", args->include_stop_str_in_output);
  cmd->add_flag("!--no-skip-special-tokens", args->skip_special_tokens, "Keep special tokens in the text");
  cmd->add_option("--logprobs", args->logprobs, "Top-N logprobs per generated token");
  cmd->add_option("--prompt-logprobs", args->prompt_logprobs, "Top-N logprobs per prompt token");
  // Structured outputs, as the API's structured_outputs (one of these).
  cmd->add_option("--json-schema", args->json_schema,
                  "Output must match this JSON Schema (JSON text, or @FILE)");
  cmd->add_option("--regex", args->regex, "Output must match this regular expression");
  cmd->add_option("--choice", args->choice, "Output must be one of these strings (repeatable)");
  cmd->add_option("--grammar", args->grammar,
                  "Output must match this EBNF grammar (text, or @FILE)");
  cmd->add_flag("--json-object", args->json_object, "Output must be a JSON object or array");
  cmd->add_flag("--disable-any-whitespace", args->disable_any_whitespace,
                "JSON without free whitespace (\", \" and \": \" separators)");
  add_engine_flags(cmd, &args->engine);  // as `vllm serve`
  return [args] { return run_generate(*args); };
}

}  // namespace vllm::cli
