// The HTTP side of `vllm serve`: cpp-httplib routes for vLLM's OpenAI-compatible endpoints,
// the API key check, request size limit, OpenAI-shaped errors for everything that fails,
// server-sent events for streams, and graceful shutdown.
//
// Threads: httplib runs each connection on a worker of its pool; a streaming response keeps
// its worker until the stream ends, so the pool is sized for many concurrent streams. A
// stream writes each chunk as soon as the engine produces it; a failed write means the
// client went away, and the stream is dropped, which aborts its engine requests.
//
// Shutdown (SIGTERM): the listening socket is shut so no new connection is accepted; the
// requests in flight -- streams included -- run to completion; then run() returns.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "engine/engine_client.h"
#include "server/metrics.h"
#include "server/serving.h"

namespace httplib {
class Server;
}

namespace vllm::server {

struct HttpServerOptions {
  std::string host = "0.0.0.0";
  int port = 8000;                      // 0: any free port (see port())
  std::optional<std::string> api_key;   // required as "Authorization: Bearer KEY" on /v1/*
  size_t max_request_bytes = 8u << 20;  // larger bodies get 413
  size_t num_threads = 256;             // concurrent connections (streams hold one each)
};

class HttpServer {
 public:
  HttpServer(OpenAIServing* serving, engine::EngineClient* client, ServerMetrics* metrics,
             HttpServerOptions options);
  ~HttpServer();

  Status bind();  // kIoError when the address cannot be bound
  int port() const { return port_; }
  void run();       // serves until shutdown(); returns when requests are done
  void shutdown();  // from any thread; idempotent

 private:
  void install_routes();

  OpenAIServing* serving_;
  engine::EngineClient* client_;
  ServerMetrics* metrics_;
  HttpServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  int port_ = 0;
  int listen_fd_ = -1;
  std::atomic<bool> shutting_down_{false};
};

}  // namespace vllm::server
