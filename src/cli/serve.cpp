// `vllm serve [MODEL]`: the OpenAI-compatible server, with vLLM's flags.
//
// Builds the engine as `vllm generate` does (engine_flags.h), the serving layer with the
// model's tokenizer, chat template and generation_config.json defaults (--generation-config
// auto; "vllm" ignores the file, a folder reads that folder's), and serves HTTP until SIGTERM
// or SIGINT: then it stops accepting connections, finishes the requests in flight and exits 0.
// With no model it serves the demo model (default_model.h).
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/logging.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/engine_flags.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/reasoning_parser.h"
#include "server/serving.h"
#include "server/tool_parser.h"
#include "tokenizer/chat_template/chat_template.h"

namespace vllm::cli {
namespace {

// The demo model `vllm serve` runs when given none (relative to the working directory).

struct ServeArgs {
  std::string model_positional;
  std::string model;
  std::string host = "0.0.0.0";
  int port = 8000;
  std::string api_key;
  std::vector<std::string> served_model_names;
  std::string chat_template;
  std::string generation_config = "auto";
  std::string tool_call_parser;
  bool enable_auto_tool_choice = false;
  bool enable_prompt_tokens_details = false;
  std::string reasoning_parser;
  size_t max_request_bytes = 8u << 20;
  size_t http_threads = 256;
  std::optional<int64_t> seed;
  engine::EngineArgs engine;
};

Expected<std::string> resolve_model(const ServeArgs& args) {
  if (!args.model_positional.empty() && !args.model.empty() &&
      args.model_positional != args.model) {
    return make_error(ErrorCode::kInvalidArgument, "two models given: {} and --model {}",
                      args.model_positional, args.model);
  }
  std::string model = !args.model_positional.empty() ? args.model_positional : args.model;
  VLLM_ASSIGN_OR_RETURN(model, resolve_model_dir(model));  // the demo model when empty
  if (!std::filesystem::is_directory(model)) {
    return make_error(ErrorCode::kNotFound, "model folder {} does not exist", model);
  }
  return model;
}

Expected<GenerationConfig> generation_config(const ServeArgs& args, const std::string& model,
                                             const GenerationConfig& model_config) {
  if (args.generation_config == "auto") return model_config;
  if (args.generation_config == "vllm") return GenerationConfig{};
  if (!std::filesystem::is_directory(args.generation_config)) {
    return make_error(ErrorCode::kNotFound,
                      "--generation-config {}: not 'auto', 'vllm' or a folder",
                      args.generation_config);
  }
  return load_generation_config(args.generation_config);
}

// --chat-template: a file, else the template text itself (as vLLM).
Expected<std::unique_ptr<ChatTemplate>> load_chat_template(const ServeArgs& args,
                                                           const std::string& model,
                                                           nlohmann::json* special_tokens) {
  std::filesystem::path override_path;
  std::optional<std::string> inline_source;
  if (!args.chat_template.empty()) {
    if (std::filesystem::exists(args.chat_template)) {
      override_path = args.chat_template;
    } else if (args.chat_template.find("{") != std::string::npos) {
      inline_source = args.chat_template;
    } else {
      return make_error(ErrorCode::kNotFound, "--chat-template {}: no such file",
                        args.chat_template);
    }
  }
  auto loaded = load_model_chat_template(model, override_path);
  if (!loaded) {
    if (!inline_source) {
      VLLM_LOG_WARNING("no chat template ({}); /v1/chat/completions will refuse requests",
                       loaded.status().message());
      return std::unique_ptr<ChatTemplate>();
    }
  } else {
    *special_tokens = loaded->special_tokens;
  }
  const std::string source = inline_source ? *inline_source : loaded->source;
  VLLM_ASSIGN_OR_RETURN(ChatTemplate parsed, ChatTemplate::parse(source, "chat template"));
  return std::make_unique<ChatTemplate>(std::move(parsed));
}

// SIGTERM / SIGINT may land on any thread (BLAS starts its own before main), so the handler
// only writes a byte to a pipe; a watcher thread reads it and shuts the server down.
int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const char byte = sig == SIGTERM ? 'T' : 'I';
  const ssize_t ignored = ::write(g_signal_pipe[1], &byte, 1);
  (void)ignored;
}

void watch_signals(server::HttpServer* http) {
  char byte = 0;
  while (::read(g_signal_pipe[0], &byte, 1) < 0 && errno == EINTR) {
  }
  if (byte != 'T' && byte != 'I') return;  // 'Q': the server ended on its own
  VLLM_LOG_INFO("received {}: no new connections; finishing the requests in flight",
                byte == 'T' ? "SIGTERM" : "SIGINT");
  http->shutdown();
}

int run_serve(ServeArgs& args) {
  signal(SIGPIPE, SIG_IGN);  // a client that hung up is a failed write, not a dead server

  auto model = resolve_model(args);
  if (!model) {
    VLLM_LOG_ERROR("{}", model.status().message());
    return 2;
  }
  if (!args.tool_call_parser.empty() && !server::is_known_tool_parser(args.tool_call_parser)) {
    VLLM_LOG_ERROR("--tool-call-parser {}: unknown (available: hermes, qwen3_coder)",
                   args.tool_call_parser);
    return 2;
  }
  if (args.enable_auto_tool_choice && args.tool_call_parser.empty()) {
    VLLM_LOG_ERROR("--enable-auto-tool-choice needs --tool-call-parser");
    return 2;
  }
  if (!args.reasoning_parser.empty() && args.reasoning_parser != "qwen3") {
    VLLM_LOG_ERROR("--reasoning-parser {}: unknown (available: qwen3)", args.reasoning_parser);
    return 2;
  }
  if (args.api_key.empty()) {
    if (const char* env = std::getenv("VLLM_API_KEY")) args.api_key = env;
  }
  args.engine.model = *model;
  args.engine.seed = args.seed;
  auto loaded = engine::build_engine(args.engine);
  if (!loaded) {
    VLLM_LOG_ERROR("{}", loaded.status().to_string());
    return 1;
  }
  auto generation = generation_config(args, *model, loaded->generation);
  if (!generation) {
    VLLM_LOG_ERROR("{}", generation.status().to_string());
    return 2;
  }
  nlohmann::json special_tokens = nlohmann::json::object();
  auto chat_template = load_chat_template(args, *model, &special_tokens);
  if (!chat_template) {
    VLLM_LOG_ERROR("{}", chat_template.status().to_string());
    return 2;
  }
  std::unique_ptr<Tokenizer> tokenizer = std::move(loaded->tokenizer);
  auto client = std::make_unique<engine::EngineClient>(std::move(loaded->core));

  server::ServingOptions options;
  options.served_model_names = args.served_model_names;
  if (options.served_model_names.empty()) {
    // As vLLM: the model argument as given; the demo model (none given) by its short name.
    const bool demo = args.model_positional.empty() && args.model.empty();
    options.served_model_names.push_back(demo ? std::string(kDefaultModelName) : *model);
  }
  options.model_root = *model;
  if (!args.tool_call_parser.empty()) options.tool_call_parser = args.tool_call_parser;
  options.enable_auto_tool_choice = args.enable_auto_tool_choice;
  options.enable_prompt_tokens_details = args.enable_prompt_tokens_details;
  if (!args.reasoning_parser.empty()) options.reasoning_parser = args.reasoning_parser;
  options.default_params = generation_defaults(*generation);
  if (generation->max_new_tokens) {
    options.default_max_tokens = static_cast<int32_t>(*generation->max_new_tokens);
  }
  server::ServerMetrics metrics(options.served_model_names.front(), client->max_model_len());
  server::OpenAIServing serving(client.get(), tokenizer.get(), std::move(*chat_template),
                                std::move(special_tokens), &metrics, options);

  server::HttpServerOptions http_options;
  http_options.host = args.host;
  http_options.port = args.port;
  if (!args.api_key.empty()) http_options.api_key = args.api_key;
  http_options.max_request_bytes = args.max_request_bytes;
  http_options.num_threads = args.http_threads;
  server::HttpServer http(&serving, client.get(), &metrics, http_options);
  Status bound = http.bind();
  if (!bound.is_ok()) {
    VLLM_LOG_ERROR("{}", bound.to_string());
    return 1;
  }
  if (::pipe(g_signal_pipe) != 0) {
    VLLM_LOG_ERROR("cannot create the signal pipe");
    return 1;
  }
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  std::thread signals(watch_signals, &http);
  VLLM_LOG_INFO("serving {} as '{}' (max_model_len {})", *model, options.served_model_names.front(),
                client->max_model_len());
  std::fprintf(stderr, "vllm serve: listening on http://%s:%d\n", args.host.c_str(), http.port());
  std::fflush(stderr);
  http.run();
  const char quit = 'Q';
  if (::write(g_signal_pipe[1], &quit, 1) != 1) VLLM_LOG_WARNING("signal pipe write failed");
  signals.join();
  VLLM_LOG_INFO("server stopped");
  return 0;
}

}  // namespace

