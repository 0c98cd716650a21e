// Errors as the OpenAI API (and vLLM's server) returns them:
//   HTTP 400  {"error": {"message": "...", "type": "BadRequestError", "param": null, "code": 400}}
// Request handling returns Status / Expected like the rest of the code; the HTTP layer turns
// a Status into this shape by its code (kNotFound -> 404 NotFoundError, kInternal -> 500,
// kResourceExhausted -> 503, anything else a client sent -> 400). Statuses the HTTP layer
// decides itself (401, 404 for routes, 405, 413) are built directly.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace vllm::server {

struct ApiError {
  int status = 400;
  std::string type = "BadRequestError";
  std::string message;
  std::optional<std::string> param;

  nlohmann::json to_json() const;
  std::string body() const;  // to_json() as text
};

// The OpenAI error type for an HTTP status ("BadRequestError", "NotFoundError", ...).
std::string_view error_type_for_status(int status);
ApiError make_api_error(int status, std::string message, std::optional<std::string> param = {});
ApiError api_error_from_status(const Status& status);

}  // namespace vllm::server
