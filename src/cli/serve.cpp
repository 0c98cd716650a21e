// `vllm serve [MODEL]`: the OpenAI-compatible server, with vLLM's flags.
//
// Builds the engine as `vllm generate` does (engine_flags.h), the serving layer with the
// model's tokenizer, chat template and generation_config.json defaults (--generation-config
// auto; "vllm" ignores the file, a folder reads that folder's), and serves HTTP until SIGTERM
// or SIGINT: then it stops accepting connections, finishes the requests in flight and exits 0.
// If the engine dies it exits 1 (after answering /health with 503 meanwhile), as vLLM does.
// MODEL is a folder, a Hugging Face id found in the local Hugging Face cache (hf_cache.h), or
// nothing: the demo model (default_model.h). vLLM flags that mean nothing here are accepted
// with a warning (serve_noop_flags.h).
#include <signal.h>
#include <sys/resource.h>
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
#include <tuple>
#include <vector>

#include "base/logging.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/engine_flags.h"
#include "cli/hf_cache.h"
#include "cli/serve_noop_flags.h"
#include "server/cors.h"
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
  size_t http_threads = 0;
  double http_request_timeout = 60.0;
  size_t h11_max_incomplete_event_size = 4194304;
  size_t h11_max_header_count = 256;
  std::string ssl_keyfile, ssl_certfile, ssl_ca_certs, ssl_ciphers;
  int ssl_cert_reqs = 0;
  std::string allowed_origins = R"(["*"])";
  std::string allowed_methods = R"(["*"])";
  std::string allowed_headers = R"(["*"])";
  bool allow_credentials = false;
  std::string root_path;
  bool enable_log_requests = false;
  bool enable_log_outputs = false;
  std::optional<int64_t> max_log_len;
  bool enable_request_id_headers = false;
  std::string revision = "main";
  std::optional<std::string> download_dir;
  std::optional<int64_t> seed;
  engine::EngineArgs engine;
  NoopFlags noop;
};

Expected<std::string> resolve_model(const ServeArgs& args) {
  if (!args.model_positional.empty() && !args.model.empty() &&
      args.model_positional != args.model) {
    return make_error(ErrorCode::kInvalidArgument, "two models given: {} and --model {}",
                      args.model_positional, args.model);
  }
  std::string model = !args.model_positional.empty() ? args.model_positional : args.model;
  VLLM_ASSIGN_OR_RETURN(model, resolve_model_dir(model));  // the demo model when empty
  if (std::filesystem::is_directory(model)) return model;
  // Not a folder: a Hugging Face id is looked up in the local cache, as vLLM does offline.
  if (is_hf_repo_id(model) && !std::filesystem::exists(model)) {
    VLLM_ASSIGN_OR_RETURN(auto snapshot, find_hf_snapshot(model, args.revision, args.download_dir));
    VLLM_LOG_INFO("model {} (revision {}) found in the Hugging Face cache: {}", model,
                  args.revision, snapshot.string());
    return snapshot.string();
  }
  return make_error(ErrorCode::kNotFound, "model folder {} does not exist", model);
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

// vLLM raises the open-file limit so that many clients can connect; so do we.
void raise_open_file_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t want = std::min<rlim_t>(limit.rlim_max, 65535);
  if (limit.rlim_cur >= want) return;
  const rlim_t before = limit.rlim_cur;
  limit.rlim_cur = want;
  if (setrlimit(RLIMIT_NOFILE, &limit) == 0) {
    VLLM_LOG_DEBUG("open-file limit raised from {} to {}", before, want);
  }
}

// Seconds from an environment variable (vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE), or `fallback`.
std::chrono::milliseconds env_seconds(const char* name, double fallback) {
  double value = fallback;
  if (const char* text = std::getenv(name)) {
    char* end = nullptr;
    const double parsed = std::strtod(text, &end);
    if (end != text && *end == '\0' && parsed > 0) {
      value = parsed;
    } else {
      VLLM_LOG_WARNING("{}={}: not a positive number of seconds; using {}", name, text, fallback);
    }
  }
  return std::chrono::milliseconds(static_cast<int64_t>(value * 1000));
}

