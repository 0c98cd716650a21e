#include "server/http_server.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <filesystem>
#include <thread>
#include <utility>
#include <vector>

#include "base/logging.h"
#include "server/http_router.h"
#include "server/http_session.h"

namespace vllm::server {

namespace net = boost::asio;
using net::ip::tcp;
using error_code = boost::system::error_code;

namespace {

// How often the server checks whether the engine has died.
constexpr std::chrono::milliseconds kWatchdogPeriod{500};

std::string openssl_error() {
  const unsigned long code = ERR_get_error();
  if (code == 0) return "unknown OpenSSL error";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  ERR_clear_error();
  return text;
}

Expected<std::unique_ptr<net::ssl::context>> make_tls_context(const TlsOptions& tls) {
  if (tls.keyfile.empty() || tls.certfile.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "TLS needs both --ssl-keyfile and --ssl-certfile");
  }
  if (!std::filesystem::is_regular_file(tls.keyfile)) {
    return make_error(ErrorCode::kNotFound, "--ssl-keyfile {}: no such file", tls.keyfile);
  }
  if (!std::filesystem::is_regular_file(tls.certfile)) {
    return make_error(ErrorCode::kNotFound, "--ssl-certfile {}: no such file", tls.certfile);
  }
  if (tls.cert_reqs < 0 || tls.cert_reqs > 2) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--ssl-cert-reqs {}: must be 0 (none), 1 (optional) or 2 (required)",
                      tls.cert_reqs);
  }
  auto context = std::make_unique<net::ssl::context>(net::ssl::context::tls_server);
  context->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                       net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                       net::ssl::context::no_tlsv1_1 | net::ssl::context::single_dh_use);
  error_code ec;
  context->use_certificate_chain_file(tls.certfile, ec);
  if (ec) {
    return make_error(ErrorCode::kInvalidArgument, "--ssl-certfile {}: {}", tls.certfile,
                      ec.message());
  }
  context->use_private_key_file(tls.keyfile, net::ssl::context::pem, ec);
  if (ec && ec.message().find("mismatch") == std::string::npos) {
    return make_error(ErrorCode::kInvalidArgument, "--ssl-keyfile {}: {}", tls.keyfile,
                      ec.message());
  }
  if (ec || SSL_CTX_check_private_key(context->native_handle()) != 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--ssl-keyfile {} does not match the certificate in --ssl-certfile {}",
                      tls.keyfile, tls.certfile);
  }
  if (!tls.ciphers.empty() &&
      SSL_CTX_set_cipher_list(context->native_handle(), tls.ciphers.c_str()) != 1) {
    return make_error(ErrorCode::kInvalidArgument, "--ssl-ciphers {}: {}", tls.ciphers,
                      openssl_error());
  }
  if (!tls.ca_certs.empty()) {
    context->load_verify_file(tls.ca_certs, ec);
    if (ec) {
      return make_error(ErrorCode::kInvalidArgument, "--ssl-ca-certs {}: {}", tls.ca_certs,
                        ec.message());
    }
  }
  if (tls.cert_reqs == 1) context->set_verify_mode(net::ssl::verify_peer);
  if (tls.cert_reqs == 2) {
    context->set_verify_mode(net::ssl::verify_peer | net::ssl::verify_fail_if_no_peer_cert);
  }
  return context;
}

}  // namespace

// One io_context per I/O thread; a connection lives on one of them (round robin), so its
// handlers never need a strand and never hop threads. The first also runs the acceptor and
// the engine watchdog.
struct IoContexts {
  explicit IoContexts(size_t n) {
    if (n == 0) n = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 4);
    for (size_t i = 0; i < n; ++i) {
      contexts.push_back(std::make_unique<net::io_context>(1));
      guards.emplace_back(contexts.back()->get_executor());
    }
  }
  std::vector<std::unique_ptr<net::io_context>> contexts;
  // Keep every io_context running while the server accepts, even one without connections.
  std::vector<net::executor_work_guard<net::io_context::executor_type>> guards;
};

struct HttpServer::Impl {
  Impl(OpenAIServing* serving, engine::EngineClient* engine, ServerMetrics* metrics,
       HttpServerOptions opts)
      : client(engine),
        options(std::move(opts)),
        router(serving, engine, metrics,
               RouterOptions{options.api_key, options.root_path, options.cors,
                             options.request_id_headers}),
        io(options.num_threads),
        acceptor(*io.contexts.front()),
        watchdog(*io.contexts.front()),
        context(std::make_shared<http_detail::SessionContext>()) {
    context->router = &router;
    context->limits.max_request_bytes = options.max_request_bytes;
    context->limits.max_header_bytes = options.max_header_bytes;
    context->limits.max_header_count = options.max_header_count;
    context->limits.keep_alive_timeout = options.keep_alive_timeout;
    context->limits.request_timeout = options.request_timeout;
  }

