// Cross-origin resource sharing for `vllm serve`, as vLLM configures Starlette's
// CORSMiddleware from --allowed-origins / --allowed-methods / --allowed-headers /
// --allow-credentials (each list defaults to ["*"], credentials to off).
//
// Requests without an Origin header are untouched. A preflight (OPTIONS with
// Access-Control-Request-Method) is answered here, 200 "OK" or 400 "Disallowed CORS
// origin, method, headers", without reaching the endpoints or the API key check. Any other
// request with an Origin gets the "simple" headers added to its response: the allowed
// origin ("*", or the request's origin echoed with Vary: Origin when origins are listed or
// a cookie came along) and Access-Control-Allow-Credentials when enabled.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace vllm::server {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct CorsOptions {
  std::vector<std::string> allowed_origins = {"*"};
  std::vector<std::string> allowed_methods = {"*"};
  std::vector<std::string> allowed_headers = {"*"};
  bool allow_credentials = false;
};

// A flag value as vLLM reads it: a JSON list of strings ('["http://a.com", "http://b.com"]').
// kInvalidArgument naming the flag otherwise.
Expected<std::vector<std::string>> parse_cors_list(std::string_view flag, std::string_view value);

class CorsPolicy {
 public:
  explicit CorsPolicy(CorsOptions options);

  struct Preflight {
    int status = 200;  // 200, or 400 when origin, method or headers are not allowed
    std::string body;  // "OK" or "Disallowed CORS origin, method, headers"
    HeaderList headers;
  };
  // The answer to a preflight request (the caller checked it is one).
  Preflight preflight(std::string_view origin, std::string_view requested_method,
                      const std::string* requested_headers) const;
  // Headers to add to the response of a non-preflight request that carried `origin`.
  HeaderList simple_headers(std::string_view origin, bool has_cookie) const;

 private:
  bool origin_allowed(std::string_view origin) const;

  CorsOptions options_;
  std::vector<std::string> methods_;        // "*" expanded
  std::vector<std::string> lower_headers_;  // allowed + safelisted, lowercase
  std::string allow_headers_value_;         // sorted, for preflights when not "*"
  bool all_origins_ = false;
  bool all_headers_ = false;
};

}  // namespace vllm::server
