// Leveled logging to stderr, as vLLM's logger: "INFO 11-29 09:30:01 [file.cpp:42] message".
//
// The level comes from VLLM_LOGGING_LEVEL (DEBUG, INFO, WARNING, ERROR; default INFO), as in
// vLLM, or from set_level(). Formatting uses fmt syntax and costs nothing below the level.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>

#include "base/status.h"

namespace vllm::log {

enum class Level : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kOff = 4 };

Expected<Level> parse_level(std::string_view name);
void set_level(Level level);
Level level();
bool enabled(Level level);

// Starts every line with `prefix` (as vLLM's workers do: "(Worker rank=1 pid=42) INFO ...");
// call before other threads log.
void set_line_prefix(const std::string& prefix);

// Writes one line; thread-safe (lines from different threads never interleave).
void write(Level level, const char* file, int line, std::string_view message);

}  // namespace vllm::log

#define VLLM_LOG(level, ...)                                                   \
  do {                                                                         \
    if (::vllm::log::enabled(level))                                           \
      ::vllm::log::write(level, __FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
  } while (0)
#define VLLM_LOG_DEBUG(...) VLLM_LOG(::vllm::log::Level::kDebug, __VA_ARGS__)
#define VLLM_LOG_INFO(...) VLLM_LOG(::vllm::log::Level::kInfo, __VA_ARGS__)
#define VLLM_LOG_WARNING(...) VLLM_LOG(::vllm::log::Level::kWarning, __VA_ARGS__)
#define VLLM_LOG_ERROR(...) VLLM_LOG(::vllm::log::Level::kError, __VA_ARGS__)
