#include "base/logging.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

namespace vllm::log {
namespace {

Level level_from_env() {
  const char* env = std::getenv("VLLM_LOGGING_LEVEL");
  if (env == nullptr || *env == '\0') return Level::kInfo;
  auto parsed = parse_level(env);
  if (!parsed) {
    std::fprintf(stderr, "vllm: ignoring VLLM_LOGGING_LEVEL: %s\n",
                 parsed.status().message().c_str());
    return Level::kInfo;
  }
  return *parsed;
}

std::atomic<int>& current_level() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> instance = [] {
    auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    auto created = std::make_shared<spdlog::logger>("vllm", sink);
    created->set_pattern("%^%L%$ %m-%d %H:%M:%S %v");
    created->set_level(spdlog::level::trace);  // filtering happens in enabled()
    return created;
  }();
  return *instance;
}

spdlog::level::level_enum to_spdlog(Level level) {
  switch (level) {
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarning:
      return spdlog::level::warn;
    case Level::kError:
      return spdlog::level::err;
    case Level::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::info;
}

}  // namespace

Expected<Level> parse_level(std::string_view name) {
  std::string upper(name);
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (upper == "DEBUG") return Level::kDebug;
  if (upper == "INFO") return Level::kInfo;
  if (upper == "WARNING" || upper == "WARN") return Level::kWarning;
  if (upper == "ERROR") return Level::kError;
  if (upper == "OFF" || upper == "CRITICAL") return Level::kOff;
  return make_error(ErrorCode::kInvalidArgument,
                    "unknown log level '{}' (expected DEBUG, INFO, WARNING, ERROR or OFF)", name);
}

void set_level(Level level) {
  current_level().store(static_cast<int>(level));
}

Level level() {
  return static_cast<Level>(current_level().load());
}

bool enabled(Level level) {
  return level != Level::kOff && static_cast<int>(level) >= current_level().load();
}

void set_line_prefix(const std::string& prefix) {
  std::string escaped;
  for (char c : prefix) {
    if (c == '%') escaped += '%';
    escaped += c;
  }
  logger().set_pattern(escaped + "%^%L%$ %m-%d %H:%M:%S %v");
}

void write(Level level, const char* file, int line, std::string_view message) {
  const char* base = std::strrchr(file, '/');
  base = base != nullptr ? base + 1 : file;
  logger().log(to_spdlog(level), "[{}:{}] {}", base, line, message);
}

}  // namespace vllm::log
