// The HTTP side of `vllm serve`: an event-driven server on Boost.Beast / Boost.Asio. A few
// I/O threads serve any number of connections (keep-alive, pipelining, chunked server-sent
// events); nothing blocks a thread while the engine works (http_session.h says how a
// connection is driven, http_router.h what it answers).
//
// Limits and timeouts: request bodies above max_request_bytes get 413, headers above
// max_header_bytes or max_header_count 431; a request must arrive whole within
// request_timeout; an idle keep-alive connection is closed after keep_alive_timeout. TLS
// with a certificate and key (optionally verifying clients against a CA file).
//
// Shutdown (SIGTERM, or the engine dying): the listening socket closes, so new connections
// are refused; idle connections close; the requests in flight -- streams included -- run to
// completion; then run() returns. A dead engine (EngineClient::dead()) is noticed within a
// second and shuts the server down unless exit_on_engine_death is off; /health says 503
// meanwhile.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "engine/engine_client.h"
#include "server/cors.h"
#include "server/metrics.h"
#include "server/serving.h"

namespace vllm::server {

struct TlsOptions {
  std::string keyfile;   // --ssl-keyfile (PEM); TLS is on when keyfile and certfile are set
  std::string certfile;  // --ssl-certfile (PEM, may hold the chain)
  std::string ca_certs;  // --ssl-ca-certs: CAs to verify client certificates with
  int cert_reqs = 0;     // --ssl-cert-reqs: 0 none, 1 optional, 2 required (Python's ssl)
  std::string ciphers;   // --ssl-ciphers (TLS 1.2 and below)

  bool enabled() const { return !keyfile.empty() || !certfile.empty(); }
};

struct HttpServerOptions {
  std::string host = "0.0.0.0";
  int port = 8000;                      // 0: any free port (see port())
  std::optional<std::string> api_key;   // required as "Authorization: Bearer KEY" on /v1/*
  size_t max_request_bytes = 8u << 20;  // larger bodies get 413
  size_t max_header_bytes = 4u << 20;   // vLLM's --h11-max-incomplete-event-size
  size_t max_header_count = 256;        // vLLM's --h11-max-header-count
  size_t num_threads = 0;               // I/O threads; 0: the cores, at most 4
  std::chrono::milliseconds keep_alive_timeout{5000};  // VLLM_HTTP_TIMEOUT_KEEP_ALIVE
  std::chrono::milliseconds request_timeout{60000};
  std::string root_path;  // --root-path
  CorsOptions cors;
  TlsOptions tls;
  bool request_id_headers = false;   // --enable-request-id-headers
  bool exit_on_engine_death = true;  // off: VLLM_KEEP_ALIVE_ON_ENGINE_DEATH
};

class HttpServer {
 public:
  HttpServer(OpenAIServing* serving, engine::EngineClient* client, ServerMetrics* metrics,
             HttpServerOptions options);
  ~HttpServer();

  // Sets up TLS and binds; kInvalidArgument for bad TLS files, kIoError when the address
  // cannot be bound.
  Status bind();
  int port() const { return port_; }
  void run();       // serves until shutdown(); returns when requests are done
  void shutdown();  // from any thread; idempotent

  size_t num_connections() const;  // open client connections
  size_t num_io_threads() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace vllm::server
