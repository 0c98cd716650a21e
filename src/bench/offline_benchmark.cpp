// `vllm bench throughput` and `vllm bench latency`; see offline_benchmark.h.
#include "bench/offline_benchmark.h"

#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <random>

#include "bench/progress.h"
#include "bench/random_dataset.h"
#include "bench/stats.h"
#include "engine/output_processor.h"

namespace vllm::bench {

Expected<OfflineRunStats> run_offline_batch(engine::LoadedEngine& loaded,
                                            const std::vector<OfflineRequest>& requests,
                                            const OfflineRunOptions& options) {
  engine::EngineCore& core = *loaded.core;
  engine::OutputProcessor processor(options.detokenize ? loaded.tokenizer.get() : nullptr);
  std::unique_ptr<ProgressBar> pbar;
  if (options.progress) {
    pbar = std::make_unique<ProgressBar>(static_cast<int64_t>(requests.size()), "Processed prompts");
  }
  OfflineRunStats stats;
  stats.num_requests = static_cast<int64_t>(requests.size());
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < requests.size(); ++i) {
    SamplingParams params;
    params.n = options.n;
    params.temperature = 1.0;
    params.top_p = 1.0;
    params.ignore_eos = true;
    params.max_tokens = static_cast<int32_t>(requests[i].output_len);
    const std::string id = fmt::format("bench-{}-{}", options.tag, i);
    VLLM_ASSIGN_OR_RETURN(auto children, processor.add_request(id, requests[i].prompt_token_ids, params));
    for (const auto& child : children) {
      VLLM_RETURN_IF_ERROR(core.add_request(child.request_id, requests[i].prompt_token_ids, child.params)
                               .with_context(fmt::format("request {}", i)));
    }
  }
  while (core.has_unfinished_requests() || processor.has_unfinished()) {
    VLLM_ASSIGN_OR_RETURN(auto outputs, core.step());
    std::vector<std::string> to_abort;
    for (const engine::RequestOutput& r : processor.process(outputs, &to_abort)) {
      if (!r.finished) continue;
      stats.prompt_tokens += static_cast<int64_t>(r.prompt_token_ids.size());
      for (const auto& c : r.outputs) stats.output_tokens += static_cast<int64_t>(c.token_ids.size());
      if (pbar) pbar->update(1);
    }
    if (!to_abort.empty()) core.abort_requests(to_abort);
  }
  stats.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

namespace {

// Checks every request fits the model length, as vLLM asserts before running.
Status check_fits(const engine::LoadedEngine& loaded, int64_t max_total) {
  const int64_t max_model_len = loaded.core->config().scheduler.max_model_len;
  if (max_model_len > 0 && max_total > max_model_len) {
    return make_error(ErrorCode::kInvalidArgument,
                      "Please ensure that max_model_len ({}) is greater than the sum of input_len "
                      "and output_len ({})",
                      max_model_len, max_total);
  }
  return Status::ok();
}

}  // namespace

Expected<nlohmann::json> run_throughput_benchmark(const ThroughputOptions& o,
                                                  engine::LoadedEngine& loaded, std::FILE* out) {
  RandomDatasetOptions data;
  data.num_requests = o.num_prompts;
  data.input_len = o.input_len;
  data.output_len = o.output_len;
  data.prefix_len = o.prefix_len;
  data.range_ratio = o.range_ratio;
  data.seed = o.seed;
  const Tokenizer* tokenizer = loaded.tokenizer.get();
  VLLM_ASSIGN_OR_RETURN(auto samples, sample_random_requests(data, tokenizer,
                                                             loaded.core->model_config().vocab_size));
  std::vector<OfflineRequest> requests;
  int64_t max_total = 0;
  for (const SampleRequest& s : samples) {
    OfflineRequest r;
    if (tokenizer != nullptr) {
      // vLLM hands the engine the text, which it tokenizes with the special tokens.
      VLLM_ASSIGN_OR_RETURN(r.prompt_token_ids, tokenizer->encode(s.prompt, /*add_special_tokens=*/true));
    } else {
      r.prompt_token_ids = s.prompt_token_ids;
    }
    r.output_len = s.expected_output_len;
    max_total = std::max<int64_t>(max_total, static_cast<int64_t>(r.prompt_token_ids.size()) + r.output_len);
    requests.push_back(std::move(r));
  }
  VLLM_RETURN_IF_ERROR(check_fits(loaded, max_total));
  OfflineRunOptions run;
  run.n = o.n;
  run.detokenize = !o.disable_detokenize;
  run.progress = !o.disable_tqdm;
  VLLM_ASSIGN_OR_RETURN(auto stats, run_offline_batch(loaded, requests, run));
  const int64_t total_tokens = stats.prompt_tokens + stats.output_tokens;
  const double t = stats.elapsed_s;
  std::fprintf(out, "Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s\n",
               stats.num_requests / t, total_tokens / t, stats.output_tokens / t);
  std::fprintf(out, "Total num prompt tokens:  %lld\n", static_cast<long long>(stats.prompt_tokens));
  std::fprintf(out, "Total num output tokens:  %lld\n", static_cast<long long>(stats.output_tokens));
  return nlohmann::json{{"elapsed_time", t},
                        {"num_requests", stats.num_requests},
                        {"total_num_tokens", total_tokens},
                        {"requests_per_second", stats.num_requests / t},
                        {"tokens_per_second", total_tokens / t}};
}

Expected<nlohmann::json> run_latency_benchmark(const LatencyOptions& o, engine::LoadedEngine& loaded,
                                               std::FILE* out) {
  if (o.batch_size <= 0 || o.input_len <= 0 || o.output_len <= 0 || o.num_iters <= 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--batch-size, --input-len, --output-len and --num-iters must be positive");
  }
  VLLM_RETURN_IF_ERROR(check_fits(loaded, o.input_len + o.output_len));
  // vLLM's dummy prompts: token ids uniform in [0, 10000) (the vocabulary, if smaller).
  const int64_t high = std::min<int64_t>(10000, loaded.core->model_config().vocab_size);
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(high - 1));
  std::vector<OfflineRequest> batch(o.batch_size);
  for (OfflineRequest& r : batch) {
    for (int64_t k = 0; k < o.input_len; ++k) r.prompt_token_ids.push_back(token(rng));
    r.output_len = o.output_len;
  }
  OfflineRunOptions run;
  run.n = o.n;
  run.detokenize = !o.disable_detokenize;
  int64_t iteration = 0;
  auto run_once = [&]() -> Expected<double> {
    run.tag = std::to_string(iteration++);
    VLLM_ASSIGN_OR_RETURN(auto stats, run_offline_batch(loaded, batch, run));
    return stats.elapsed_s;
  };
  std::fprintf(out, "Warming up...\n");
  std::fflush(out);
  {
    ProgressBar pbar(o.num_iters_warmup, "Warmup iterations", o.disable_tqdm);
    for (int64_t i = 0; i < o.num_iters_warmup; ++i) {
      VLLM_RETURN_IF_ERROR(run_once().status());
      pbar.update(1);
    }
  }
  std::vector<double> latencies;
  {
    ProgressBar pbar(o.num_iters, "Bench iterations", o.disable_tqdm);
    for (int64_t i = 0; i < o.num_iters; ++i) {
      VLLM_ASSIGN_OR_RETURN(double latency, run_once());
      latencies.push_back(latency);
      pbar.update(1);
    }
  }
  const double avg = mean(latencies), sd = stdev(latencies);
  std::fprintf(out, "Avg latency: %s seconds\n", fmt::format("{}", avg).c_str());
  std::fprintf(out, "Std latency: %s seconds\n", fmt::format("{}", sd).c_str());
  nlohmann::json percentiles = nlohmann::json::object();
  for (int p : {10, 25, 50, 75, 90, 99}) {
    const double v = percentile(latencies, p);
    std::fprintf(out, "%d%% percentile latency: %s seconds\n", p, fmt::format("{}", v).c_str());
    percentiles[std::to_string(p)] = v;
  }
  return nlohmann::json{{"avg_latency", avg},
                        {"std_latency", sd},
                        {"latencies", latencies},
                        {"percentiles", percentiles}};
}

}  // namespace vllm::bench
