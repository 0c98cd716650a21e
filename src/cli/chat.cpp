// `vllm chat`: an interactive chat in the terminal, as vLLM's `vllm chat`, with the engine
// running in this process on the CPU (vLLM's command talks to a server instead).
//
// Reads one user message per line from stdin and keeps the whole conversation: each turn
// renders every message so far with the model's chat template (add_generation_prompt), runs
// it through the engine and streams the assistant's reply to stdout as it is decoded; the
// reply then joins the conversation. `quit`, `exit` or the end of input ends the session.
// `-q/--quick MESSAGE` sends one message, prints the reply and exits.
//
// stdout is the transcript: at a terminal each turn is prompted with "> "; when stdin is not
// a terminal (piped) the message read is echoed after "> ", so both read the same. Each reply
// ends with a newline. Status lines and errors go to stderr.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
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
#include "tokenizer/chat_template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace vllm::cli {
namespace {

struct ChatArgs {
  std::string model;
  std::string chat_template;
  std::string system_prompt;
  std::string quick;
  engine::EngineArgs engine;  // --max-model-len, --kv-cache-memory-bytes, ... as `vllm serve`
  // Sampling (unset: generation_config.json, then vLLM's default).
  SamplerFlags sampler;
  int32_t max_tokens = 512;
  std::optional<int64_t> seed;
};

struct Message {
  std::string role;
  std::string content;
};

// Everything a session needs, loaded once.
struct ChatSession {
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<ChatTemplate> tmpl;
  nlohmann::json special_tokens;
  std::unique_ptr<engine::EngineCore> core;
  SamplingParams params;
  int turn = 0;
};

SamplingParams sampling_params(const ChatArgs& args, const GenerationConfig& generation) {
  SamplingParams p = sampler_params(generation, args.sampler);
  p.max_tokens = args.max_tokens;
  p.seed = args.seed;
  return p;
}

Expected<ChatSession> open_session(const ChatArgs& args) {
  ChatSession s;
  engine::EngineArgs engine_args = args.engine;
  engine_args.model = args.model;
  engine_args.seed = args.seed;
  VLLM_ASSIGN_OR_RETURN(engine::LoadedEngine engine, engine::build_engine(engine_args));
  if (engine.tokenizer == nullptr) {
    return make_error(ErrorCode::kNotFound, "{}: no tokenizer.json; chat needs a tokenizer",
                      args.model);
  }
  s.tokenizer = std::move(engine.tokenizer);
  VLLM_ASSIGN_OR_RETURN(ModelChatTemplate loaded,
                        load_model_chat_template(args.model, args.chat_template));
  VLLM_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::parse(loaded.source, "chat template"));
  s.tmpl.emplace(std::move(tmpl));
  s.special_tokens = loaded.special_tokens;

  s.core = std::move(engine.core);
  s.params = sampling_params(args, engine.generation);
  SamplingParams check = s.params;
  VLLM_RETURN_IF_ERROR(s.core->validate_request({0}, check));
  return s;
}

Expected<std::string> render(const ChatSession& s, const std::vector<Message>& messages) {
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  for (auto it = s.special_tokens.begin(); it != s.special_tokens.end(); ++it) {
    context[it.key()] = it.value();
  }
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const Message& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  context["messages"] = std::move(list);
  context["tools"] = nullptr;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = true;
  return s.tmpl->render(context);
}

