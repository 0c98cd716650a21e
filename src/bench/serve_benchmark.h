// `vllm bench serve` without the command line: vLLM's benchmark() coroutine as threads.
//
// A first request checks the server answers (retried while it still refuses connections, up
// to ready_check_timeout_s). Then requests are released at their arrival times
// (arrivals.h) to a pool of worker threads, one HTTP connection each; the pool has
// max_concurrency workers, which is vLLM's semaphore: a released request waits for a free
// worker, and its clock starts when a worker sends it. With no limit every request gets a
// worker (capped at kMaxWorkers threads). The duration runs from the first release to the
// last response.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "bench/metrics.h"
#include "bench/random_dataset.h"
#include "bench/request_func.h"
#include "tokenizer/tokenizer.h"

namespace vllm::bench {

inline constexpr int64_t kMaxWorkers = 1024;

struct ServeBenchmarkOptions {
  Endpoint endpoint;
  std::string model_id;    // --model: what the result JSON records
  std::string model_name;  // sent as "model" (--served-model-name, else model_id)
  std::string tokenizer_id;
  std::string label;       // --label (default: the backend)
  double request_rate = std::numeric_limits<double>::infinity();
  double burstiness = 1.0;
  std::optional<int64_t> max_concurrency;
  uint64_t seed = 0;
  bool ignore_eos = false;
  std::vector<std::string> percentile_metrics = {"ttft", "tpot", "itl", "e2el"};
  std::vector<double> percentiles = {99.0};
  bool disable_tqdm = false;
  bool save_detailed = false;
  int64_t num_warmups = 0;
  double ready_check_timeout_s = 600.0;  // 0: skip the ready check
  nlohmann::json extra_body = nlohmann::json::object();  // sampling parameters and --extra-body
};

struct ServeBenchmarkResult {
  BenchmarkMetrics metrics;
  double duration_s = 0.0;
  std::vector<RequestOutput> outputs;
  std::vector<int64_t> output_lens;
  std::string table;    // vLLM's printed result table
  nlohmann::json json;  // vLLM's result JSON (config keys and benchmark keys)
};

// Output token count per request, as vLLM counts it: the server's usage.completion_tokens;
// without usage, the generated text re-encoded (when there is a tokenizer), else the number
// of chunks that carried a choice. 0 for a failed request.
std::vector<int64_t> resolve_output_lens(const std::vector<RequestOutput>& outputs,
                                         const Tokenizer* tokenizer);

// Runs the benchmark; progress and vLLM's status lines go to `log` (stdout in the CLI).
Expected<ServeBenchmarkResult> run_serve_benchmark(const ServeBenchmarkOptions& options,
                                                   const std::vector<SampleRequest>& requests,
                                                   const Tokenizer* tokenizer, std::FILE* log);

}  // namespace vllm::bench
