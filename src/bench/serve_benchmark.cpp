// `vllm bench serve`'s benchmark loop; see serve_benchmark.h.
#include "bench/serve_benchmark.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <mutex>
#include <thread>

#include "bench/arrivals.h"
#include "bench/progress.h"
#include "bench/report.h"

namespace vllm::bench {
namespace {

RequestFuncInput make_input(const ServeBenchmarkOptions& o, const SampleRequest& r) {
  RequestFuncInput in;
  in.prompt = r.prompt;
  if (r.prompt.empty()) in.prompt_token_ids = r.prompt_token_ids;
  in.prompt_len = r.prompt_len;
  in.output_len = r.expected_output_len;
  in.model = o.model_name.empty() ? o.model_id : o.model_name;
  in.ignore_eos = o.ignore_eos;
  in.extra_body = o.extra_body;
  in.request_id = r.request_id;
  return in;
}

// vLLM's wait_for_endpoint: the test request, again each second while the server is not up.
Status wait_for_endpoint(const ServeBenchmarkOptions& o, const RequestFuncInput& test) {
  const auto deadline = BenchClock::now() + std::chrono::duration<double>(o.ready_check_timeout_s);
  while (true) {
    RequestOutput out = send_request(o.endpoint, test, BenchClock::now());
    if (out.success) return Status::ok();
    const bool not_up = out.error.rfind("request failed:", 0) == 0;
    if (!not_up || BenchClock::now() >= deadline) {
      return make_error(ErrorCode::kInvalidArgument,
                        "Initial test run failed - Please make sure benchmark arguments are "
                        "correctly specified. Error: {}",
                        out.error);
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

// Sends `inputs` released at `send_times` (seconds from the start) through `num_workers`
// threads; outputs in input order.
std::vector<RequestOutput> run_requests(const Endpoint& endpoint,
                                        const std::vector<RequestFuncInput>& inputs,
                                        const std::vector<double>& send_times, int64_t num_workers,
                                        BenchClock::time_point start, ProgressBar* pbar) {
  std::vector<RequestOutput> outputs(inputs.size());
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<size_t> released;
  bool all_released = false;
  std::vector<std::thread> workers;
  for (int64_t w = 0; w < num_workers; ++w) {
    workers.emplace_back([&] {
      while (true) {
        size_t i;
        {
          std::unique_lock<std::mutex> lock(mutex);
          cv.wait(lock, [&] { return !released.empty() || all_released; });
          if (released.empty()) return;
          i = released.front();
          released.pop_front();
        }
        outputs[i] = send_request(endpoint, inputs[i], start);
        if (pbar != nullptr) pbar->update(1);
      }
    });
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const double at = i < send_times.size() ? send_times[i] : 0.0;
    if (at > 0.0) std::this_thread::sleep_until(start + std::chrono::duration_cast<BenchClock::duration>(
                                                            std::chrono::duration<double>(at)));
    {
      std::lock_guard<std::mutex> lock(mutex);
      released.push_back(i);
    }
    cv.notify_one();
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    all_released = true;
  }
  cv.notify_all();
  for (std::thread& t : workers) t.join();
  return outputs;
}

// Python's str(float): "inf", "1.0", "0.5".
std::string python_float(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v == std::floor(v) && std::fabs(v) < 1e16 ? fmt::format("{:.1f}", v) : fmt::format("{}", v);
}

std::string now_text() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
  return buf;
}

}  // namespace

std::vector<int64_t> resolve_output_lens(const std::vector<RequestOutput>& outputs,
                                         const Tokenizer* tokenizer) {
  std::vector<int64_t> lens;
  for (const RequestOutput& o : outputs) {
    int64_t n = 0;
    if (o.success) {
      if (o.usage_output_tokens && *o.usage_output_tokens > 0) {
        n = *o.usage_output_tokens;
      } else if (tokenizer != nullptr) {
        auto ids = tokenizer->encode(o.generated_text, /*add_special_tokens=*/false);
        n = ids ? static_cast<int64_t>(ids->size()) : o.num_chunks;
      } else {
        n = o.num_chunks;
      }
    }
    lens.push_back(n);
  }
  return lens;
}

Expected<ServeBenchmarkResult> run_serve_benchmark(const ServeBenchmarkOptions& o,
                                                   const std::vector<SampleRequest>& requests,
                                                   const Tokenizer* tokenizer, std::FILE* log) {
  VLLM_RETURN_IF_ERROR(validate_endpoint(o.endpoint));
  if (requests.empty()) return make_error(ErrorCode::kInvalidArgument, "no requests to send");
  if (o.max_concurrency && *o.max_concurrency <= 0) {
    return make_error(ErrorCode::kInvalidArgument, "--max-concurrency {}: must be positive",
                      *o.max_concurrency);
  }
  VLLM_ASSIGN_OR_RETURN(auto send_times, request_send_times(static_cast<int64_t>(requests.size()),
                                                            o.request_rate, o.burstiness, o.seed));
  std::vector<RequestFuncInput> inputs;
  for (const SampleRequest& r : requests) inputs.push_back(make_input(o, r));

  std::fprintf(log, "Starting initial single prompt test run...\n");
  std::fflush(log);
  if (o.ready_check_timeout_s > 0) {
    VLLM_RETURN_IF_ERROR(wait_for_endpoint(o, inputs[0]));
    std::fprintf(log, "Initial test run completed.\n");
  } else {
    std::fprintf(log, "Skipping endpoint ready check.\n");
  }
  const int64_t limit = o.max_concurrency.value_or(kMaxWorkers);
  if (o.num_warmups > 0) {
    std::fprintf(log, "Warming up with %lld requests...\n", static_cast<long long>(o.num_warmups));
    std::fflush(log);
    std::vector<RequestFuncInput> warmups(o.num_warmups, inputs[0]);
    for (size_t i = 0; i < warmups.size(); ++i) warmups[i].request_id += fmt::format("-warmup{}", i);
    ProgressBar pbar(o.num_warmups, "", o.disable_tqdm);
    run_requests(o.endpoint, warmups, {}, std::min(limit, o.num_warmups), BenchClock::now(), &pbar);
    pbar.close();
    std::fprintf(log, "Warmup run completed.\n");
  }
  std::fprintf(log, "Starting main benchmark run...\n");
  std::fprintf(log, "Traffic request rate: %s\n", python_float(o.request_rate).c_str());
  std::fprintf(log, "Burstiness factor: %s (%s)\n", python_float(o.burstiness).c_str(),
               o.burstiness == 1.0 ? "Poisson process" : "Gamma distribution");
  std::fprintf(log, "Maximum request concurrency: %s\n",
               o.max_concurrency ? std::to_string(*o.max_concurrency).c_str() : "None");
  std::fflush(log);

  ServeBenchmarkResult result;
  const int64_t num_workers = std::min<int64_t>(limit, static_cast<int64_t>(inputs.size()));
  {
    ProgressBar pbar(static_cast<int64_t>(inputs.size()), "", o.disable_tqdm);
    const BenchClock::time_point start = BenchClock::now();
    result.outputs = run_requests(o.endpoint, inputs, send_times, num_workers, start, &pbar);
    result.duration_s = std::chrono::duration<double>(BenchClock::now() - start).count();
    pbar.close();
  }
  result.output_lens = resolve_output_lens(result.outputs, tokenizer);
  result.metrics = calculate_metrics(result.outputs, result.output_lens, result.duration_s, o.percentiles);
  for (const RequestOutput& out : result.outputs) {
    if (!out.success) {
      std::fprintf(log, "===== failed outputs[0] = %s =====\n", out.error.c_str());
      break;
    }
  }

  ReportConfig report;
  report.max_concurrency = o.max_concurrency;
  report.request_rate = o.request_rate;
  report.percentile_metrics = o.percentile_metrics;
  report.save_detailed = o.save_detailed;
  result.table = format_result_table(result.metrics, result.duration_s, report);

  nlohmann::json j;
  j["date"] = now_text();
  j["endpoint_type"] = o.endpoint.backend;
  j["backend"] = o.endpoint.backend;
  j["label"] = o.label.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.label);
  j["model_id"] = o.model_id;
  j["tokenizer_id"] = o.tokenizer_id;
  j["num_prompts"] = requests.size();
  j["request_rate"] = std::isinf(o.request_rate) ? nlohmann::json("inf") : nlohmann::json(o.request_rate);
  j["burstiness"] = o.burstiness;
  j["max_concurrency"] = o.max_concurrency ? nlohmann::json(*o.max_concurrency) : nlohmann::json(nullptr);
  j.update(benchmark_result_json(result.metrics, result.duration_s, result.outputs,
                                 result.output_lens, report));
  result.json = std::move(j);
  return result;
}

}  // namespace vllm::bench
