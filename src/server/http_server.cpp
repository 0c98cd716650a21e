#include "server/http_server.h"

#include <dirent.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "base/logging.h"
#include "server/api_error.h"

namespace vllm::server {
namespace {

constexpr char kJson[] = "application/json";

void send_error(httplib::Response& res, const ApiError& error) {
  res.status = error.status;
  res.set_content(error.body(), kJson);
}

// httplib keeps its listening socket private; find it by port to shut it down on SIGTERM.
int find_listening_socket(int port) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0') continue;
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 ||
        !listening) {
      continue;
    }
    sockaddr_storage addr{};
    socklen_t addr_len = sizeof(addr);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&addr), &addr_len) != 0)
      continue;
    int bound = -1;
    if (addr.ss_family == AF_INET) bound = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6)
      bound = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    if (bound == port) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

// Runs a handler body; anything it throws becomes a 500 rather than a dead worker.
template <typename F>
void guarded(httplib::Response& res, F&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    VLLM_LOG_ERROR("request failed: {}", e.what());
    send_error(res, make_api_error(500, std::string("internal error: ") + e.what()));
  } catch (...) {
    send_error(res, make_api_error(500, "internal error"));
  }
}

}  // namespace

HttpServer::HttpServer(OpenAIServing* serving, engine::EngineClient* client, ServerMetrics* metrics,
                       HttpServerOptions options)
    : serving_(serving),
      client_(client),
      metrics_(metrics),
      options_(std::move(options)),
      http_(std::make_unique<httplib::Server>()) {
  const size_t threads = options_.num_threads;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(options_.max_request_bytes);
  http_->set_tcp_nodelay(true);
  http_->set_keep_alive_max_count(1000);  // httplib's default closes a connection after 5
  install_routes();
}

HttpServer::~HttpServer() = default;

void HttpServer::install_routes() {
  httplib::Server& http = *http_;

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!options_.api_key || req.path.rfind("/v1", 0) != 0)
      return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + *options_.api_key) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    send_error(res, make_api_error(401, "Unauthorized"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // Statuses httplib decides (no route, body too large, bad request line) get an OpenAI
  // body too; handlers that set a body keep theirs.
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message;
    switch (res.status) {
      case 404:
        message = "Not Found: " + req.method + " " + req.path;
        break;
      case 413:
        message = "the request body is too large";
        break;
      case 405:
        message = "Method Not Allowed";
        break;
      default:
        message = "HTTP status " + std::to_string(res.status);
        break;
    }
    send_error(res, make_api_error(res.status, message));
  });
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string message = "internal error";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          message += std::string(": ") + e.what();
        } catch (...) {
        }
        send_error(res, make_api_error(500, message));
      });

  http.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
  http.Get("/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"version":"0.1.0"})", kJson);
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    guarded(res, [&] {
      res.set_content(metrics_->render(client_->stats()),
                      "text/plain; version=0.0.4; charset=utf-8");
    });
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    guarded(res, [&] { res.set_content(serving_->models(), kJson); });
  });

  auto json_endpoint = [this](auto method) {
    return [this, method](const httplib::Request& req, httplib::Response& res) {
      guarded(res, [&] {
        Expected<std::string> body = (serving_->*method)(req.body);
        if (!body) return send_error(res, api_error_from_status(body.status()));
        res.set_content(*body, kJson);
      });
    };
  };
  http.Post("/tokenize", json_endpoint(&OpenAIServing::tokenize));
  http.Post("/detokenize", json_endpoint(&OpenAIServing::detokenize));

  auto generate_endpoint = [this](auto method) {
    return [this, method](const httplib::Request& req, httplib::Response& res) {
      guarded(res, [&] {
        Expected<ServingResponse> response = (serving_->*method)(req.body);
        if (!response) return send_error(res, api_error_from_status(response.status()));
        if (!response->stream) return res.set_content(response->body, kJson);
        std::shared_ptr<EventStream> stream = std::move(response->stream);
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider(
            "text/event-stream", [stream](size_t, httplib::DataSink& sink) {
              std::string out;
              const bool more = stream->next(std::chrono::milliseconds(100), &out);
              // A failed write: the client has gone. Returning false ends the response;
              // dropping the stream then aborts its engine requests.
              if (!out.empty() && !sink.write(out.data(), out.size())) return false;
              if (!more) sink.done();
              return true;
            });
      });
    };
  };
  http.Post("/v1/completions", generate_endpoint(&OpenAIServing::completions));
  http.Post("/v1/chat/completions", generate_endpoint(&OpenAIServing::chat_completions));

  // GET on a POST endpoint: 405, as FastAPI answers it.
  for (const char* path : {"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"}) {
    http.Get(path, [](const httplib::Request& req, httplib::Response& res) {
      send_error(res, make_api_error(405, "Method Not Allowed: " + req.method + " " + req.path));
      res.set_header("Allow", "POST");
    });
  }
}

Status HttpServer::bind() {
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
    if (port_ <= 0)
      return make_error(ErrorCode::kIoError, "cannot bind {}:<any port>", options_.host);
  } else {
    if (!http_->bind_to_port(options_.host, options_.port)) {
      return make_error(ErrorCode::kIoError, "cannot bind {}:{} (in use?)", options_.host,
                        options_.port);
    }
    port_ = options_.port;
  }
  listen_fd_ = find_listening_socket(port_);
  // httplib listens with a backlog of 5; many clients connecting at once need more.
  if (listen_fd_ >= 0) ::listen(listen_fd_, 1024);
  return Status::ok();
}

void HttpServer::run() {
  if (shutting_down_) return;
  http_->listen_after_bind();
}

void HttpServer::shutdown() {
  if (shutting_down_.exchange(true)) return;
  if (listen_fd_ >= 0) {
    // accept() fails, httplib leaves its accept loop and waits for its workers, which finish
    // the requests they are serving.
    ::shutdown(listen_fd_, SHUT_RDWR);
  } else {
    http_->stop();
  }
}

}  // namespace vllm::server