bool env_flag(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) return false;
  const std::string v(text);
  return v == "1" || v == "true" || v == "True" || v == "TRUE";
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
  warn_noop_flags(args.noop);
  raise_open_file_limit();

  server::CorsOptions cors;
  cors.allow_credentials = args.allow_credentials;
  for (auto [flag, text, list] :
       {std::tuple{"--allowed-origins", &args.allowed_origins, &cors.allowed_origins},
        std::tuple{"--allowed-methods", &args.allowed_methods, &cors.allowed_methods},
        std::tuple{"--allowed-headers", &args.allowed_headers, &cors.allowed_headers}}) {
    auto parsed = server::parse_cors_list(flag, *text);
    if (!parsed) {
      VLLM_LOG_ERROR("{}", parsed.status().message());
      return 2;
    }
    *list = std::move(*parsed);
  }
  if (!args.root_path.empty() && (args.root_path.front() != '/' || args.root_path.back() == '/')) {
    VLLM_LOG_ERROR("--root-path {}: must start with '/' and not end with one (e.g. /llm)",
                   args.root_path);
    return 2;
  }
  if (args.enable_log_outputs && !args.enable_log_requests) {
    VLLM_LOG_ERROR("--enable-log-outputs requires --enable-log-requests");
    return 2;
  }
  if (args.ssl_keyfile.empty() != args.ssl_certfile.empty()) {
    VLLM_LOG_ERROR("TLS needs both --ssl-keyfile and --ssl-certfile");
    return 2;
  }

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
  // As vLLM: with a reasoning parser, grammars apply once the reasoning has ended.
  if (!args.reasoning_parser.empty() && tokenizer && loaded->core->structured_outputs()) {
    if (auto end = tokenizer->token_to_id("</think>")) {
      loaded->core->structured_outputs()->set_reasoning_tokens(tokenizer->token_to_id("<think>"),
                                                               *end);
    }
  }
  auto client = std::make_unique<engine::EngineClient>(std::move(loaded->core));
  // Test hook: VLLM_TEST_ENGINE_FAIL_AFTER_STEPS=N makes the engine's N-th step fail, which
  // kills the engine (the end-to-end tests check /health and the exit status with it).
  if (const char* fail = std::getenv("VLLM_TEST_ENGINE_FAIL_AFTER_STEPS")) {
    const long steps = std::strtol(fail, nullptr, 10);
    if (steps > 0) {
      VLLM_LOG_WARNING("VLLM_TEST_ENGINE_FAIL_AFTER_STEPS={}: the engine will fail on purpose",
                       steps);
      client->fail_after_steps(steps);
    }
  }

  server::ServingOptions options;
  const bool demo = args.model_positional.empty() && args.model.empty();
  const std::string& given = !args.model_positional.empty() ? args.model_positional : args.model;
  options.served_model_names = args.served_model_names;
  if (options.served_model_names.empty()) {
    // As vLLM: the model argument as given; the demo model (none given) by its short name.
    options.served_model_names.push_back(demo ? std::string(kDefaultModelName) : given);
  }
  options.model_root = demo ? *model : given;
  if (!args.tool_call_parser.empty()) options.tool_call_parser = args.tool_call_parser;
  options.enable_auto_tool_choice = args.enable_auto_tool_choice;
  options.enable_prompt_tokens_details = args.enable_prompt_tokens_details;
  if (!args.reasoning_parser.empty()) options.reasoning_parser = args.reasoning_parser;
  options.default_params = generation_defaults(*generation);
  if (generation->max_new_tokens) {
    options.default_max_tokens = static_cast<int32_t>(*generation->max_new_tokens);
  }
  options.log_requests = args.enable_log_requests;
  options.log_options.max_log_len = args.max_log_len;
  options.log_options.log_outputs = args.enable_log_outputs;
  server::ServerMetrics metrics(options.served_model_names.front(), client->max_model_len());
  client->set_step_observer([&metrics](const engine::EngineClient::StepStats& step) {
    metrics.record_iteration(step.num_prompt_tokens + step.num_generation_tokens);
  });
  // The engine outlives `metrics`: detach the observer first, however this function ends.
  struct ObserverReset {
    engine::EngineClient* client;
    ~ObserverReset() { client->set_step_observer(nullptr); }
  } observer_reset{client.get()};
  server::OpenAIServing serving(client.get(), tokenizer.get(), std::move(*chat_template),
                                std::move(special_tokens), &metrics, options);

  server::HttpServerOptions http_options;
  http_options.host = args.host;
  http_options.port = args.port;
  if (!args.api_key.empty()) http_options.api_key = args.api_key;
  http_options.max_request_bytes = args.max_request_bytes;
  http_options.max_header_bytes = args.h11_max_incomplete_event_size;
  http_options.max_header_count = args.h11_max_header_count;
  http_options.num_threads = args.http_threads;
  http_options.keep_alive_timeout = env_seconds("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", 5.0);
  http_options.request_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(args.http_request_timeout * 1000));
  http_options.root_path = args.root_path;
  http_options.cors = cors;
  http_options.tls.keyfile = args.ssl_keyfile;
  http_options.tls.certfile = args.ssl_certfile;
  http_options.tls.ca_certs = args.ssl_ca_certs;
  http_options.tls.cert_reqs = args.ssl_cert_reqs;
  http_options.tls.ciphers = args.ssl_ciphers;
  http_options.request_id_headers = args.enable_request_id_headers;
  http_options.exit_on_engine_death = !env_flag("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH");
  server::HttpServer http(&serving, client.get(), &metrics, http_options);
  Status bound = http.bind();
  if (!bound.is_ok()) {
    VLLM_LOG_ERROR("{}", bound.to_string());
    return bound.code() == ErrorCode::kIoError ? 1 : 2;
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
  VLLM_LOG_INFO("serving {} as '{}' (max_model_len {}, {} I/O threads)", *model,
                options.served_model_names.front(), client->max_model_len(), http.num_io_threads());
  std::fprintf(stderr, "vllm serve: listening on %s://%s:%d%s\n",
               http_options.tls.enabled() ? "https" : "http", args.host.c_str(), http.port(),
               args.root_path.c_str());
  std::fflush(stderr);
  http.run();
  const char quit = 'Q';
  if (::write(g_signal_pipe[1], &quit, 1) != 1) VLLM_LOG_WARNING("signal pipe write failed");
  signals.join();
  if (client->dead()) {
    VLLM_LOG_ERROR("server stopped: the engine died ({})", client->death_status().message());
    return 1;
  }
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
                  "I/O threads serving all connections (default: the cores, at most 4)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--http-request-timeout", args->http_request_timeout,
                  "Seconds a request may take to arrive whole (default 60)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--h11-max-incomplete-event-size", args->h11_max_incomplete_event_size,
                  "Largest request header block in bytes (default 4 MiB; 431 above)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--h11-max-header-count", args->h11_max_header_count,
                  "Most header fields in a request (default 256; 431 above)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--ssl-keyfile", args->ssl_keyfile, "TLS private key (PEM)");
  cmd->add_option("--ssl-certfile", args->ssl_certfile, "TLS certificate chain (PEM)");
  cmd->add_option("--ssl-ca-certs", args->ssl_ca_certs, "CA certificates to verify clients with");
  cmd->add_option("--ssl-cert-reqs", args->ssl_cert_reqs,
                  "Client certificates: 0 none (default), 1 optional, 2 required")
      ->check(CLI::Range(0, 2));
  cmd->add_option("--ssl-ciphers", args->ssl_ciphers, "TLS 1.2 cipher list (OpenSSL syntax)");
  cmd->add_option("--allowed-origins", args->allowed_origins,
                  "CORS: allowed origins, a JSON list (default [\"*\"])");
  cmd->add_option("--allowed-methods", args->allowed_methods,
                  "CORS: allowed methods, a JSON list (default [\"*\"])");
  cmd->add_option("--allowed-headers", args->allowed_headers,
                  "CORS: allowed headers, a JSON list (default [\"*\"])");
  cmd->add_flag("--allow-credentials", args->allow_credentials, "CORS: allow credentials");
  cmd->add_option("--root-path", args->root_path,
                  "Path prefix the server sits under behind a proxy (e.g. /llm)");
  cmd->add_flag("--enable-log-requests", args->enable_log_requests, "Log each request");
  cmd->add_flag("--enable-log-outputs", args->enable_log_outputs,
                "Log each response too (needs --enable-log-requests)");
  cmd->add_option("--max-log-len", args->max_log_len,
                  "Cut logged prompts, outputs and token lists to this length")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--enable-request-id-headers", args->enable_request_id_headers,
                "Add X-Request-Id to responses");
  cmd->add_option("--revision", args->revision,
                  "Revision of a Hugging Face model id in the cache (default main)");
  cmd->add_option("--download-dir", args->download_dir,
                  "Hugging Face cache folder to find model ids in (default: HF_HOME's)");
  cmd->add_option("--seed", args->seed, "Engine random seed");
  add_engine_flags(cmd, &args->engine);
  add_noop_flags(cmd, &args->noop);
  return [args] { return run_serve(*args); };
}

}  // namespace vllm::cli
