// `vllm bench throughput` and `vllm bench latency`: the offline engine, no HTTP, measured
// as vLLM's throughput.py and latency.py measure it.
//
// Both sample with temperature 1.0, top_p 1.0 and ignore_eos, so every request produces
// exactly its max_tokens; requests go into one EngineCore together (continuous batching) and
// run until all finish. Throughput: --num-prompts random-dataset requests at once; reports
// requests/s, total (prompt + output) tokens/s and output tokens/s over the whole run.
// Latency: one fixed batch of --batch-size random prompts of --input-len tokens, run
// --num-iters-warmup times unmeasured and --num-iters times measured; reports the mean, std
// and 10/25/50/75/90/99th percentiles of the per-batch wall time.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "base/status.h"
#include "engine/engine_args.h"

namespace vllm::bench {

struct OfflineRequest {
  std::vector<int32_t> prompt_token_ids;
  int64_t output_len = 0;
};

struct OfflineRunStats {
  double elapsed_s = 0.0;
  int64_t num_requests = 0;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
};

// Runs `requests` (n outputs each) to completion; detokenizes when `detokenize` and the
// engine has a tokenizer. `tag` keeps request ids unique across runs on one engine.
struct OfflineRunOptions {
  int32_t n = 1;
  bool detokenize = true;
  bool progress = false;  // a "Processed prompts" bar on stderr
  std::string tag = "0";
};
Expected<OfflineRunStats> run_offline_batch(engine::LoadedEngine& engine,
                                            const std::vector<OfflineRequest>& requests,
                                            const OfflineRunOptions& options);

struct ThroughputOptions {
  int64_t num_prompts = 1000;
  int64_t input_len = 1024;
  int64_t output_len = 128;
  int64_t prefix_len = 0;
  double range_ratio = 0.0;
  int32_t n = 1;
  uint64_t seed = 0;
  bool disable_detokenize = false;
  bool disable_tqdm = false;
};

// Prints vLLM's "Throughput: ..." lines to `out`; returns vLLM's --output-json object.
Expected<nlohmann::json> run_throughput_benchmark(const ThroughputOptions& options,
                                                  engine::LoadedEngine& engine, std::FILE* out);

struct LatencyOptions {
  int64_t input_len = 32;
  int64_t output_len = 128;
  int64_t batch_size = 8;
  int32_t n = 1;
  int64_t num_iters_warmup = 10;
  int64_t num_iters = 30;
  uint64_t seed = 0;
  bool disable_detokenize = false;
  bool disable_tqdm = false;
};

// Prints vLLM's "Avg latency: ..." lines to `out`; returns vLLM's --output-json object.
Expected<nlohmann::json> run_latency_benchmark(const LatencyOptions& options,
                                               engine::LoadedEngine& engine, std::FILE* out);

}  // namespace vllm::bench
