// The HTTP layer of `vllm serve` over real sockets: keep-alive and pipelining, HEAD and
// /ping, limits (431, 413) and timeouts, CORS and --root-path, a client leaving aborts its
// request before the engine's next step (streaming or not), a slow reader neither holding
// the server nor others up, the engine dying (/health 503, 500s, the server stops), TLS.
#include <httplib.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>

#include "http_server_fixture.h"

namespace vllm::server {
namespace test_http_transport {
namespace {

using testing::HttpServerFixture;
using testing::RawClient;

class HttpTransportTest : public HttpServerFixture {
 protected:
  void check_disconnect_aborts_within_a_step(bool stream);
};

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_F(HttpTransportTest, KeepAliveAndPipelining) {
  start();
  RawClient c(http_->port());
  ASSERT_TRUE(c.connected());
  // Two requests in one write: both answered, in order, on the same connection.
  ASSERT_TRUE(c.send(RawClient::get("/health") + RawClient::get("/v1/models")));
  ASSERT_TRUE(c.read_until("\"object\":\"list\""));
  EXPECT_EQ(count_of(c.received(), "HTTP/1.1 200 OK"), 2u);
  EXPECT_LT(c.received().find("Content-Length: 0"), c.received().find("\"object\":\"list\""));
  // A generation, then another request: still the same connection.
  c.received().clear();
  ASSERT_TRUE(c.send(RawClient::post("/v1/completions",
                                     R"({"prompt": "Hi", "max_tokens": 3, "temperature": 0})")));
  ASSERT_TRUE(c.read_until("\"usage\""));
  // Generations pipelined: each answer comes whole and in order, whatever the timing of
  // the next request's bytes against the previous answer's last write.
  c.received().clear();
  const std::string gen = R"({"prompt": "Hi", "max_tokens": 2, "temperature": 0})";
  const std::string streamed =
      R"({"prompt": "Hi", "max_tokens": 2, "temperature": 0, "stream": true})";
  ASSERT_TRUE(c.send(RawClient::post("/v1/completions", gen) +
                     RawClient::post("/v1/completions", streamed) +
                     RawClient::post("/v1/completions", gen)));
  ASSERT_TRUE(c.read_until("data: [DONE]"));
  while (count_of(c.received(), "\"usage\"") < 2) ASSERT_TRUE(c.read_some());
  EXPECT_EQ(count_of(c.received(), "HTTP/1.1 200 OK"), 3u);
  EXPECT_LT(c.received().find("\"usage\""), c.received().find("data: [DONE]"));
  c.received().clear();
  ASSERT_TRUE(c.send(RawClient::get("/version", "Connection: close\r\n")));
  EXPECT_TRUE(c.read_to_eof());  // "Connection: close" is honoured
  EXPECT_NE(c.received().find("\"version\""), std::string::npos);
  EXPECT_EQ(http_->num_io_threads(), 2u);
}

// Back-to-back generations on one keep-alive connection: the client sends the next request
// the moment it has read an answer, racing the server's bookkeeping of the previous one.
TEST_F(HttpTransportTest, ManyRequestsOnOneConnection) {
  start();
  RawClient c(http_->port());
  for (int i = 0; i < 200; ++i) {
    c.received().clear();
    const bool stream = i % 2 == 1;
    ASSERT_TRUE(c.send(RawClient::post(
        "/v1/completions", std::string(R"({"prompt": "x", "max_tokens": 1, "stream": )") +
                               (stream ? "true" : "false") + "}")));
    // A stream ends with the last chunk, "0\r\n\r\n", after its [DONE] event.
    ASSERT_TRUE(c.read_until(stream ? "data: [DONE]\n\n\r\n0\r\n\r\n" : "\"usage\"")) << i;
    if (!stream) {
      // The whole body: it ends with the usage object.
      ASSERT_TRUE(c.read_until("}}")) << i;
    }
  }
  EXPECT_EQ(http_->num_connections(), 1u);
}

TEST_F(HttpTransportTest, HeadPingAndMethods) {
  start();
  httplib::Client c("127.0.0.1", http_->port());
  auto head = c.Head("/health");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_TRUE(head->body.empty());
  auto ping = c.Get("/ping");
  ASSERT_TRUE(ping);
  EXPECT_EQ(ping->status, 200);
  auto ping_post = c.Post("/ping", "", "application/json");
  ASSERT_TRUE(ping_post);
  EXPECT_EQ(ping_post->status, 200);
  auto put = c.Put("/ping", "", "application/json");
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 405);
  EXPECT_EQ(put->get_header_value("Allow"), "GET, POST");
  EXPECT_NE(put->body.find("MethodNotAllowedError"), std::string::npos);
  auto missing = c.Get("/v1/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_NE(missing->body.find("Not Found: GET /v1/nothing"), std::string::npos);
}

TEST_F(HttpTransportTest, HeaderAndBodyLimits) {
  http_options().max_header_bytes = 2048;
  http_options().max_header_count = 20;
  start();
  {
    RawClient c(http_->port());
    ASSERT_TRUE(c.send(RawClient::get("/health", "X-Big: " + std::string(4000, 'a') + "\r\n")));
    EXPECT_TRUE(c.read_to_eof());
    EXPECT_EQ(c.received().rfind("HTTP/1.1 431", 0), 0u) << c.received();
    EXPECT_NE(c.received().find("\"code\":431"), std::string::npos);
  }
  {
    std::string headers;
    for (int i = 0; i < 30; ++i) headers += "X-H" + std::to_string(i) + ": v\r\n";
    RawClient c(http_->port());
    ASSERT_TRUE(c.send(RawClient::get("/health", headers)));
    EXPECT_TRUE(c.read_to_eof());
    EXPECT_EQ(c.received().rfind("HTTP/1.1 431", 0), 0u) << c.received();
  }
  {
    // A body over the limit, sent whole: the client still reads the 413 (no reset).
    RawClient c(http_->port());
    ASSERT_TRUE(c.send(RawClient::post("/v1/completions", std::string(100000, ' '))));
    EXPECT_TRUE(c.read_to_eof());
    EXPECT_EQ(c.received().rfind("HTTP/1.1 413", 0), 0u) << c.received().substr(0, 200);
    EXPECT_NE(c.received().find("RequestEntityTooLargeError"), std::string::npos);
  }
  {
    RawClient c(http_->port());
    ASSERT_TRUE(c.send("NOT-HTTP\r\n\r\n"));
    EXPECT_TRUE(c.read_to_eof());
    EXPECT_EQ(c.received().rfind("HTTP/1.1 400", 0), 0u) << c.received();
  }
  // "Expect: 100-continue" gets its interim answer before the body is sent.
  RawClient c(http_->port());
  const std::string body = R"({"prompt": "Hi", "max_tokens": 2})";
  ASSERT_TRUE(
      c.send("POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Expect: 100-continue\r\nContent-Length: " +
             std::to_string(body.size()) + "\r\n\r\n"));
  ASSERT_TRUE(c.read_until("HTTP/1.1 100 Continue\r\n\r\n"));
  ASSERT_TRUE(c.send(body));
  EXPECT_TRUE(c.read_until("\"tokens\""));
}

TEST_F(HttpTransportTest, IdleAndSlowRequestTimeouts) {
  http_options().keep_alive_timeout = std::chrono::milliseconds(200);
  http_options().request_timeout = std::chrono::milliseconds(300);
  start();
  {
    // An idle keep-alive connection is closed by the server.
    RawClient c(http_->port());
    ASSERT_TRUE(c.send(RawClient::get("/health")));
    ASSERT_TRUE(c.read_until("\r\n\r\n"));
    EXPECT_TRUE(c.read_to_eof());
  }
  {
    // A request that never completes is dropped.
    RawClient c(http_->port());
    ASSERT_TRUE(c.send("GET /health HTTP/1.1\r\nHost: x\r\n"));
    EXPECT_TRUE(c.read_to_eof());
    EXPECT_EQ(c.received().find("200"), std::string::npos);
  }
  for (int i = 0; i < 500 && http_->num_connections() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(http_->num_connections(), 0u);
}

TEST_F(HttpTransportTest, CorsAndRootPath) {
  http_options().root_path = "/llm";
  http_options().cors.allowed_origins = {"http://ok.example"};
  http_options().cors.allowed_methods = {"GET", "POST"};
  http_options().cors.allowed_headers = {"Authorization"};
  http_options().cors.allow_credentials = true;
  http_options().api_key = "k";
  start();
  httplib::Client c("127.0.0.1", http_->port());
  // Preflights are answered before the API key check.
  auto ok = c.Options("/llm/v1/models", {{"Origin", "http://ok.example"},
                                         {"Access-Control-Request-Method", "GET"},
                                         {"Access-Control-Request-Headers", "authorization"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(ok->body, "OK");
  EXPECT_EQ(ok->get_header_value("Access-Control-Allow-Origin"), "http://ok.example");
  EXPECT_EQ(ok->get_header_value("Access-Control-Allow-Methods"), "GET, POST");
  EXPECT_EQ(ok->get_header_value("Access-Control-Allow-Credentials"), "true");
  EXPECT_EQ(ok->get_header_value("Access-Control-Max-Age"), "600");
  auto bad = c.Options("/v1/models", {{"Origin", "http://evil.example"},
                                      {"Access-Control-Request-Method", "PUT"},
                                      {"Access-Control-Request-Headers", "X-Other"}});
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(bad->body, "Disallowed CORS origin, method, headers");
  // A simple request echoes an allowed origin; under and without the root path.
  for (const char* path : {"/llm/v1/models", "/v1/models"}) {
    auto models = c.Get(path, {{"Origin", "http://ok.example"}, {"Authorization", "Bearer k"}});
    ASSERT_TRUE(models);
    EXPECT_EQ(models->status, 200) << path;
    EXPECT_EQ(models->get_header_value("Access-Control-Allow-Origin"), "http://ok.example");
    EXPECT_EQ(models->get_header_value("Vary"), "Origin");
  }
  auto other =
      c.Get("/v1/models", {{"Origin", "http://evil.example"}, {"Authorization", "Bearer k"}});
  ASSERT_TRUE(other);
  EXPECT_FALSE(other->has_header("Access-Control-Allow-Origin"));
  auto unauthorized = c.Get("/llm/v1/models");
  ASSERT_TRUE(unauthorized);
  EXPECT_EQ(unauthorized->status, 401);
  auto health = c.Get("/llm/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto prefix_only = c.Get("/llmx/health");  // not under the root path
  ASSERT_TRUE(prefix_only);
  EXPECT_EQ(prefix_only->status, 404);
}

// Holds the engine thread after a step until released, so that a test can act between
// two steps deterministically. Counts the output tokens of the steps.
class StepGate {
 public:
  explicit StepGate(engine::EngineClient* client) : client_(client) {
    client->set_step_observer([this](const engine::EngineClient::StepStats& step) {
      std::unique_lock<std::mutex> lock(mutex_);
      tokens_ += step.num_generation_tokens;
      if (!hold_) return;
      held_ = true;
      cv_.notify_all();
      cv_.wait(lock, [&] { return !hold_; });
      held_ = false;
    });
  }
  ~StepGate() {
    release();
    client_->set_step_observer(nullptr);
  }
  // Holds the engine at its next step end; returns the tokens generated up to it.
  int64_t hold() {
    std::unique_lock<std::mutex> lock(mutex_);
    hold_ = true;
    cv_.wait(lock, [&] { return held_; });
    return tokens_;
  }
  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    hold_ = false;
    cv_.notify_all();
  }
  int64_t tokens() {
    std::lock_guard<std::mutex> lock(mutex_);
    return tokens_;
  }

 private:
  engine::EngineClient* client_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool hold_ = false;
  bool held_ = false;
  int64_t tokens_ = 0;
};

// A client that hangs up mid-generation -- streaming or not -- has its request aborted
// before the engine's next step: no token is generated for it after the server noticed.
void HttpTransportTest::check_disconnect_aborts_within_a_step(bool stream) {
  StepGate gate(client_.get());
  RawClient c(http_->port());
  const std::string body =
      std::string(R"({"prompt": "Go on", "max_tokens": 1500, "ignore_eos": true, "stream": )") +
      (stream ? "true" : "false") + "}";
  ASSERT_TRUE(c.send(RawClient::post("/v1/completions", body)));
  // Wait until it generates (streaming: its first event arrived).
  if (stream) {
    ASSERT_TRUE(c.read_until("data: {"));
  } else {
    while (gate.tokens() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const double aborts_before =
      metric_value("vllm:request_success_total", "finished_reason=\"abort\"");
  const int64_t tokens_at_hold = gate.hold();  // the engine stands between two steps
  c.close();
  // The server notices the hang-up and aborts (the abort is counted at once).
  while (metric_value("vllm:request_success_total", "finished_reason=\"abort\"") == aborts_before) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  gate.release();
  EXPECT_TRUE(drained());
  EXPECT_EQ(gate.tokens(), tokens_at_hold) << "a step ran for the request after its client left";
  EXPECT_LT(tokens_at_hold, 1500);
}

TEST_F(HttpTransportTest, StreamingDisconnectAbortsBeforeTheNextStep) {
  start();
  check_disconnect_aborts_within_a_step(true);
}

TEST_F(HttpTransportTest, NonStreamingDisconnectAbortsBeforeTheNextStep) {
  start();
  check_disconnect_aborts_within_a_step(false);
}

// A reader that stops reading holds a connection and its request's outputs, but neither an
// I/O thread nor the other clients: they are all served while it is stalled.
TEST_F(HttpTransportTest, StalledReaderDoesNotHoldOthersUp) {
  http_options().num_threads = 1;  // one I/O thread: a blocked thread would stop everything
  start();
  RawClient slow(http_->port(), /*receive_buffer=*/1024);
  ASSERT_TRUE(slow.send(RawClient::post(
      "/v1/completions",
      R"({"prompt": "Tell me", "max_tokens": 1500, "ignore_eos": true, "stream": true, "logprobs": 5})")));
  ASSERT_TRUE(slow.read_until("data: {"));  // then stop reading
  httplib::Client c("127.0.0.1", http_->port());
  c.set_read_timeout(60, 0);
  for (int i = 0; i < 5; ++i) {
    auto res = c.Post("/v1/completions",
                      R"({"prompt": "Quick", "max_tokens": 4, "temperature": 0, "stream": true})",
                      "application/json");
    ASSERT_TRUE(res);
    EXPECT_NE(res->body.find("data: [DONE]"), std::string::npos);
  }
  // Served while the stalled one waited; it can still read its whole answer now.
  EXPECT_TRUE(slow.read_until("data: [DONE]"));
  EXPECT_TRUE(drained());
}

TEST_F(HttpTransportTest, EngineDeathGives503And500AndStopsTheServer) {
  start();
  httplib::Client c("127.0.0.1", http_->port());
  c.set_read_timeout(60, 0);
  auto healthy = c.Get("/health");
  ASSERT_TRUE(healthy);
  EXPECT_EQ(healthy->status, 200);
  client_->fail_after_steps(3);
  auto res = c.Post("/v1/completions", R"({"prompt": "Die", "max_tokens": 50, "ignore_eos": true})",
                    "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 500);
  EXPECT_NE(res->body.find("InternalServerError"), std::string::npos) << res->body;
  EXPECT_TRUE(client_->dead());
  // The server stops by itself: run() returns.
  thread_.join();
  EXPECT_FALSE(c.Get("/health"));
}

TEST_F(HttpTransportTest, EngineDeathKeptAliveAnswers503) {
  http_options().exit_on_engine_death = false;
  start();
  client_->fail_after_steps(2);
  httplib::Client c("127.0.0.1", http_->port());
  c.set_read_timeout(60, 0);
  auto stream = c.Post("/v1/completions",
                       R"({"prompt": "Die", "max_tokens": 50, "ignore_eos": true, "stream": true})",
                       "application/json");
  ASSERT_TRUE(stream);
  EXPECT_EQ(stream->status, 200);
  EXPECT_NE(stream->body.find("data: {\"error\""), std::string::npos) << stream->body;
  EXPECT_NE(stream->body.find("data: [DONE]"), std::string::npos);
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  auto ping = c.Get("/ping");
  ASSERT_TRUE(ping);
  EXPECT_EQ(ping->status, 503);
  auto refused =
      c.Post("/v1/completions", R"({"prompt": "Again", "max_tokens": 5})", "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 500);
}

// A self-signed certificate for 127.0.0.1, written as PEM files.
void write_test_certificate(const std::filesystem::path& key_path,
                            const std::filesystem::path& cert_path) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  ASSERT_NE(key, nullptr);
  X509* cert = X509_new();
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("127.0.0.1"), -1, -1, 0);
  X509_set_issuer_name(cert, name);
  ASSERT_GT(X509_sign(cert, key, EVP_sha256()), 0);
  FILE* k = std::fopen(key_path.c_str(), "w");
  PEM_write_PrivateKey(k, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(k);
  FILE* c = std::fopen(cert_path.c_str(), "w");
  PEM_write_X509(c, cert);
  std::fclose(c);
  X509_free(cert);
  EVP_PKEY_free(key);
}

TEST_F(HttpTransportTest, Tls) {
  write_test_certificate(dir_ / "key.pem", dir_ / "cert.pem");
  http_options().tls.keyfile = (dir_ / "key.pem").string();
  http_options().tls.certfile = (dir_ / "cert.pem").string();
  start();
  httplib::SSLClient c("127.0.0.1", http_->port());
  c.set_ca_cert_path((dir_ / "cert.pem").c_str());
  c.enable_server_certificate_verification(false);  // self-signed, no SAN
  c.set_read_timeout(60, 0);
  auto health = c.Get("/health");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);
  auto streamed =
      c.Post("/v1/completions", R"({"prompt": "Secure", "max_tokens": 5, "stream": true})",
             "application/json");
  ASSERT_TRUE(streamed);
  EXPECT_NE(streamed->body.find("data: [DONE]"), std::string::npos);
  // Plain HTTP on the TLS port gets nowhere.
  httplib::Client plain("127.0.0.1", http_->port());
  plain.set_read_timeout(5, 0);
  auto refused = plain.Get("/health");
  EXPECT_TRUE(!refused || refused->status != 200);
  // A key that does not match the certificate is refused at startup.
  write_test_certificate(dir_ / "key2.pem", dir_ / "cert2.pem");
  HttpServerOptions mismatched = http_options();
  mismatched.tls.keyfile = (dir_ / "key2.pem").string();
  HttpServer other(serving_.get(), client_.get(), metrics_.get(), mismatched);
  Status bound = other.bind();
  EXPECT_FALSE(bound.is_ok());
  EXPECT_NE(bound.message().find("does not match"), std::string::npos) << bound.message();
}

}  // namespace
}  // namespace test_http_transport
}  // namespace vllm::server
