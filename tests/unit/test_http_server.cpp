// The server in-process, over real sockets: the golden Qwen3.5 MoE checkpoint with the e2e
// fixture tokenizer, HttpServer on a free loopback port, httplib's client (and a raw socket
// for a client that leaves mid-stream). Checks what the sanitizer build should exercise:
// streams, n > 1, errors, a disconnect freeing its blocks, and shutdown draining a stream.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "model/model.h"
#include "server/http_server.h"
#include "server/serving.h"
#include "temp_dir.h"

namespace vllm::server {
namespace {

namespace fs = std::filesystem;

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
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
    HttpServerOptions http;
    http.host = "127.0.0.1";
    http.port = 0;
    http.num_threads = 16;
    http.max_request_bytes = 4096;
    http_ = std::make_unique<HttpServer>(serving_.get(), client_.get(), metrics_.get(), http);
    ASSERT_TRUE(http_->bind().is_ok());
    thread_ = std::thread([this] { http_->run(); });
  }
  void TearDown() override {
    if (http_) http_->shutdown();
    if (thread_.joinable()) thread_.join();
  }

  httplib::Client connect() const {
    httplib::Client c("127.0.0.1", http_->port());
    c.set_read_timeout(60, 0);
    return c;
  }
  bool drained() const {
    for (int i = 0; i < 200; ++i) {
      const engine::EngineStats s = client_->stats();
      if (s.num_running == 0 && s.num_waiting == 0 && s.num_free_blocks == s.num_usable_blocks)
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  vllm::testing::TempDir dir_{"vllm_http"};
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<engine::EngineClient> client_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<OpenAIServing> serving_;
  std::unique_ptr<HttpServer> http_;
  std::thread thread_;
};

TEST_F(HttpServerTest, CompletionsStreamedAndNot) {
  auto c = connect();
  auto whole =
      c.Post("/v1/completions",
             R"({"prompt": "Hello", "max_tokens": 6, "temperature": 0.8, "seed": 3, "n": 2})",
             "application/json");
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  auto body = nlohmann::json::parse(whole->body);
  ASSERT_EQ(body["choices"].size(), 2u);
  EXPECT_EQ(body["choices"][1]["index"], 1);
  auto greedy =
      c.Post("/v1/completions", R"({"prompt": "Hello", "max_tokens": 6, "temperature": 0})",
             "application/json");
  ASSERT_TRUE(greedy);
  const std::string text = nlohmann::json::parse(greedy->body)["choices"][0]["text"];
  EXPECT_GT(body["usage"]["completion_tokens"].get<int>(), 0);
  EXPECT_LE(body["usage"]["completion_tokens"].get<int>(), 12);

  auto streamed =
      c.Post("/v1/completions",
             R"({"prompt": "Hello", "max_tokens": 6, "temperature": 0, "stream": true})",
             "application/json");
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200);
  std::string joined;
  size_t at = 0;
  int events = 0;
  while ((at = streamed->body.find("data: {", at)) != std::string::npos) {
    const size_t end = streamed->body.find("\n\n", at);
    auto chunk = nlohmann::json::parse(streamed->body.substr(at + 6, end - at - 6));
    joined += chunk["choices"][0]["text"].get<std::string>();
    ++events;
    at = end;
  }
  EXPECT_EQ(joined, text);
  EXPECT_GE(events, 1);  // a loaded machine may drain all tokens into one event
  EXPECT_NE(streamed->body.find("data: [DONE]\n\n"), std::string::npos);
  EXPECT_TRUE(drained());
}

// The hybrid model's prefix cache: the same 45-token prompt again resumes from the state
// snapshot at its last block boundary (32 tokens), which usage reports (vLLM's
// --enable-prompt-tokens-details) and the Prometheus counters count.
TEST_F(HttpServerTest, PrefixCacheHitsAreReported) {
  auto c = connect();
  std::string ids;
  for (int i = 0; i < 45; ++i) ids += (i ? "," : "") + std::to_string(7 + 3 * i);
  const std::string request = R"({"prompt": [)" + ids + R"(], "max_tokens": 3, "temperature": 0})";
  auto first = c.Post("/v1/completions", request, "application/json");
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status, 200) << first->body;
  auto usage = nlohmann::json::parse(first->body)["usage"];
  EXPECT_EQ(usage["prompt_tokens"], 45);
  EXPECT_TRUE(usage["prompt_tokens_details"].is_null());  // nothing cached yet
  auto second = c.Post("/v1/completions", request, "application/json");
  ASSERT_TRUE(second);
  ASSERT_EQ(second->status, 200) << second->body;
  usage = nlohmann::json::parse(second->body)["usage"];
  EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], 32);
  EXPECT_EQ(nlohmann::json::parse(second->body)["choices"][0]["text"],
            nlohmann::json::parse(first->body)["choices"][0]["text"]);
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(
      metrics->body.find("vllm:prefix_cache_hits_total{model_name=\"tiny\",engine=\"0\"} 32.0\n"),
      std::string::npos)
      << metrics->body;
}

