// `vllm generate`: greedy generation from token ids on the CPU backend.
//
// Until the engine (scheduler, KV cache manager, sampler) lands, this runs each prompt alone:
// one prefill step over the whole prompt, then one decode step per token, with the request's
// KV blocks laid out as 0, 1, 2, ... in a cache sized for prompt + max_tokens.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "base/logging.h"
#include "cli/commands.h"
#include "model/model.h"

namespace vllm::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::vector<std::string> prompt_ids;
  int64_t max_tokens = 16;
  int64_t max_model_len = 0;
  std::string load_format = "auto";
  int64_t block_size = 16;
  bool ignore_eos = false;
  bool json = false;
};

Expected<std::vector<int64_t>> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    long long value = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || end == item.c_str() || *end != '\0' || value < 0) {
      return make_error(ErrorCode::kInvalidArgument,
                        "--prompt-ids '{}': '{}' is not a non-negative integer", text, item);
    }
    ids.push_back(value);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return ids;
}

int64_t argmax(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (row[i] > row[best]) best = i;
  }
  return best;
}

Tensor i64_tensor(const std::vector<int64_t>& values) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::kI64);
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return t;
}

struct Generation {
  std::vector<int64_t> token_ids;
  std::string finish_reason;
};

Expected<Generation> generate_one(Model& model, const std::vector<int64_t>& prompt,
                                  const GenerateArgs& args, int64_t max_model_len) {
  const ModelConfig& config = model.config();
  const int64_t total = static_cast<int64_t>(prompt.size()) + args.max_tokens;
  if (total > max_model_len) {
    return make_error(ErrorCode::kInvalidArgument,
                      "prompt of {} tokens + max_tokens {} exceeds max_model_len {}", prompt.size(),
                      args.max_tokens, max_model_len);
  }
  CacheConfig cache_config;
  cache_config.block_size = args.block_size;
  cache_config.num_blocks = (total + args.block_size - 1) / args.block_size;
  cache_config.num_state_slots = 1;  // hybrid models: one GDN state slot for this request
  VLLM_ASSIGN_OR_RETURN(ModelCache cache, model.create_cache(cache_config));
  Tensor block_table = Tensor::empty({1, cache_config.num_blocks}, DType::kI32);
  std::iota(block_table.data<int32_t>(), block_table.data<int32_t>() + cache_config.num_blocks, 0);

  Generation out;
  std::vector<int64_t> step_tokens = prompt;
  int64_t computed = 0;  // tokens already in the cache
  while (static_cast<int64_t>(out.token_ids.size()) < args.max_tokens) {
    const int64_t n = static_cast<int64_t>(step_tokens.size());
    std::vector<int64_t> positions(static_cast<size_t>(n));
    std::iota(positions.begin(), positions.end(), computed);
    ForwardBatch batch;
    batch.token_ids = i64_tensor(step_tokens);
    batch.positions = i64_tensor(positions);
    batch.slot_mapping = i64_tensor(positions);  // blocks 0, 1, 2, ... => slot == position
    batch.block_tables = block_table;
    batch.query_start_loc = {0, static_cast<int32_t>(n)};
    batch.seq_lens = {static_cast<int32_t>(computed + n)};
    batch.state_indices = {0};
    batch.logits_indices = {n - 1};
    VLLM_ASSIGN_OR_RETURN(Tensor logits, model.forward(batch, cache));
    computed += n;
    const int64_t next = argmax(logits.data<float>(), config.vocab_size);
    out.token_ids.push_back(next);
    const auto& eos = config.eos_token_ids;
    if (!args.ignore_eos && std::find(eos.begin(), eos.end(), next) != eos.end()) {
      out.finish_reason = "stop";
      return out;
    }
    step_tokens = {next};
  }
  out.finish_reason = "length";
  return out;
}

int run_generate(const GenerateArgs& args) {
  LoadOptions options;
  options.max_model_len = args.max_model_len;
  options.load_format = args.load_format;
  auto model = load_model(args.model, options);
  if (!model) {
    VLLM_LOG_ERROR("cannot load model: {}", model.status().to_string());
    return 1;
  }
  const int64_t max_model_len =
      args.max_model_len > 0 ? args.max_model_len : (*model)->config().max_position_embeddings;
  for (const std::string& text : args.prompt_ids) {
    auto prompt = parse_ids(text);
    if (!prompt) {
      VLLM_LOG_ERROR("{}", prompt.status().message());
      return 2;
    }
    for (int64_t id : *prompt) {
      if (id >= (*model)->config().vocab_size) {
        VLLM_LOG_ERROR("--prompt-ids: token id {} is outside the vocabulary of {}", id,
                       (*model)->config().vocab_size);
        return 2;
      }
    }
    auto result = generate_one(**model, *prompt, args, max_model_len);
    if (!result) {
      VLLM_LOG_ERROR("generation failed: {}", result.status().to_string());
      return 1;
    }
    if (args.json) {
      nlohmann::json line = {{"prompt_token_ids", *prompt},
                             {"token_ids", result->token_ids},
                             {"finish_reason", result->finish_reason}};
      std::printf("%s\n", line.dump().c_str());
    } else {
      std::printf("prompt: %s\noutput: %s\nfinish_reason: %s\n",
                  fmt::format("{}", fmt::join(*prompt, ",")).c_str(),
                  fmt::format("{}", fmt::join(result->token_ids, ",")).c_str(),
                  result->finish_reason.c_str());
    }
  }
  return 0;
}

}  // namespace

Runner add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate continuations of prompts (offline)");
  cmd->add_option("--model", args->model, "Model directory (Hugging Face layout)")->required();
  cmd->add_option("--prompt-ids", args->prompt_ids,
                  "Prompt as comma-separated token ids, e.g. 5,17,42 (repeatable)")
      ->required();
  cmd->add_option("--max-tokens", args->max_tokens, "Tokens to generate per prompt")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--max-model-len", args->max_model_len,
                  "Context length limit (default: the model's max_position_embeddings)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--load-format", args->load_format,
                  "auto / safetensors: read the checkpoint; dummy: random weights of the "
                  "config's shapes")
      ->check(CLI::IsMember({"auto", "safetensors", "dummy"}));
  cmd->add_option("--block-size", args->block_size, "Tokens per KV cache block")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_flag("--ignore-eos", args->ignore_eos, "Do not stop at the end-of-sequence token");
  cmd->add_flag("--json", args->json, "One JSON object per prompt per line");
  return [args] { return run_generate(*args); };
}

}  // namespace vllm::cli
