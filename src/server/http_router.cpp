#include "server/http_router.h"

#include <strings.h>

#include <algorithm>

#include "base/logging.h"

namespace vllm::server {
namespace {

constexpr char kJson[] = "application/json";

struct Route {
  const char* path;
  std::vector<const char*> methods;  // GET implies HEAD
};

const std::vector<Route>& routes() {
  // clang-format off
  static const std::vector<Route> kRoutes = {
      {"/health", {"GET"}},
      {"/ping", {"GET", "POST"}},
      {"/version", {"GET"}},
      {"/metrics", {"GET"}},
      {"/v1/models", {"GET"}},
      {"/tokenize", {"POST"}},
      {"/detokenize", {"POST"}},
      {"/v1/completions", {"POST"}},
      {"/v1/chat/completions", {"POST"}},
  };
  // clang-format on
  return kRoutes;
}

bool method_allowed(const Route& route, std::string_view method) {
  for (const char* m : route.methods) {
    if (method == m || (method == "HEAD" && std::string_view(m) == "GET")) return true;
  }
  return false;
}

std::string allow_header(const Route& route) {
  std::string out;
  for (const char* m : route.methods) {
    if (!out.empty()) out += ", ";
    out += m;
  }
  return out;
}

// Runs a handler; anything it throws becomes a 500 rather than a dead connection.
template <typename F>
HttpResponse guarded(F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    VLLM_LOG_ERROR("request failed: {}", e.what());
    return error_response(make_api_error(500, std::string("internal error: ") + e.what()));
  } catch (...) {
    return error_response(make_api_error(500, "internal error"));
  }
}

HttpResponse json_response(std::string body) {
  HttpResponse r;
  r.content_type = kJson;
  r.body = std::move(body);
  return r;
}

std::string random_hex_id() {
  std::string id = random_request_id("");
  return id;
}

}  // namespace

const std::string* HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key.size() == name.size() && strncasecmp(key.data(), name.data(), name.size()) == 0)
      return &value;
  }
  return nullptr;
}

HttpResponse error_response(const ApiError& error) {
  HttpResponse r;
  r.status = error.status;
  r.content_type = kJson;
  r.body = error.body();
  return r;
}

Router::Router(OpenAIServing* serving, engine::EngineClient* client, ServerMetrics* metrics,
               RouterOptions options)
    : serving_(serving),
      client_(client),
      metrics_(metrics),
      options_(std::move(options)),
      cors_(options_.cors) {}

void Router::add_cors(const HttpRequest& request, HttpResponse* response) const {
  const std::string* origin = request.header("Origin");
  if (origin == nullptr) return;
  HeaderList extra = cors_.simple_headers(*origin, request.header("Cookie") != nullptr);
  response->headers.insert(response->headers.end(), extra.begin(), extra.end());
}

HttpResponse Router::transport_error(const HttpRequest* request, int status,
                                     std::string message) const {
  HttpResponse r = error_response(make_api_error(status, std::move(message)));
  if (request != nullptr) add_cors(*request, &r);
  return r;
}

HttpResponse Router::handle(HttpRequest& request) const {
  std::string_view path = request.target;
  path = path.substr(0, path.find('?'));
  const std::string& root = options_.root_path;
  if (!root.empty() && path.size() >= root.size() && path.compare(0, root.size(), root) == 0 &&
      (path.size() == root.size() || path[root.size()] == '/')) {
    path.remove_prefix(root.size());
    if (path.empty()) path = "/";
  }

  const std::string* origin = request.header("Origin");
  const std::string* preflight_method = request.header("Access-Control-Request-Method");
  if (request.method == "OPTIONS" && origin != nullptr && preflight_method != nullptr) {
    CorsPolicy::Preflight p = cors_.preflight(*origin, *preflight_method,
                                              request.header("Access-Control-Request-Headers"));
    HttpResponse r;
    r.status = p.status;
    r.content_type = "text/plain; charset=utf-8";
    r.body = std::move(p.body);
    r.headers = std::move(p.headers);
    return r;
  }

  // The API key check comes first (vLLM adds it as the outermost middleware), so its 401
  // carries no CORS headers.
  if (options_.api_key && request.method != "OPTIONS" && path.rfind("/v1", 0) == 0) {
    const std::string* auth = request.header("Authorization");
    if (auth == nullptr || *auth != "Bearer " + *options_.api_key) {
      return error_response(make_api_error(401, "Unauthorized"));
    }
  }
  HttpResponse response = route(request, path);
  add_cors(request, &response);
  if (options_.request_id_headers) {
    const std::string* id = request.header("X-Request-Id");
    response.headers.emplace_back("X-Request-Id", id != nullptr ? *id : random_hex_id());
  }
  return response;
}

HttpResponse Router::route(HttpRequest& request, std::string_view path) const {
  const Route* route = nullptr;
  for (const Route& r : routes()) {
    if (path == r.path) route = &r;
  }
  if (route == nullptr) {
    return error_response(
        make_api_error(404, "Not Found: " + request.method + " " + std::string(path)));
  }
  if (!method_allowed(*route, request.method)) {
    HttpResponse r = error_response(
        make_api_error(405, "Method Not Allowed: " + request.method + " " + std::string(path)));
    r.headers.emplace_back("Allow", allow_header(*route));
    return r;
  }
  const std::string_view p = route->path;
  if (p == "/health" || p == "/ping") {
    // vLLM: 200 with an empty body, 503 once the engine is dead.
    HttpResponse r;
    r.status = client_->dead() ? 503 : 200;
    return r;
  }
  if (p == "/version") return json_response(R"({"version":"0.1.0"})");
  if (p == "/metrics") {
    return guarded([&] {
      HttpResponse r;
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = metrics_->render(client_->stats());
      return r;
    });
  }
  if (p == "/v1/models") return guarded([&] { return json_response(serving_->models()); });

  return guarded([&]() -> HttpResponse {
    if (p == "/tokenize" || p == "/detokenize") {
      Expected<std::string> body =
          p == "/tokenize" ? serving_->tokenize(request.body) : serving_->detokenize(request.body);
      if (!body) return error_response(api_error_from_status(body.status()));
      return json_response(std::move(*body));
    }
    Expected<std::unique_ptr<ResponseStream>> stream =
        p == "/v1/completions" ? serving_->completions(request.body)
                               : serving_->chat_completions(request.body);
    if (!stream) return error_response(api_error_from_status(stream.status()));
    HttpResponse r;
    r.content_type = (*stream)->streaming() ? "text/event-stream; charset=utf-8" : kJson;
    if ((*stream)->streaming()) r.headers.emplace_back("Cache-Control", "no-cache");
    r.stream = std::move(*stream);
    return r;
  });
}

}  // namespace vllm::server
