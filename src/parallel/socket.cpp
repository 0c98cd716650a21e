#include "parallel/socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace vllm::parallel {
namespace {

// Waits are sliced so that `check` runs this often.
constexpr int kPollMillis = 10;

int poll_millis(Deadline deadline) {
  if (deadline == no_deadline()) return kPollMillis;
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, kPollMillis));
}

// Waits until fd has `events` ready; past the deadline an error naming `what`.
Status wait_ready(int fd, short events, Deadline deadline, const WaitCheck& check,
                  const char* what) {
  while (true) {
    if (check) VLLM_RETURN_IF_ERROR(check());
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, poll_millis(deadline));
    if (n > 0) return Status::ok();
    if (n < 0 && errno != EINTR) {
      return make_error(ErrorCode::kIoError, "{}: poll failed: {}", what, std::strerror(errno));
    }
    if (Clock::now() >= deadline) {
      return make_error(ErrorCode::kInternal, "{}: timed out", what);
    }
  }
}

Expected<addrinfo*> resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* result = nullptr;
  const std::string service = std::to_string(port);
  const int rc =
      getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &result);
  if (rc != 0) {
    return make_error(ErrorCode::kInvalidArgument, "cannot resolve '{}': {}", host,
                      gai_strerror(rc));
  }
  return result;
}

}  // namespace

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Expected<Socket> Socket::connect(const std::string& host, int port, Deadline deadline) {
  std::string last_error;
  while (true) {
    VLLM_ASSIGN_OR_RETURN(addrinfo * list, resolve(host, port, false));
    for (addrinfo* a = list; a != nullptr; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        freeaddrinfo(list);
        const int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return Socket(fd);
      }
      last_error = std::strerror(errno);
      ::close(fd);
    }
    freeaddrinfo(list);
    if (Clock::now() >= deadline) {
      return make_error(ErrorCode::kIoError, "cannot connect to {}:{}: {}", host, port, last_error);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

Status Socket::send_all(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::send(fd_, p, bytes, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error(ErrorCode::kIoError, "send failed: {}", std::strerror(errno));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return Status::ok();
}

Status Socket::recv_all(void* data, size_t bytes, Deadline deadline, const WaitCheck& check) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    VLLM_RETURN_IF_ERROR(wait_ready(fd_, POLLIN, deadline, check, "receive"));
    const ssize_t n = ::recv(fd_, p, bytes, 0);
    if (n == 0) return make_error(ErrorCode::kIoError, "the peer closed the connection");
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return make_error(ErrorCode::kIoError, "receive failed: {}", std::strerror(errno));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return Status::ok();
}

Status Socket::send_frame(std::string_view payload) {
  uint8_t header[8];
  uint64_t n = payload.size();
  for (int i = 0; i < 8; ++i) header[i] = static_cast<uint8_t>(n >> (8 * i));
  VLLM_RETURN_IF_ERROR(send_all(header, sizeof(header)));
  return send_all(payload.data(), payload.size());
}

Expected<std::string> Socket::recv_frame(size_t max_bytes, Deadline deadline,
                                         const WaitCheck& check) {
  uint8_t header[8];
  VLLM_RETURN_IF_ERROR(recv_all(header, sizeof(header), deadline, check));
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(header[i]) << (8 * i);
  if (n > max_bytes) {
    return make_error(ErrorCode::kInvalidFormat, "a frame of {} bytes is over the {}-byte limit", n,
                      max_bytes);
  }
  std::string payload(static_cast<size_t>(n), '\0');
  VLLM_RETURN_IF_ERROR(recv_all(payload.data(), payload.size(), deadline, check));
  return payload;
}

bool Socket::peer_closed() const {
  if (fd_ < 0) return true;
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if ((p.revents & (POLLERR | POLLHUP)) != 0) return true;
  char c;
  const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

Listener& Listener::operator=(Listener&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    port_ = other.port_;
    other.fd_ = -1;
  }
  return *this;
}

void Listener::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Expected<Listener> Listener::listen(const std::string& host, int port) {
  VLLM_ASSIGN_OR_RETURN(addrinfo * list, resolve(host, port, true));
  std::string last_error = "no address";
  for (addrinfo* a = list; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
      sockaddr_storage bound{};
      socklen_t len = sizeof(bound);
      getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
      Listener l;
      l.fd_ = fd;
      l.port_ =
          ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
      freeaddrinfo(list);
      return l;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  freeaddrinfo(list);
  return make_error(ErrorCode::kIoError, "cannot listen on {}:{}: {}", host, port, last_error);
}

Expected<Socket> Listener::accept(Deadline deadline, const WaitCheck& check) {
  while (true) {
    VLLM_RETURN_IF_ERROR(wait_ready(fd_, POLLIN, deadline, check, "accept"));
    const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return Socket(fd);
    }
    if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) {
      return make_error(ErrorCode::kIoError, "accept failed: {}", std::strerror(errno));
    }
  }
}

}  // namespace vllm::parallel
