// One client connection of `vllm serve` on Boost.Beast (internal to the server library;
// http_server.h is the public face).
//
// A session reads a request (header limit, header count, body limit, a deadline for the
// whole request; idle keep-alive connections are closed after the keep-alive timeout),
// hands it to the Router, and writes the answer. A generation's answer is a ResponseStream:
// the engine thread "wakes" the session (a post onto its I/O thread) whenever outputs arrive,
// and the session polls the stream -- never blocking an I/O thread.
//
// Backpressure: a session writes one chunk at a time. While a chunk is in flight nothing is
// polled; outputs wait in the engine's queue as token ids, and the next poll turns all of
// them into one chunk. A slow reader therefore holds one chunk of text plus its request's
// compact outputs, whatever its speed.
//
// Disconnects: while a response is produced the session keeps a read outstanding; if the
// client goes away (EOF, reset, TLS error) the response stream is destroyed at once, which
// aborts its engine requests before the engine's next step -- streaming or not. Bytes that
// arrive instead (a pipelined request) are kept for the next request.
//
// Threads: a session lives on one io_context, run by one I/O thread: its handlers never run
// concurrently and need no strand. The engine thread only ever posts to it.
#pragma once

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "server/http_router.h"

namespace vllm::server::http_detail {

struct SessionLimits {
  size_t max_request_bytes = 8u << 20;
  size_t max_header_bytes = 4u << 20;
  size_t max_header_count = 256;
  std::chrono::milliseconds keep_alive_timeout{5000};
  std::chrono::milliseconds request_timeout{60000};
};

// Where the engine thread posts wake-ups. Closed before the io_context goes away, so a late
// wake-up never touches a destroyed io_context.
class WakeGate {
 public:
  void post(const boost::asio::any_io_executor& executor, std::function<void()> fn);
  void close();

 private:
  std::mutex mutex_;
  bool closed_ = false;
};

class SessionBase {
 public:
  virtual ~SessionBase() = default;
  // The server is stopping: close when idle, and after the response in progress. Any thread.
  virtual void server_stopping() = 0;
};

// What every session of one server shares.
struct SessionContext {
  const Router* router = nullptr;
  SessionLimits limits;
  boost::asio::ssl::context* tls = nullptr;  // null: plain HTTP
  std::shared_ptr<WakeGate> gate = std::make_shared<WakeGate>();
  std::atomic<bool> stopping{false};

  std::mutex mutex;
  std::unordered_map<SessionBase*, std::weak_ptr<SessionBase>> sessions;
  size_t num_sessions() {
    std::lock_guard<std::mutex> lock(mutex);
    return sessions.size();
  }
};

// Starts serving an accepted connection (on its socket's io_context, run by one thread).
void start_session(boost::asio::ip::tcp::socket socket, std::shared_ptr<SessionContext> context);
// Marks the context stopping and tells every live session.
void stop_sessions(SessionContext& context);

}  // namespace vllm::server::http_detail
