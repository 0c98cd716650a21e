// The little TCP tensor parallelism needs: the rendezvous of the ranks at --master-addr /
// --master-port (each worker connects to rank 0, which tells it what to load and the group's
// unique id), the connection that stays open as each worker's liveness signal, and the TCP
// fallback of the step channel. Messages are frames: an 8-byte little-endian length, then the
// payload. Every wait takes a deadline and an optional check that can end it early (the group
// was aborted), so no call blocks forever.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace vllm::parallel {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
inline Deadline no_deadline() {
  return Deadline::max();
}
inline Deadline deadline_in(std::chrono::milliseconds ms) {
  return Clock::now() + ms;
}

// Called between waits; a non-ok status ends the wait with it.
using WaitCheck = std::function<Status()>;

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  // Connects to host:port, retrying until the deadline (the listener may not be up yet).
  static Expected<Socket> connect(const std::string& host, int port, Deadline deadline);

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void close();

  // All of `data`; a peer that has gone is an error (never SIGPIPE).
  Status send_all(const void* data, size_t bytes);
  // Exactly `bytes`; the peer closing first is an error saying so.
  Status recv_all(void* data, size_t bytes, Deadline deadline, const WaitCheck& check = {});
  Status send_frame(std::string_view payload);
  Expected<std::string> recv_frame(size_t max_bytes, Deadline deadline,
                                   const WaitCheck& check = {});
  // True once the peer has closed its end (or the connection failed); does not block and
  // consumes nothing.
  bool peer_closed() const;

 private:
  int fd_ = -1;
};

class Listener {
 public:
  Listener() = default;
  ~Listener() { close(); }
  Listener(Listener&& other) noexcept : fd_(other.fd_), port_(other.port_) { other.fd_ = -1; }
  Listener& operator=(Listener&& other) noexcept;
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // Listens on host:port (port 0: a free port the system picks; port() says which).
  static Expected<Listener> listen(const std::string& host, int port);
  int port() const { return port_; }
  Expected<Socket> accept(Deadline deadline, const WaitCheck& check = {});
  void close();

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace vllm::parallel