Runner add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model with an OpenAI-compatible HTTP API");
  cmd->add_option("model_tag", args->model_positional, "Model folder (default: the demo model)");
  cmd->add_option("--model", args->model, "Model folder (same as the positional MODEL)");
  cmd->add_option("--host", args->host, "Address to listen on (default 0.0.0.0)");
  cmd->add_option("--port", args->port, "Port (default 8000; 0 picks a free one)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", args->api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/* (or VLLM_API_KEY)");
  cmd->add_option("--served-model-name", args->served_model_names,
                  "Model name(s) the API answers to");
  cmd->add_option("--chat-template", args->chat_template, "Chat template file (or template text)");
  cmd->add_option("--generation-config", args->generation_config,
                  "auto (the model's generation_config.json) | vllm (ignore it) | FOLDER");
  cmd->add_option("--tool-call-parser", args->tool_call_parser, "hermes | qwen3_coder");
  cmd->add_flag("--enable-auto-tool-choice", args->enable_auto_tool_choice,
                "Parse tool calls out of the output when tool_choice is auto");
  cmd->add_flag("--enable-prompt-tokens-details", args->enable_prompt_tokens_details,
                "Report usage.prompt_tokens_details.cached_tokens (prefix-cache hits)");
  cmd->add_option("--reasoning-parser", args->reasoning_parser,
                  "qwen3: split <think> into reasoning_content");
  cmd->add_option("--max-request-bytes", args->max_request_bytes,
                  "Largest request body (default 8 MiB; 413 above)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--http-threads", args->http_threads,
                  "Concurrent connections served (default 256)")
      ->check(CLI::Range(4, 4096));
  cmd->add_option("--seed", args->seed, "Engine random seed");
  add_engine_flags(cmd, &args->engine);
  return [args] { return run_serve(*args); };
}

}  // namespace vllm::cli