TEST_F(HttpServerTest, ChatAndErrors) {
  auto c = connect();
  auto chat =
      c.Post("/v1/chat/completions",
             R"({"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5,
                         "stream": true, "stream_options": {"include_usage": true}, "logprobs": true})",
             "application/json");
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 200);
  EXPECT_NE(chat->body.find(R"("role":"assistant")"), std::string::npos);
  EXPECT_NE(chat->body.find(R"("usage":{"prompt_tokens")"), std::string::npos);
  auto bad = c.Post("/v1/completions", "{", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find(R"("type":"BadRequestError")"), std::string::npos);
  auto unknown = c.Post("/v1/chat/completions",
                        R"({"model": "x", "messages": [{"role": "user", "content": "a"}]})",
                        "application/json");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  auto big = c.Post("/v1/completions", std::string(8192, ' '), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  EXPECT_NE(big->body.find("RequestEntityTooLargeError"), std::string::npos);
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("vllm:num_requests_running{model_name=\"tiny\",engine=\"0\"}"),
            std::string::npos);
  EXPECT_TRUE(drained());
}

// A client that reads the first event and hangs up: its request is aborted, blocks freed.
TEST_F(HttpServerTest, DisconnectAbortsTheRequest) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(http_->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string body =
      R"({"prompt": "Go on", "max_tokens": 2000, "ignore_eos": true, "stream": true})";
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  std::string got;
  char buf[512];
  while (got.find("data: {") == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    ASSERT_GT(n, 0);
    got.append(buf, static_cast<size_t>(n));
  }
  EXPECT_GE(client_->stats().num_running + client_->stats().num_waiting, 1u);
  ::close(fd);
  EXPECT_TRUE(drained());
  EXPECT_NE(metrics_->render(client_->stats()).find("finished_reason=\"abort\"} 1.0"),
            std::string::npos);
}

// shutdown() with a stream in flight: the stream still completes; new connections fail.
TEST_F(HttpServerTest, ShutdownDrainsStreams) {
  std::string body;
  std::thread reader([&] {
    auto c = connect();
    auto res =
        c.Post("/v1/completions",
               R"({"prompt": "Long", "max_tokens": 120, "ignore_eos": true, "stream": true})",
               "application/json");
    if (res) body = res->body;
  });
  for (int i = 0; i < 500 && client_->stats().num_running == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  http_->shutdown();
  reader.join();
  thread_.join();
  EXPECT_NE(body.find(R"("finish_reason":"length")"), std::string::npos) << body.substr(0, 300);
  EXPECT_NE(body.find("data: [DONE]"), std::string::npos);
  auto c = connect();
  EXPECT_FALSE(c.Get("/health"));
}

}  // namespace
}  // namespace vllm::server
