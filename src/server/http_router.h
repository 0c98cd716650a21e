// The application side of `vllm serve`'s HTTP layer: one parsed request in, one response out,
// with no sockets involved (http_server.h moves the bytes). Knows vLLM's routes and what
// wraps them, in the order vLLM's FastAPI app applies it:
//   --root-path     a path under the prefix is routed as the path without it (a proxy may or
//                   may not strip it)
//   CORS            preflights answered here; other responses get the CORS headers (cors.h)
//   --api-key       "Authorization: Bearer KEY" on /v1/* (not on OPTIONS), else 401
//   routes          GET /health (503 once the engine has died), GET|POST /ping (the same),
//                   GET /version, GET /metrics, GET /v1/models, POST /tokenize, /detokenize,
//                   /v1/completions, /v1/chat/completions; HEAD wherever GET is allowed; a
//                   known path with another method is 405 with Allow; anything else 404
// Every error body has OpenAI's shape. A generation endpoint answers with a ResponseStream
// (serving.h) that the HTTP layer drives until it completes.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/engine_client.h"
#include "server/api_error.h"
#include "server/cors.h"
#include "server/metrics.h"
#include "server/serving.h"

namespace vllm::server {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: path and query
  HeaderList headers;  // names as sent
  std::string body;

  // The first value of a header (names compare case-insensitively), or null.
  const std::string* header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type;  // empty: no Content-Type
  HeaderList headers;        // more headers
  std::string body;
  // Set for a generation: the body (streaming: the events) comes from it instead.
  std::unique_ptr<ResponseStream> stream;
};

struct RouterOptions {
  std::optional<std::string> api_key;
  std::string root_path;  // "" or "/prefix"
  CorsOptions cors;
  bool request_id_headers = false;  // --enable-request-id-headers: X-Request-Id on responses
};

class Router {
 public:
  Router(OpenAIServing* serving, engine::EngineClient* client, ServerMetrics* metrics,
         RouterOptions options);

  HttpResponse handle(HttpRequest& request) const;
  // An error the transport decided (bad request line, header or body too large), with the
  // CORS headers the request would get.
  HttpResponse transport_error(const HttpRequest* request, int status, std::string message) const;

 private:
  HttpResponse route(HttpRequest& request, std::string_view path) const;
  void add_cors(const HttpRequest& request, HttpResponse* response) const;

  OpenAIServing* serving_;
  engine::EngineClient* client_;
  ServerMetrics* metrics_;
  RouterOptions options_;
  CorsPolicy cors_;
};

HttpResponse error_response(const ApiError& error);

}  // namespace vllm::server
