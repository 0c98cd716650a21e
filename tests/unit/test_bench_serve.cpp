// `vllm bench serve` end to end against a fake OpenAI-compatible server started in the test:
// httplib::Server on 127.0.0.1 streaming one SSE chunk per token a few ms apart, then a usage
// chunk and [DONE]. Checks the counts, that every result JSON key is there, that the summary
// statistics are the ones the per-request samples in the same JSON give (not how fast
// anything ran), that the client never has more requests in flight than --max-concurrency,
// that requests leave on the seeded arrival schedule, the chat backend, the fallback to
// chunk counting without usage, and failures (HTTP 500, nothing listening).
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include "bench/arrivals.h"
#include "bench/random_dataset.h"
#include "bench/serve_benchmark.h"

namespace vllm::bench {
namespace test_bench_serve {
namespace {

class FakeOpenAiServer {
 public:
  bool send_usage = true;
  std::atomic<int> fail_every{0};  // every k-th request answers HTTP 500 (0: never)

  FakeOpenAiServer() {
    auto handler = [this](bool chat) {
      return [this, chat](const httplib::Request& req, httplib::Response& res) { handle(req, res, chat); };
    };
    server_.Post("/v1/completions", handler(false));
    server_.Post("/v1/chat/completions", handler(true));
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeOpenAiServer() {
    server_.stop();
    thread_.join();
  }

  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int max_in_flight() const { return max_in_flight_; }
  int num_requests() const { return num_requests_; }
  nlohmann::json last_body() {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_body_;
  }

 private:
  void handle(const httplib::Request& req, httplib::Response& res, bool chat) {
    const int n = ++num_requests_;
    const nlohmann::json body = nlohmann::json::parse(req.body);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      last_body_ = body;
    }
    if (fail_every > 0 && n % fail_every == 0) {
      res.status = 500;
      res.set_content("{\"error\": \"boom\"}", "application/json");
      return;
    }
    const int max_tokens = chat ? body["max_completion_tokens"].get<int>() : body["max_tokens"].get<int>();
    const int64_t prompt_tokens = body.contains("prompt") && body["prompt"].is_array()
                                      ? static_cast<int64_t>(body["prompt"].size())
                                      : 0;
    const int now = ++in_flight_;
    for (int seen = max_in_flight_; now > seen && !max_in_flight_.compare_exchange_weak(seen, now);) {
    }
    const bool usage = send_usage;
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, chat, max_tokens, prompt_tokens, usage, sent = 0](size_t, httplib::DataSink& sink) mutable {
          if (sent < max_tokens) {
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
            const nlohmann::json choice =
                chat ? nlohmann::json{{"index", 0}, {"delta", {{"content", "tok "}}}}
                     : nlohmann::json{{"index", 0}, {"text", "tok "}};
            const std::string event =
                "data: " + nlohmann::json{{"choices", {choice}}}.dump() + "\n\n";
            sink.write(event.data(), event.size());
            ++sent;
            return true;
          }
          std::string tail;
          if (usage) {
            const nlohmann::json u = {{"choices", nlohmann::json::array()},
                                      {"usage", {{"prompt_tokens", prompt_tokens},
                                                 {"completion_tokens", max_tokens},
                                                 {"total_tokens", prompt_tokens + max_tokens}}}};
            tail += "data: " + u.dump() + "\n\n";
          }
          tail += "data: [DONE]\n\n";
          sink.write(tail.data(), tail.size());
          --in_flight_;
          sink.done();
          return true;
        });
  }

  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<int> in_flight_{0};
  std::atomic<int> max_in_flight_{0};
  std::atomic<int> num_requests_{0};
  std::mutex mutex_;
  nlohmann::json last_body_;
};

std::vector<SampleRequest> token_id_requests(int64_t n, int64_t input_len, int64_t output_len,
                                             double range_ratio = 0.0) {
  RandomDatasetOptions o;
  o.num_requests = n;
  o.input_len = input_len;
  o.output_len = output_len;
  o.range_ratio = range_ratio;
  o.request_id_prefix = "test-";
  auto r = sample_random_requests(o, nullptr, 1000);
  EXPECT_TRUE(r.has_value());
  return *r;
}

double mean_of(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  if (n == 0) return 0.0;
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The mean and median of TTFT, TPOT, ITL and E2EL that the result JSON reports are those of
// its own per-request samples: ttfts[i], itls[i] (seconds), output_lens[i]. A completions
// request's end-to-end latency is its TTFT plus its ITL gaps (both end at the last chunk
// with a choice), and its TPOT is (e2el - ttft) / (output_len - 1). The chat client ends a
// request at its last event, the usage chunk included (as vLLM's does), so there E2EL and
// TPOT are at least those figures. Returns the number of requests checked.
size_t expect_summaries_match_samples(const nlohmann::json& j, bool chat = false) {
  std::vector<double> ttft, tpot, itl, e2el;
  for (size_t i = 0; i < j["ttfts"].size(); ++i) {
    if (!j["errors"][i].get<std::string>().empty()) continue;
    const double first = j["ttfts"][i].get<double>();
    double gaps = 0;
    for (const auto& gap : j["itls"][i]) {
      itl.push_back(gap.get<double>());
      gaps += gap.get<double>();
    }
    const int64_t len = j["output_lens"][i].get<int64_t>();
    ttft.push_back(first);
    e2el.push_back(first + gaps);
    if (len > 1) tpot.push_back(gaps / static_cast<double>(len - 1));
  }
  // got (ms) equals want (s), or, when at_least, is no smaller.
  auto matches = [](double got, double want_s, bool at_least) {
    const double want = want_s * 1000, slack = 1e-9 * std::max(1.0, std::fabs(want));
    return at_least ? got >= want - slack : std::fabs(got - want) <= slack;
  };
  const std::tuple<const char*, const std::vector<double>*, bool> metrics[] = {
      {"ttft", &ttft, false}, {"tpot", &tpot, chat}, {"itl", &itl, false}, {"e2el", &e2el, chat}};
  for (const auto& [name, samples, at_least] : metrics) {
    const std::string m = name;
    EXPECT_TRUE(matches(j["mean_" + m + "_ms"].get<double>(), mean_of(*samples), at_least))
        << "mean_" << m << "_ms " << j["mean_" + m + "_ms"] << ", from the samples "
        << 1000 * mean_of(*samples);
    EXPECT_TRUE(matches(j["median_" + m + "_ms"].get<double>(), median_of(*samples), at_least))
        << "median_" << m << "_ms " << j["median_" + m + "_ms"] << ", from the samples "
        << 1000 * median_of(*samples);
  }
  // Every request ran inside the benchmark's duration.
  for (double e : e2el) EXPECT_LE(e, j["duration"].get<double>());
  return ttft.size();
}

ServeBenchmarkOptions options_for(const FakeOpenAiServer& server) {
  ServeBenchmarkOptions o;
  o.endpoint.base_url = server.base_url();
  o.model_id = "fake-model";
  o.tokenizer_id = "fake-model";
  o.ignore_eos = true;
  o.disable_tqdm = true;
  o.ready_check_timeout_s = 5;
  return o;
}

TEST(BenchServe, CountsAndEveryJsonKey) {
  FakeOpenAiServer server;
  const auto requests = token_id_requests(12, 16, 8, 0.5);
  ServeBenchmarkOptions o = options_for(server);
  o.max_concurrency = 3;
  o.percentiles = {50, 99};
  std::FILE* log = std::tmpfile();
  auto result = run_serve_benchmark(o, requests, nullptr, log);
  std::fclose(log);
  ASSERT_TRUE(result.has_value()) << result.status().to_string();
  const nlohmann::json& j = result->json;

  int64_t want_input = 0, want_output = 0;
  for (const SampleRequest& r : requests) {
    want_input += r.prompt_len;
    want_output += r.expected_output_len;
  }
  EXPECT_EQ(j["completed"], 12);
  EXPECT_EQ(j["failed"], 0);
  EXPECT_EQ(j["total_input_tokens"], want_input);
  EXPECT_EQ(j["total_output_tokens"], want_output);
  EXPECT_EQ(j["num_prompts"], 12);
  EXPECT_EQ(j["max_concurrency"], 3);
  EXPECT_EQ(j["request_rate"], "inf");
  EXPECT_EQ(j["backend"], "openai");
  EXPECT_EQ(j["model_id"], "fake-model");
  for (const char* key :
       {"date", "endpoint_type", "label", "tokenizer_id", "burstiness", "duration", "completed", "failed",
        "total_input_tokens", "total_output_tokens", "request_throughput", "request_goodput",
        "output_throughput", "total_token_throughput", "input_lens", "output_lens", "ttfts", "itls",
        "errors", "max_output_tokens_per_s", "max_concurrent_requests"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  for (const char* metric : {"ttft", "tpot", "itl", "e2el"}) {
    for (const char* stat : {"mean", "median", "std", "p50", "p99"}) {
      const std::string key = std::string(stat) + "_" + metric + "_ms";
      ASSERT_TRUE(j.contains(key)) << key;
      EXPECT_TRUE(j[key].is_number() && j[key].get<double>() >= 0.0) << key << " " << j[key];
    }
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(j["input_lens"][i], requests[i].prompt_len);
    EXPECT_EQ(j["output_lens"][i], requests[i].expected_output_len);
    // One ITL gap per chunk after the first: output tokens - 1.
    EXPECT_EQ(j["itls"][i].size(), static_cast<size_t>(requests[i].expected_output_len - 1));
    EXPECT_EQ(j["errors"][i], "");
  }
  EXPECT_EQ(expect_summaries_match_samples(j), 12u);
  EXPECT_LE(server.max_in_flight(), 3);
  EXPECT_EQ(server.num_requests(), 13);  // the ready check plus 12
  const nlohmann::json body = server.last_body();
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["model"], "fake-model");
  EXPECT_TRUE(body["prompt"].is_array());
  EXPECT_NE(result->table.find("Successful requests:                     12"), std::string::npos);
}

TEST(BenchServe, ChatBackendAndRequestRate) {
  FakeOpenAiServer server;
  auto requests = token_id_requests(4, 8, 5);
  for (auto& r : requests) r.prompt = "hello there";  // chat needs text
  ServeBenchmarkOptions o = options_for(server);
  o.endpoint.path = "/v1/chat/completions";
  o.endpoint.backend = "openai-chat";
  o.request_rate = 50.0;  // 4 requests over 80 ms
  o.seed = 1;
  std::FILE* log = std::tmpfile();
  auto result = run_serve_benchmark(o, requests, nullptr, log);
  std::fclose(log);
  ASSERT_TRUE(result.has_value()) << result.status().to_string();
  EXPECT_EQ(result->json["completed"], 4);
  EXPECT_EQ(result->json["total_output_tokens"], 20);
  EXPECT_EQ(result->json["request_rate"], 50.0);
  // No request left before its time on the seeded schedule (the last one at 4 / 50 s).
  auto send_times = request_send_times(4, 50.0, 1.0, 1);
  ASSERT_TRUE(send_times.has_value());
  ASSERT_EQ(result->outputs.size(), 4u);
  EXPECT_NEAR(send_times->back(), 4 / 50.0, 1e-12);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_GE(result->outputs[i].start_time, (*send_times)[i]) << "request " << i;
    EXPECT_LE(result->outputs[i].start_time + result->outputs[i].latency, result->duration_s)
        << "request " << i;
  }
  EXPECT_EQ(expect_summaries_match_samples(result->json, /*chat=*/true), 4u);
  EXPECT_EQ(server.last_body()["messages"][0]["content"], "hello there");
}

TEST(BenchServe, CountsChunksWithoutUsage) {
  FakeOpenAiServer server;
  server.send_usage = false;
  const auto requests = token_id_requests(3, 8, 6);
  ServeBenchmarkOptions o = options_for(server);
  std::FILE* log = std::tmpfile();
  auto result = run_serve_benchmark(o, requests, nullptr, log);
  std::fclose(log);
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->json["total_output_tokens"], 18);
}

TEST(BenchServe, FailedRequestsAreCountedNotMeasured) {
  FakeOpenAiServer server;
  server.fail_every = 3;  // the ready check is request 1; then requests 3, 6, 9 of 8 fail
  const auto requests = token_id_requests(8, 8, 4);
  ServeBenchmarkOptions o = options_for(server);
  o.max_concurrency = 1;  // deterministic order
  std::FILE* log = std::tmpfile();
  auto result = run_serve_benchmark(o, requests, nullptr, log);
  std::fclose(log);
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->json["completed"], 5);
  EXPECT_EQ(result->json["failed"], 3);
  EXPECT_EQ(result->json["total_output_tokens"], 20);
  int errors = 0;
  for (const auto& e : result->json["errors"]) {
    if (e.get<std::string>().find("HTTP 500") != std::string::npos) ++errors;
  }
  EXPECT_EQ(errors, 3);
}

TEST(BenchServe, NoServerIsAnError) {
  ServeBenchmarkOptions o;
  {
    FakeOpenAiServer server;  // take a free port, then close it
    o.endpoint.base_url = server.base_url();
  }
  o.model_id = "m";
  o.disable_tqdm = true;
  o.ready_check_timeout_s = 1;
  std::FILE* log = std::tmpfile();
  auto result = run_serve_benchmark(o, token_id_requests(2, 4, 2), nullptr, log);
  std::fclose(log);
  ASSERT_FALSE(result.has_value());
  EXPECT_NE(result.status().message().find("Initial test run failed"), std::string::npos);
}

}  // namespace
}  // namespace test_bench_serve
}  // namespace vllm::bench
