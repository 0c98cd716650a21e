// The server in-process for tests: the golden Qwen3.5 MoE checkpoint with the e2e fixture
// tokenizer, the engine, the serving layer, HttpServer on a free loopback port run by a
// thread. Tests adjust `http_options()` (limits, timeouts, TLS, CORS) before start(), and
// talk to it with httplib's client or raw sockets (RawClient).
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "model/model.h"
#include "server/http_server.h"
#include "server/serving.h"
#include "temp_dir.h"

namespace vllm::server::testing {

class HttpServerFixture : public ::testing::Test {
 protected:
  // Builds the engine and the serving layer; call start() to serve.
  void SetUp() override {
    namespace fs = std::filesystem;
    const fs::path golden = fs::path(VLLM_SOURCE_DIR) / "tests/golden/qwen3_5_moe";
    for (const auto& entry : fs::directory_iterator(golden)) {
      if (entry.path().filename().string().rfind("reference", 0) == 0) continue;
      fs::create_symlink(entry.path(), dir_.path() / entry.path().filename());
    }
    const fs::path fixture = fs::path(VLLM_SOURCE_DIR) / "tests/e2e/fixtures/tiny_qwen3_tokenizer";
    fs::copy_file(fixture / "tokenizer.json", dir_ / "tokenizer.json");
    fs::copy_file(fixture / "tokenizer_config.json", dir_ / "tokenizer_config.json");
    LoadOptions load;
    load.max_model_len = 2048;
    auto model = load_model(dir_.path(), load);
    ASSERT_TRUE(model.has_value()) << model.status().to_string();
    engine::EngineConfig config;
    config.scheduler.max_model_len = 2048;
    config.scheduler.max_num_seqs = 8;
    config.kv_cache_memory_bytes = 16 << 20;
    auto core = engine::EngineCore::create(std::move(*model), config, {456});
    ASSERT_TRUE(core.has_value()) << core.status().to_string();
    client_ = std::make_unique<engine::EngineClient>(std::move(*core));
    auto tokenizer = Tokenizer::from_file(dir_ / "tokenizer.json");
    ASSERT_TRUE(tokenizer.has_value());
    tokenizer_ = std::make_unique<Tokenizer>(std::move(*tokenizer));
    auto chat = load_model_chat_template(dir_.path());
    ASSERT_TRUE(chat.has_value());
    auto parsed = ChatTemplate::parse(chat->source, "chat");
    ASSERT_TRUE(parsed.has_value());
    ServingOptions options;
    options.served_model_names = {"tiny"};
    options.enable_auto_tool_choice = true;
    options.tool_call_parser = "hermes";
    options.reasoning_parser = "qwen3";
    options.enable_prompt_tokens_details = true;
    metrics_ = std::make_unique<ServerMetrics>("tiny", client_->max_model_len());
    serving_ = std::make_unique<OpenAIServing>(client_.get(), tokenizer_.get(),
                                               std::make_unique<ChatTemplate>(std::move(*parsed)),
                                               chat->special_tokens, metrics_.get(), options);
    http_options_.host = "127.0.0.1";
    http_options_.port = 0;
    http_options_.num_threads = 2;
    http_options_.max_request_bytes = 4096;
  }

  void start() {
    http_ =
        std::make_unique<HttpServer>(serving_.get(), client_.get(), metrics_.get(), http_options_);
    Status bound = http_->bind();
    ASSERT_TRUE(bound.is_ok()) << bound.to_string();
    thread_ = std::thread([this] { http_->run(); });
  }

  void TearDown() override {
    if (http_) http_->shutdown();
    if (thread_.joinable()) thread_.join();
  }

  HttpServerOptions& http_options() { return http_options_; }

  // Waits until the engine holds no request and every KV block and state slot is free.
  bool drained() const {
    for (int i = 0; i < 500; ++i) {
      const engine::EngineStats s = client_->stats();
      if (s.num_running == 0 && s.num_waiting == 0 && s.num_free_blocks == s.num_usable_blocks &&
          s.num_free_state_slots == s.num_state_slots)
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // A count from the /metrics page, e.g. metric_value("vllm:request_success_total",
  // "finished_reason=\"abort\""); -1 when absent.
  double metric_value(const std::string& name, const std::string& label = "") const {
    const std::string text = metrics_->render(client_->stats());
    size_t at = 0;
    while ((at = text.find(name + "{", at)) != std::string::npos) {
      const size_t end = text.find('\n', at);
      const std::string line = text.substr(at, end - at);
      at = end;
      if (!label.empty() && line.find(label) == std::string::npos) continue;
      return std::stod(line.substr(line.rfind(' ') + 1));
    }
    return -1;
  }

  vllm::testing::TempDir dir_{"vllm_http"};
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<engine::EngineClient> client_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<OpenAIServing> serving_;
  HttpServerOptions http_options_;
  std::unique_ptr<HttpServer> http_;
  std::thread thread_;
};

// A blocking loopback TCP client for what httplib hides: raw bytes, pipelining, half-read
// responses, hanging up mid-response.
class RawClient {
 public:
  explicit RawClient(int port, int receive_buffer = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (receive_buffer > 0) {
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
    }
    timeval tv{30, 0};  // a hung test fails instead of hanging
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~RawClient() { close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool send(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads until `marker` is in what was received (returns true) or the peer closes / the
  // read times out (false).
  bool read_until(const std::string& marker) {
    while (received_.find(marker) == std::string::npos) {
      if (!read_some()) return false;
    }
    return true;
  }
  // Reads at most `max` bytes once; false on EOF or error.
  bool read_some(size_t max = 4096) {
    std::string buf(max, '\0');
    const ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
    if (n <= 0) return false;
    received_.append(buf.data(), static_cast<size_t>(n));
    return true;
  }
  // Reads until the server closes the connection; true if it did (not a timeout).
  bool read_to_eof() {
    char buf[4096];
    while (true) {
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET;
      received_.append(buf, static_cast<size_t>(n));
    }
  }
  std::string& received() { return received_; }

  static std::string post(const std::string& path, const std::string& body,
                          const std::string& extra_headers = "") {
    return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
           extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  }
  static std::string get(const std::string& path, const std::string& extra_headers = "") {
    return "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + extra_headers + "\r\n";
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  std::string received_;
};

}  // namespace vllm::server::testing
