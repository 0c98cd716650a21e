// Measures a server's per-request HTTP cost: C keep-alive connections (one thread each)
// send the same request back to back, N in all, and the tool prints requests/s and latency
// percentiles. Pointed at a request that does no engine work (GET /health, POST /tokenize)
// it measures the HTTP layer; at a 1-token completion, HTTP plus one engine step.
//
//   http_overhead --port 8000 --path /health [--body JSON] [--requests 20000] [--concurrency 1]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int port = 8000;
  std::string path = "/health";
  std::string body;
  long requests = 20000;
  int concurrency = 1;
};

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads one response (Content-Length or chunked framing); false on error or close.
bool read_response(int fd, std::string& buf) {
  auto fill = [&]() {
    char tmp[65536];
    const ssize_t n = ::recv(fd, tmp, sizeof(tmp), 0);
    if (n <= 0) return false;
    buf.append(tmp, static_cast<size_t>(n));
    return true;
  };
  size_t header_end;
  while ((header_end = buf.find("\r\n\r\n")) == std::string::npos) {
    if (!fill()) return false;
  }
  std::string head = buf.substr(0, header_end);
  for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t at = header_end + 4;
  if (head.find("transfer-encoding: chunked") != std::string::npos) {
    while (true) {
      size_t line_end;
      while ((line_end = buf.find("\r\n", at)) == std::string::npos) {
        if (!fill()) return false;
      }
      const size_t size = std::strtoul(buf.c_str() + at, nullptr, 16);
      while (buf.size() < line_end + 2 + size + 2) {
        if (!fill()) return false;
      }
      at = line_end + 2 + size + 2;
      if (size == 0) break;
    }
  } else {
    size_t length = 0;
    const size_t cl = head.find("content-length:");
    if (cl != std::string::npos) length = std::strtoul(head.c_str() + cl + 15, nullptr, 10);
    while (buf.size() < at + length) {
      if (!fill()) return false;
    }
    at += length;
  }
  buf.erase(0, at);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--port")
      o.port = std::atoi(value);
    else if (flag == "--path")
      o.path = value;
    else if (flag == "--body")
      o.body = value;
    else if (flag == "--requests")
      o.requests = std::atol(value);
    else if (flag == "--concurrency")
      o.concurrency = std::atoi(value);
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  std::string request;
  if (o.body.empty()) {
    request = "GET " + o.path + " HTTP/1.1\r\nHost: localhost\r\n\r\n";
  } else {
    request = "POST " + o.path +
              " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
              "Content-Length: " +
              std::to_string(o.body.size()) + "\r\n\r\n" + o.body;
  }
  std::atomic<long> next{0};
  std::atomic<long> failures{0};
  std::vector<std::vector<double>> latencies(static_cast<size_t>(o.concurrency));
  std::vector<std::thread> workers;
  const Clock::time_point start = Clock::now();
  for (int w = 0; w < o.concurrency; ++w) {
    workers.emplace_back([&, w] {
      int fd = connect_to(o.port);
      std::string buf;
      while (next.fetch_add(1) < o.requests) {
        if (fd < 0) fd = connect_to(o.port);
        const Clock::time_point t0 = Clock::now();
        if (fd < 0 ||
            ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
                static_cast<ssize_t>(request.size()) ||
            !read_response(fd, buf)) {
          ++failures;
          if (fd >= 0) ::close(fd);
          fd = -1;
          buf.clear();
          continue;
        }
        latencies[static_cast<size_t>(w)].push_back(
            std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
      if (fd >= 0) ::close(fd);
    });
  }
  for (std::thread& t : workers) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  if (all.empty()) {
    std::printf("no successful requests (%ld failures)\n", failures.load());
    return 1;
  }
  double sum = 0;
  for (double v : all) sum += v;
  auto pct = [&](double p) {
    return all[std::min(all.size() - 1, static_cast<size_t>(p * all.size()))];
  };
  std::printf(
      "%s %s: %zu requests, concurrency %d, %.0f req/s, latency mean %.1f us, p50 %.1f us, "
      "p99 %.1f us, %ld failures\n",
      o.body.empty() ? "GET" : "POST", o.path.c_str(), all.size(), o.concurrency,
      static_cast<double>(all.size()) / seconds, sum / static_cast<double>(all.size()), pct(0.5),
      pct(0.99), failures.load());
  return failures.load() == 0 ? 0 : 1;
}
