// The server in-process, over real sockets: the golden Qwen3.5 MoE checkpoint with the e2e
// fixture tokenizer, HttpServer on a free loopback port, httplib's client (and a raw socket
// for a client that leaves mid-stream). Checks what the sanitizer build should exercise:
// streams, n > 1, errors, a disconnect freeing its blocks, and shutdown draining a stream.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <thread>

#include "http_server_fixture.h"

namespace vllm::server {
namespace test_http_server {
namespace {

class HttpServerTest : public testing::HttpServerFixture {
 protected:
  void SetUp() override {
    HttpServerFixture::SetUp();
    start();
  }
  httplib::Client connect() const {
    httplib::Client c("127.0.0.1", http_->port());
    c.set_read_timeout(60, 0);
    return c;
  }
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
}  // namespace test_http_server
}  // namespace vllm::server
