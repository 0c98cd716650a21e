#include "server/api_error.h"

namespace vllm::server {

std::string_view error_type_for_status(int status) {
  switch (status) {
    case 400:
      return "BadRequestError";
    case 401:
      return "AuthenticationError";
    case 403:
      return "PermissionDeniedError";
    case 404:
      return "NotFoundError";
    case 405:
      return "MethodNotAllowedError";
    case 413:
      return "RequestEntityTooLargeError";
    case 415:
      return "UnsupportedMediaTypeError";
    case 422:
      return "UnprocessableEntityError";
    case 429:
      return "RateLimitError";
    case 503:
      return "ServiceUnavailableError";
    default:
      return status >= 500 ? "InternalServerError" : "BadRequestError";
  }
}

ApiError make_api_error(int status, std::string message, std::optional<std::string> param) {
  ApiError e;
  e.status = status;
  e.type = std::string(error_type_for_status(status));
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

ApiError api_error_from_status(const Status& status) {
  int code = 400;
  switch (status.code()) {
    case ErrorCode::kNotFound:
      code = 404;
      break;
    case ErrorCode::kResourceExhausted:
      code = 503;
      break;
    case ErrorCode::kInternal:
    case ErrorCode::kIoError:
      code = 500;
      break;
    default:
      code = 400;
      break;
  }
  return make_api_error(code, status.message());
}

nlohmann::json ApiError::to_json() const {
  nlohmann::json error = {{"message", message}, {"type", type}, {"code", status}};
  error["param"] = param ? nlohmann::json(*param) : nlohmann::json(nullptr);
  return {{"error", error}};
}

std::string ApiError::body() const {
  return to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace vllm::server
