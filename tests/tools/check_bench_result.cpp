// Checks a `vllm bench serve --save-result` JSON file (jq-free, for scripts/bench_smoke.sh):
// every key vLLM writes is there, nothing failed, and the counts match what was asked.
//   check_bench_result FILE NUM_PROMPTS OUTPUT_LEN
// OUTPUT_LEN is --random-output-len with --random-range-ratio 0 (outputs are exact because
// the random dataset sends ignore_eos). Exit 0 when all holds, 1 with a message otherwise.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: check_bench_result FILE NUM_PROMPTS OUTPUT_LEN\n");
    return 2;
  }
  std::ifstream in(argv[1]);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    std::fprintf(stderr, "%s: not a JSON object\n", argv[1]);
    return 1;
  }
  const long long num_prompts = std::atoll(argv[2]);
  const long long output_len = std::atoll(argv[3]);
  int bad = 0;
  auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "check_bench_result: %s\n", what.c_str());
    ++bad;
  };
  for (const char* key :
       {"date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
        "request_rate", "burstiness", "max_concurrency", "duration", "completed", "failed",
        "total_input_tokens", "total_output_tokens", "request_throughput", "request_goodput",
        "output_throughput", "total_token_throughput", "input_lens", "output_lens", "ttfts", "itls",
        "errors", "max_output_tokens_per_s", "max_concurrent_requests"}) {
    if (!j.contains(key)) fail(std::string("missing key ") + key);
  }
  for (const char* metric : {"ttft", "tpot", "itl", "e2el"}) {
    for (const char* stat : {"mean", "median", "std", "p99"}) {
      const std::string key = std::string(stat) + "_" + metric + "_ms";
      if (!j.contains(key)) fail("missing key " + key);
      else if (!j[key].is_number() || j[key].get<double>() < 0) fail(key + " is not a non-negative number");
    }
  }
  if (bad) return 1;
  if (j["completed"] != num_prompts) fail("completed is " + j["completed"].dump());
  if (j["failed"] != 0) fail("failed is " + j["failed"].dump() + ": " + j["errors"].dump());
  if (j["total_output_tokens"] != num_prompts * output_len) {
    fail("total_output_tokens is " + j["total_output_tokens"].dump());
  }
  if (j["input_lens"].size() != static_cast<size_t>(num_prompts)) fail("input_lens has the wrong size");
  if (!(j["mean_ttft_ms"].get<double>() > 0)) fail("mean_ttft_ms is not positive");
  if (bad == 0) {
    std::printf("check_bench_result: %s has every key; %lld completed, %s output tokens\n", argv[1],
                num_prompts, j["total_output_tokens"].dump().c_str());
  }
  return bad ? 1 : 0;
}
