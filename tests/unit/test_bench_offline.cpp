// `vllm bench throughput` and `vllm bench latency` on the demo model, run as a user runs
// them (the `vllm` binary, --output-json): the printed lines and the JSON carry vLLM's
// fields, the token counts are exactly what was asked for (ignore_eos makes every output
// --output-len long), and every rate and statistic is the one the run's own numbers give --
// nothing is asserted about how fast the machine is.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "unit/temp_dir.h"

namespace vllm {
namespace test_bench_offline {
namespace {

namespace fs = std::filesystem;

const fs::path kModelDir = fs::path(VLLM_SOURCE_DIR) / "models" / "qwen35-moe-demo";

struct BenchRun {
  int exit_code = -1;
  std::string out;
  nlohmann::json json;
};

// Runs `vllm bench SUBCOMMAND --model <demo> ARGS --output-json <tmp>`; stdout and the JSON
// come back (stderr, the log, is dropped).
BenchRun run_bench(const std::string& subcommand, const std::string& args) {
  testing::TempDir tmp("vllm_bench_offline");
  const fs::path out = tmp / "stdout.txt", json = tmp / "result.json";
  const std::string cmd = "'" + std::string(VLLM_CLI_PATH) + "' bench " + subcommand +
                          " --model '" + kModelDir.string() + "' " + args +
                          " --kv-cache-memory-bytes 16777216 --disable-tqdm --output-json '" +
                          json.string() + "' > '" + out.string() + "' 2>/dev/null";
  BenchRun r;
  const int status = std::system(cmd.c_str());
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::stringstream ss;
  ss << std::ifstream(out).rdbuf();
  r.out = ss.str();
  std::ifstream in(json);
  if (in) r.json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return r;
}

// The numbers of the first line matching `pattern` (one capture group per number).
std::vector<double> numbers(const std::string& text, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern))) return {};
  std::vector<double> out;
  for (size_t i = 1; i < m.size(); ++i) out.push_back(std::stod(m[i].str()));
  return out;
}

// numpy's default (linear) percentile of `values`.
double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - static_cast<double>(lo));
}

bool close(double a, double b, double rel = 1e-9) {
  return std::fabs(a - b) <= rel * std::max(std::fabs(a), std::fabs(b)) + 1e-12;
}

TEST(BenchOffline, ThroughputPrintsAndWritesVllmFields) {
  constexpr int kPrompts = 6, kInputLen = 16, kOutputLen = 8;
  const BenchRun r =
      run_bench("throughput", "--num-prompts " + std::to_string(kPrompts) + " --input-len " +
                                  std::to_string(kInputLen) + " --output-len " +
                                  std::to_string(kOutputLen) + " --max-model-len 128 --seed 1");
  ASSERT_EQ(r.exit_code, 0) << r.out;

  // vLLM's printed lines.
  const std::vector<double> rates = numbers(
      r.out,
      R"(Throughput: ([0-9.]+) requests/s, ([0-9.]+) total tokens/s, ([0-9.]+) output tokens/s)");
  ASSERT_EQ(rates.size(), 3u) << r.out;
  const std::vector<double> prompt = numbers(r.out, R"(Total num prompt tokens:  ([0-9]+))");
  const std::vector<double> output = numbers(r.out, R"(Total num output tokens:  ([0-9]+))");
  ASSERT_EQ(prompt.size(), 1u) << r.out;
  ASSERT_EQ(output.size(), 1u) << r.out;
  // The random dataset's prompts are exactly --input-len tokens of the model's tokenizer,
  // and ignore_eos makes every output exactly --output-len tokens.
  EXPECT_EQ(prompt[0], kPrompts * kInputLen);
  EXPECT_EQ(output[0], kPrompts * kOutputLen);

  // vLLM's --output-json keys, consistent with each other and with the printed lines.
  const nlohmann::json& j = r.json;
  ASSERT_TRUE(j.is_object()) << "no JSON written";
  for (const char* key : {"elapsed_time", "num_requests", "total_num_tokens", "requests_per_second",
                          "tokens_per_second"}) {
    ASSERT_TRUE(j.contains(key) && j[key].is_number()) << key << " in " << j.dump();
  }
  EXPECT_EQ(j.size(), 5u) << j.dump();
  const double elapsed = j["elapsed_time"].get<double>();
  ASSERT_GT(elapsed, 0.0);
  EXPECT_EQ(j["num_requests"], kPrompts);
  EXPECT_EQ(j["total_num_tokens"], kPrompts * (kInputLen + kOutputLen));
  EXPECT_TRUE(close(j["requests_per_second"].get<double>(), kPrompts / elapsed)) << j.dump();
  EXPECT_TRUE(
      close(j["tokens_per_second"].get<double>(), kPrompts * (kInputLen + kOutputLen) / elapsed))
      << j.dump();
  // The printed rates are the JSON's, to the two decimals printed.
  EXPECT_NEAR(rates[0], j["requests_per_second"].get<double>(), 0.0051);
  EXPECT_NEAR(rates[1], j["tokens_per_second"].get<double>(), 0.0051);
  EXPECT_NEAR(rates[2], kPrompts * kOutputLen / elapsed, 0.0051);
}

