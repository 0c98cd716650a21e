#include "cli/serve_noop_flags.h"

#include <string_view>

#include "base/logging.h"

namespace vllm::cli {
namespace {

struct NoopFlag {
  const char* name;
  bool takes_value;
  const char* why;
};

constexpr NoopFlag kNoopFlags[] = {
    {"--enable-chunked-prefill", false, "chunked prefill is always on"},
    {"--no-enable-chunked-prefill", false, "chunked prefill is always on"},
    {"--swap-space", true, "preempted requests are recomputed, never swapped to CPU memory"},
    {"--disable-log-stats", false, "no periodic engine statistics are logged"},
    {"--disable-log-requests", false, "requests are logged only with --enable-log-requests"},
    {"--trust-remote-code", false, "no code is ever loaded from a model folder"},
    {"--disable-uvicorn-access-log", false, "there is no uvicorn and no access log"},
    {"--uvicorn-log-level", true, "there is no uvicorn; VLLM_LOGGING_LEVEL sets the log level"},
    {"--disable-fastapi-docs", false, "there are no API documentation pages"},
    {"--disable-frontend-multiprocessing", false, "the server and the engine share one process"},
    {"--use-v2-block-manager", false, "the block manager is always vLLM V1's"},
};

std::string_view reason(std::string_view name) {
  for (const NoopFlag& f : kNoopFlags) {
    if (name == f.name) return f.why;
  }
  return "";
}

}  // namespace

void add_noop_flags(CLI::App* cmd, NoopFlags* flags) {
  for (const NoopFlag& f : kNoopFlags) {
    if (cmd->get_option_no_throw(f.name) != nullptr) continue;
    const std::string name = f.name;
    if (f.takes_value) {
      cmd->add_option_function<std::string>(
             name, [flags, name](const std::string&) { flags->given.push_back(name); },
             std::string("No effect in vllm.cpp: ") + f.why)
          ->group("vLLM flags without effect");
    } else {
      cmd->add_flag_callback(
             name, [flags, name] { flags->given.push_back(name); },
             std::string("No effect in vllm.cpp: ") + f.why)
          ->group("vLLM flags without effect");
    }
  }
}

void warn_noop_flags(const NoopFlags& flags) {
  for (const std::string& name : flags.given) {
    VLLM_LOG_WARNING("{} has no effect in vllm.cpp ({}); ignored", name, reason(name));
  }
}

}  // namespace vllm::cli
