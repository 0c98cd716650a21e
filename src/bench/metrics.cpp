// vLLM's calculate_metrics(); see metrics.h.
#include "bench/metrics.h"

#include <algorithm>
#include <cmath>

#include "base/status.h"
#include "bench/stats.h"

namespace vllm::bench {

MetricSummary summarize_ms(std::span<const double> seconds, std::span<const double> percentiles) {
  MetricSummary s;
  s.mean = mean(seconds) * 1000.0;
  s.median = median(seconds) * 1000.0;
  s.std = stdev(seconds) * 1000.0;
  for (double p : percentiles) s.percentiles.emplace_back(p, percentile(seconds, p) * 1000.0);
  return s;
}

namespace {

// vLLM's "peak" figures: output chunks per one-second bucket (the first chunk at start + ttft,
// then one per ITL gap) and requests active in each second, from the earliest start.
void peak_figures(std::span<const RequestOutput> outputs, BenchmarkMetrics& m) {
  double min_start = 0.0, max_end = 0.0;
  bool any = false;
  for (const RequestOutput& o : outputs) {
    if (!o.success) continue;
    min_start = any ? std::min(min_start, o.start_time) : o.start_time;
    max_end = any ? std::max(max_end, o.start_time + o.latency) : o.start_time + o.latency;
    any = true;
  }
  if (!any) return;
  const int64_t buckets = static_cast<int64_t>(std::ceil(max_end - min_start)) + 1;
  std::vector<double> tokens(buckets, 0.0);
  std::vector<int64_t> concurrent(buckets, 0);
  for (const RequestOutput& o : outputs) {
    if (!o.success) continue;
    double t = o.start_time + o.ttft;
    auto add_token = [&](double when) {
      const int64_t b = static_cast<int64_t>(when - min_start);
      if (b >= 0 && b < buckets) tokens[b] += 1.0;
    };
    add_token(t);
    for (double gap : o.itl) add_token(t += gap);
    const int64_t first = static_cast<int64_t>(o.start_time - min_start);
    const int64_t last = static_cast<int64_t>(o.start_time + o.latency - min_start);
    for (int64_t s = std::max<int64_t>(first, 0); s <= last && s < buckets; ++s) ++concurrent[s];
  }
  m.max_output_tokens_per_s = *std::max_element(tokens.begin(), tokens.end());
  m.max_concurrent_requests = *std::max_element(concurrent.begin(), concurrent.end());
}

}  // namespace

BenchmarkMetrics calculate_metrics(std::span<const RequestOutput> outputs,
                                   std::span<const int64_t> output_lens, double duration_s,
                                   std::span<const double> percentiles) {
  VLLM_CHECK(outputs.size() == output_lens.size());
  BenchmarkMetrics m;
  std::vector<double> ttfts, tpots, itls, e2els;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const RequestOutput& o = outputs[i];
    if (!o.success) {
      ++m.failed;
      continue;
    }
    const int64_t output_len = output_lens[i];
    m.total_output += output_len;
    m.total_input += o.prompt_len;
    // A one-token output has no time per output token (vLLM leaves it out of TPOT).
    if (output_len > 1) tpots.push_back((o.latency - o.ttft) / static_cast<double>(output_len - 1));
    itls.insert(itls.end(), o.itl.begin(), o.itl.end());
    ttfts.push_back(o.ttft);
    e2els.push_back(o.latency);
    ++m.completed;
  }
  if (duration_s > 0.0) {
    m.request_throughput = static_cast<double>(m.completed) / duration_s;
    m.output_throughput = static_cast<double>(m.total_output) / duration_s;
    m.total_token_throughput = static_cast<double>(m.total_input + m.total_output) / duration_s;
  }
  m.ttft_ms = summarize_ms(ttfts, percentiles);
  m.tpot_ms = summarize_ms(tpots, percentiles);
  m.itl_ms = summarize_ms(itls, percentiles);
  m.e2el_ms = summarize_ms(e2els, percentiles);
  peak_figures(outputs, m);
  return m;
}

}  // namespace vllm::bench