  void accept() {
    net::io_context& target = *io.contexts[next_context++ % io.contexts.size()];
    acceptor.async_accept(target, [this](const error_code& ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
      if (ec) {
        // Out of file descriptors (or similar): say so once, wait a little, try again.
        if (!accept_error_logged.exchange(true)) {
          VLLM_LOG_WARNING("accepting a connection failed: {} (retrying)", ec.message());
        }
        watchdog_retry_accept();
        return;
      }
      error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      http_detail::start_session(std::move(socket), context);
      accept();
    });
  }

  void watchdog_retry_accept() {
    auto timer =
        std::make_shared<net::steady_timer>(*io.contexts.front(), std::chrono::milliseconds(100));
    timer->async_wait([this, timer](const error_code& ec) {
      if (!ec && acceptor.is_open()) accept();
    });
  }

  void arm_watchdog() {
    watchdog.expires_after(kWatchdogPeriod);
    watchdog.async_wait([this](const error_code& ec) {
      if (ec || stopping) return;
      if (client->dead()) {
        if (options.exit_on_engine_death) {
          VLLM_LOG_ERROR("the engine is dead: shutting the server down");
          stop();
          return;
        }
        if (!death_logged.exchange(true)) {
          VLLM_LOG_ERROR(
              "the engine is dead; the server stays up "
              "(VLLM_KEEP_ALIVE_ON_ENGINE_DEATH) and /health answers 503");
        }
      }
      arm_watchdog();
    });
  }

  void stop() {
    if (stopping.exchange(true)) return;
    net::post(*io.contexts.front(), [this] {
      error_code ignored;
      acceptor.close(ignored);
      watchdog.cancel();
    });
    http_detail::stop_sessions(*context);
    // Each io_context's run() now returns once its connections are done.
    for (auto& guard : io.guards) guard.reset();
  }

  engine::EngineClient* client;
  HttpServerOptions options;
  Router router;
  IoContexts io;
  std::unique_ptr<net::ssl::context> tls;
  tcp::acceptor acceptor;
  net::steady_timer watchdog;
  std::shared_ptr<http_detail::SessionContext> context;
  size_t next_context = 0;
  std::atomic<bool> stopping{false};
  std::atomic<bool> accept_error_logged{false};
  std::atomic<bool> death_logged{false};
  bool bound = false;
};

HttpServer::HttpServer(OpenAIServing* serving, engine::EngineClient* client, ServerMetrics* metrics,
                       HttpServerOptions options)
    : impl_(std::make_unique<Impl>(serving, client, metrics, std::move(options))) {}

HttpServer::~HttpServer() {
  // No wake-up from the engine thread may reach the io_context once it is going away.
  impl_->context->gate->close();
}

Status HttpServer::bind() {
  Impl& s = *impl_;
  if (s.options.tls.enabled()) {
    VLLM_ASSIGN_OR_RETURN(s.tls, make_tls_context(s.options.tls));
    s.context->tls = s.tls.get();
  }
  error_code ec;
  net::ip::address address = net::ip::make_address(s.options.host, ec);
  if (ec) {
    tcp::resolver resolver(*s.io.contexts.front());
    auto results = resolver.resolve(s.options.host, std::to_string(s.options.port), ec);
    if (ec || results.empty()) {
      return make_error(ErrorCode::kIoError, "cannot resolve --host {}: {}", s.options.host,
                        ec ? ec.message() : "no address");
    }
    address = results.begin()->endpoint().address();
  }
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(s.options.port));
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (ec) {
    return make_error(ErrorCode::kIoError, "cannot bind {}:{} ({})", s.options.host, s.options.port,
                      ec.message());
  }
  // Many clients connecting at once need a long queue (the kernel caps it at somaxconn).
  s.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return make_error(ErrorCode::kIoError, "cannot listen: {}", ec.message());
  port_ = s.acceptor.local_endpoint().port();
  s.bound = true;
  return Status::ok();
}

void HttpServer::run() {
  Impl& s = *impl_;
  if (!s.bound || s.stopping) return;
  s.accept();
  s.arm_watchdog();
  std::vector<std::thread> threads;
  for (size_t i = 1; i < s.io.contexts.size(); ++i) {
    threads.emplace_back([&s, i] { s.io.contexts[i]->run(); });
  }
  s.io.contexts.front()->run();
  for (std::thread& t : threads) t.join();
}

void HttpServer::shutdown() {
  impl_->stop();
}

size_t HttpServer::num_connections() const {
  return impl_->context->num_sessions();
}

size_t HttpServer::num_io_threads() const {
  return impl_->io.contexts.size();
}

}  // namespace vllm::server
