// CPU references for the CUDA sampler's tests: the CPU sampler's steps run one by one (so a
// test sees the kept set, not just the token), the matching device rows built straight from
// the same SamplingParams, and choices of top_p and of the draw u that sit well inside a
// gap, so that the fixed-point sums on the device and the double sums on the CPU agree.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "backend/cuda/sampling.cuh"
#include "engine/sampler.h"
#include "engine/sampling_ops.h"

namespace vllm::cuda_test {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One request's view of a row: what the CPU sampler reads.
struct Case {
  SamplingParams params;
  std::vector<int32_t> prompt, output, eos;
  SamplingRequestState state() const { return {&params, prompt, output, eos, {}}; }
};

// The device view of a Case, with its sparse lists. Call bind() once the object has its
// final address (the row's spans point into it).
struct DeviceCase {
  cuda::SamplingRow row;
  std::vector<cuda::PenaltyToken> penalty;
  std::vector<cuda::TokenBias> bias;
  std::vector<int32_t> masked;
  void bind() {
    row.penalty_tokens = penalty;
    row.logit_bias = bias;
    row.masked_tokens = masked;
  }
};

inline DeviceCase device_case(const Case& c, double u) {
  const SamplingParams& p = c.params;
  DeviceCase d;
  d.row.greedy = p.is_greedy();
  d.row.temperature = std::max(p.temperature, kMinTemperature);
  d.row.min_p = p.min_p;
  d.row.top_k = p.top_k;
  d.row.top_p = p.top_p;
  d.row.uniform = u;
  d.row.repetition_penalty = p.repetition_penalty;
  d.row.frequency_penalty = p.frequency_penalty;
  d.row.presence_penalty = p.presence_penalty;
  d.row.num_logprobs = p.logprobs.value_or(0);
  if (p.min_tokens > 0 && c.output.size() < static_cast<size_t>(p.min_tokens)) {
    d.masked = p.stop_token_ids;
    d.masked.insert(d.masked.end(), c.eos.begin(), c.eos.end());
  }
  for (const auto& [id, b] : p.logit_bias) d.bias.push_back({id, b});
  if (p.has_penalties()) {
    std::map<int32_t, cuda::PenaltyToken> tokens;
    for (int32_t id : c.prompt) tokens[id].in_prompt = true;
    for (int32_t id : c.output) ++tokens[id].output_count;
    for (auto& [id, t] : tokens) {
      t.token_id = id;
      d.penalty.push_back(t);
    }
  }
  return d;
}

// The CPU sampler's logits edits: min_tokens, logit_bias, penalties.
inline std::vector<float> cpu_edited(std::span<const float> raw, const Case& c) {
  const SamplingParams& p = c.params;
  std::vector<float> l(raw.begin(), raw.end());
  apply_min_tokens(l, p.min_tokens, c.output.size(), p.stop_token_ids, c.eos);
  apply_logit_bias(l, p.logit_bias);
  if (p.has_penalties()) {
    apply_penalties(l, c.prompt, c.output,
                    Penalties{p.presence_penalty, p.frequency_penalty, p.repetition_penalty});
  }
  return l;
}

// Temperature, min_p and top_k on edited logits (what top_p then sees).
inline std::vector<float> cpu_before_top_p(std::vector<float> l, const SamplingParams& p) {
  apply_temperature(l, std::max(p.temperature, kMinTemperature));
  apply_min_p(l, p.min_p);
  apply_top_k(l, p.top_k);
  return l;
}

inline size_t count_kept(const std::vector<float>& l) {
  return static_cast<size_t>(
      std::count_if(l.begin(), l.end(), [](float v) { return v != kNegInf; }));
}

// Mass fractions before each surviving token in (value desc, id asc) order: before[j] is the
// probability mass of the j tokens ahead of the j-th; before[n] = 1.
inline std::vector<double> mass_before(const std::vector<float>& l) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < l.size(); ++i) {
    if (l[i] != kNegInf) ids.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  const float m = ids.empty() ? 0.0f : l[static_cast<size_t>(ids[0])];
  std::vector<double> w;
  double total = 0.0;
  for (int32_t id : ids) total += w.emplace_back(std::exp(l[static_cast<size_t>(id)] - m));
  std::vector<double> before(ids.size() + 1, 0.0);
  double run = 0.0;
  for (size_t j = 0; j < ids.size(); ++j) {
    before[j] = run / total;
    run += w[j];
  }
  before[ids.size()] = 1.0;
  return before;
}

// A top_p that keeps exactly `keep` of the survivors of `l` (1 <= keep < survivors), in the
// middle of its gap; 0 if that gap is narrower than 2 * min_margin.
inline double top_p_keeping(const std::vector<float>& l, size_t keep, double min_margin) {
  const std::vector<double> before = mass_before(l);
  if (keep < 1 || keep + 1 >= before.size()) return 0.0;
  const double lo = before[keep - 1], hi = before[keep];
  return hi - lo >= 2 * min_margin ? 0.5 * (lo + hi) : 0.0;
}

// The CDF in id order of final (filtered) logits, as sample_from_logits builds it:
// cdf[i] is the mass of ids < i, normalised; cdf[n] = 1.
inline std::vector<double> cdf_in_id_order(const std::vector<float>& l) {
  float m = kNegInf;
  for (float v : l) m = std::max(m, v);
  std::vector<double> cdf(l.size() + 1, 0.0);
  double run = 0.0;
  for (size_t i = 0; i < l.size(); ++i) {
    cdf[i] = run;
    run += std::exp(l[i] - m);
  }
  for (size_t i = 0; i < l.size(); ++i) cdf[i] /= run;
  cdf[l.size()] = 1.0;
  return cdf;
}

// A draw u in the middle of the CDF interval of a random token whose probability is at least
// min(min_prob, the largest probability).
inline double u_inside(const std::vector<float>& l, std::mt19937& rng, double min_prob) {
  const std::vector<double> cdf = cdf_in_id_order(l);
  double largest = 0.0;
  for (size_t i = 0; i < l.size(); ++i) largest = std::max(largest, cdf[i + 1] - cdf[i]);
  const double floor = std::min(min_prob, largest);
  std::vector<size_t> choices;
  for (size_t i = 0; i < l.size(); ++i) {
    if (cdf[i + 1] - cdf[i] >= floor) choices.push_back(i);
  }
  const size_t i = choices[std::uniform_int_distribution<size_t>(0, choices.size() - 1)(rng)];
  return 0.5 * (cdf[i] + cdf[i + 1]);
}

// Whether u lands within `margin` of an edge of the CDF interval it falls in.
inline bool near_cdf_edge(const std::vector<float>& l, double u, double margin) {
  const std::vector<double> cdf = cdf_in_id_order(l);
  for (size_t i = 0; i < l.size(); ++i) {
    if (cdf[i + 1] > cdf[i] && u >= cdf[i] && u < cdf[i + 1]) {
      return u - cdf[i] < margin || cdf[i + 1] - u < margin;
    }
  }
  return true;
}

}  // namespace vllm::cuda_test
