// Typed errors for expected failures (bad files, bad requests, missing resources).
//
// Library code never throws across a public API and never exits: a function that can fail
// returns `Status` or `Expected<T>`, whose message says what is wrong and, where it helps,
// what to do about it ("model.safetensors: header length 9000 is past the end of the file
// (file is 512 bytes)"). Broken invariants (programming errors) use VLLM_CHECK instead.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace vllm {

enum class ErrorCode : uint8_t {
  kOk = 0,
  kInvalidArgument,    // a caller passed something malformed (request field, CLI flag, shape)
  kNotFound,           // a named file, tensor, model or key does not exist
  kIoError,            // the OS refused (open, read, mmap)
  kInvalidFormat,      // a file exists but its contents are malformed
  kOutOfRange,         // a value is outside what is allowed (token id, length, offset)
  kUnsupported,        // well-formed but not implemented here (dtype, architecture, rope type)
  kResourceExhausted,  // out of memory, blocks, slots
  kInternal,           // an invariant that should not fail did; a bug
};

std::string_view error_code_name(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }

  bool is_ok() const { return code_ == ErrorCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "invalid format: model.safetensors: header is not JSON (...)".
  std::string to_string() const;

  // Returns the same error with "context: " prepended to the message.
  Status with_context(std::string_view context) const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

template <typename... Args>
Status make_error(ErrorCode code, fmt::format_string<Args...> format, Args&&... args) {
  return Status(code, fmt::format(format, std::forward<Args>(args)...));
}

// A value or the error that prevented it. Construct from a T or from a non-ok Status.
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : storage_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Expected(Status status) : storage_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(storage_).is_ok()) {
      storage_ = Status(ErrorCode::kInternal, "Expected constructed from an ok Status");
    }
  }

  bool has_value() const { return std::holds_alternative<T>(storage_); }
  bool is_ok() const { return has_value(); }
  explicit operator bool() const { return has_value(); }

  const Status& status() const {
    static const Status kOkStatus;
    return has_value() ? kOkStatus : std::get<Status>(storage_);
  }

  T& value() & { return checked(); }
  const T& value() const& { return const_cast<Expected*>(this)->checked(); }
  T&& value() && { return std::move(checked()); }
  T* operator->() { return &checked(); }
  const T* operator->() const { return &const_cast<Expected*>(this)->checked(); }
  T& operator*() & { return checked(); }
  const T& operator*() const& { return const_cast<Expected*>(this)->checked(); }

 private:
  T& checked();

  std::variant<T, Status> storage_;
};

[[noreturn]] void check_failed(const char* file, int line, const char* condition,
                               const std::string& message);

template <typename T>
T& Expected<T>::checked() {
  if (!has_value()) {
    check_failed(__FILE__, __LINE__, "Expected::value() on an error",
                 std::get<Status>(storage_).to_string());
  }
  return std::get<T>(storage_);
}

}  // namespace vllm

#define VLLM_STATUS_CONCAT_INNER(a, b) a##b
#define VLLM_STATUS_CONCAT(a, b) VLLM_STATUS_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` (a Status) is an error.
#define VLLM_RETURN_IF_ERROR(expr)                          \
  do {                                                      \
    ::vllm::Status vllm_status_tmp_ = (expr);               \
    if (!vllm_status_tmp_.is_ok()) return vllm_status_tmp_; \
  } while (0)

// `VLLM_ASSIGN_OR_RETURN(auto x, f());` declares x from an Expected, or returns its error.
#define VLLM_ASSIGN_OR_RETURN(lhs, expr) \
  VLLM_ASSIGN_OR_RETURN_IMPL(VLLM_STATUS_CONCAT(vllm_expected_, __LINE__), lhs, expr)
#define VLLM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.has_value()) return tmp.status();       \
  lhs = std::move(tmp).value()

// Invariants: a failure is a bug in vllm.cpp, reported with file:line, then abort().
#define VLLM_CHECK(cond)                                              \
  do {                                                                \
    if (!(cond)) ::vllm::check_failed(__FILE__, __LINE__, #cond, ""); \
  } while (0)
#define VLLM_CHECK_MSG(cond, ...)                                                           \
  do {                                                                                      \
    if (!(cond)) ::vllm::check_failed(__FILE__, __LINE__, #cond, fmt::format(__VA_ARGS__)); \
  } while (0)