TEST(BenchOffline, LatencyPrintsAndWritesVllmFields) {
  constexpr int kIters = 3;
  const BenchRun r = run_bench("latency",
                               "--input-len 8 --output-len 4 --batch-size 2 "
                               "--num-iters-warmup 1 --num-iters " +
                                   std::to_string(kIters) + " --max-model-len 64");
  ASSERT_EQ(r.exit_code, 0) << r.out;

  // vLLM's --output-json: every iteration's batch latency and statistics of them.
  const nlohmann::json& j = r.json;
  ASSERT_TRUE(j.is_object()) << "no JSON written";
  for (const char* key : {"avg_latency", "std_latency", "latencies", "percentiles"}) {
    ASSERT_TRUE(j.contains(key)) << key << " in " << j.dump();
  }
  EXPECT_EQ(j.size(), 4u) << j.dump();
  const std::vector<double> latencies = j["latencies"].get<std::vector<double>>();
  ASSERT_EQ(latencies.size(), static_cast<size_t>(kIters));
  double sum = 0;
  for (double l : latencies) {
    EXPECT_GT(l, 0.0);
    sum += l;
  }
  const double mean = sum / kIters;
  double var = 0;
  for (double l : latencies) var += (l - mean) * (l - mean);
  EXPECT_TRUE(close(j["avg_latency"].get<double>(), mean)) << j.dump();
  EXPECT_TRUE(close(j["std_latency"].get<double>(), std::sqrt(var / kIters), 1e-6)) << j.dump();
  const nlohmann::json& pct = j["percentiles"];
  ASSERT_EQ(pct.size(), 6u) << pct.dump();
  for (int p : {10, 25, 50, 75, 90, 99}) {
    const std::string key = std::to_string(p);
    ASSERT_TRUE(pct.contains(key)) << key;
    EXPECT_TRUE(close(pct[key].get<double>(), percentile(latencies, p)))
        << key << ": " << pct.dump();
  }

  // vLLM's printed lines carry the same values.
  const std::vector<double> avg = numbers(r.out, R"(Avg latency: ([0-9.e+-]+) seconds)");
  const std::vector<double> sd = numbers(r.out, R"(Std latency: ([0-9.e+-]+) seconds)");
  ASSERT_EQ(avg.size(), 1u) << r.out;
  ASSERT_EQ(sd.size(), 1u) << r.out;
  EXPECT_TRUE(close(avg[0], mean, 1e-6)) << r.out;
  EXPECT_TRUE(close(sd[0], j["std_latency"].get<double>(), 1e-6)) << r.out;
  for (int p : {10, 25, 50, 75, 90, 99}) {
    const std::vector<double> v =
        numbers(r.out, std::to_string(p) + R"(% percentile latency: ([0-9.e+-]+) seconds)");
    ASSERT_EQ(v.size(), 1u) << p << "% line missing:\n" << r.out;
    EXPECT_TRUE(close(v[0], pct[std::to_string(p)].get<double>(), 1e-6)) << r.out;
  }
}

TEST(BenchOffline, RequestsLongerThanTheModelAreRefused) {
  const BenchRun r = run_bench("latency",
                               "--input-len 60 --output-len 8 --batch-size 1 "
                               "--num-iters-warmup 0 --num-iters 1 --max-model-len 64");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(r.json.is_null()) << "a refused run wrote " << r.json.dump();
}

}  // namespace
}  // namespace test_bench_offline
}  // namespace vllm