// One assistant turn: streams the reply to stdout and returns its full text.
Expected<std::string> reply(ChatSession& s, const std::vector<Message>& messages) {
  VLLM_ASSIGN_OR_RETURN(std::string prompt, render(s, messages));
  // As vLLM's chat path: the rendered template already holds its special tokens.
  VLLM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, s.tokenizer->encode(prompt, false));
  const std::string id = fmt::format("chat-{}", s.turn++);
  engine::OutputProcessor processor(s.tokenizer.get());
  VLLM_ASSIGN_OR_RETURN(auto children, processor.add_request(id, ids, s.params));
  for (const auto& child : children) {
    VLLM_RETURN_IF_ERROR(s.core->add_request(child.request_id, ids, child.params));
  }
  std::string text;
  while (s.core->has_unfinished_requests() || processor.has_unfinished()) {
    auto outputs = s.core->step();
    if (!outputs) {
      // Leave no half-finished request behind for the next turn.
      std::vector<std::string> ids_to_abort;
      for (const auto& child : children) ids_to_abort.push_back(child.request_id);
      s.core->abort_requests(ids_to_abort);
      (void)s.core->step();
      std::fputc('\n', stdout);
      return outputs.status();
    }
    std::vector<std::string> to_abort;
    for (const engine::RequestOutput& r : processor.process(*outputs, &to_abort)) {
      const engine::CompletionOutput& c = r.outputs[0];
      std::fwrite(c.delta.data(), 1, c.delta.size(), stdout);
      std::fflush(stdout);
      if (r.finished) text = c.text;
    }
    if (!to_abort.empty()) s.core->abort_requests(to_abort);
  }
  std::fputc('\n', stdout);
  std::fflush(stdout);
  return text;
}

bool is_quit(const std::string& line) {
  return line == "quit" || line == "exit";
}

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  const size_t end = s.find_last_not_of(" \t\r\n");
  return s.substr(begin, end - begin + 1);
}

int run_chat(ChatArgs& args) {
  auto model_dir = resolve_model_dir(args.model);
  if (!model_dir) {
    VLLM_LOG_ERROR("{}", model_dir.status().message());
    return 1;
  }
  args.model = *model_dir;
  auto session = open_session(args);
  if (!session) {
    VLLM_LOG_ERROR("{}", session.status().to_string());
    return 1;
  }
  std::vector<Message> conversation;
  if (!args.system_prompt.empty()) conversation.push_back({"system", args.system_prompt});

  auto turn = [&](const std::string& message) -> bool {
    conversation.push_back({"user", message});
    auto text = reply(*session, conversation);
    if (!text) {
      std::fprintf(stderr, "error: %s\n", text.status().to_string().c_str());
      conversation.pop_back();  // the session goes on without the failed turn
      return false;
    }
    conversation.push_back({"assistant", *text});
    return true;
  };

  if (!args.quick.empty()) return turn(args.quick) ? 0 : 1;

  const bool interactive = isatty(STDIN_FILENO) != 0;
  std::fprintf(stderr, "Using model: %s\n", args.model.c_str());
  if (interactive) {
    std::fprintf(stderr, "Please enter a message for the chat model (quit or Ctrl-D to end):\n");
  }
  std::string line;
  while (true) {
    if (interactive) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) {
      if (interactive) std::fputc('\n', stdout);  // end the "> " line that Ctrl-D left
      break;
    }
    const std::string message = trim(line);
    if (message.empty()) continue;
    if (!interactive) std::printf("> %s\n", message.c_str());
    if (is_quit(message)) break;
    turn(message);
  }
  return 0;
}

}  // namespace

Runner add_chat_command(CLI::App& app) {
  auto args = std::make_shared<ChatArgs>();
  CLI::App* cmd = app.add_subcommand("chat", "Chat with a model in the terminal");
  cmd->add_option("--model", args->model,
                  fmt::format("Model folder (Hugging Face layout); default: the demo model "
                              "models/{}",
                              kDefaultModelName));
  cmd->add_option("--system-prompt", args->system_prompt,
                  "A system message that opens the conversation");
  cmd->add_option("-q,--quick", args->quick, "Send one message, print the reply and exit");
  cmd->add_option("--chat-template", args->chat_template,
                  "Chat template file (or the template text) to use instead of the model's");
  add_engine_flags(cmd, &args->engine);
  add_sampler_flags(cmd, &args->sampler);
  cmd->add_option("--max-tokens", args->max_tokens, "Most tokens per reply (default 512)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", args->seed, "Random seed for sampling");
  return [args] { return run_chat(*args); };
}

}  // namespace vllm::cli
