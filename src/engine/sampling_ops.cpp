// The per-row sampling steps (see sampling_ops.h). Arithmetic follows vLLM's torch code in
// float32 where it decides which tokens survive (penalties, temperature); cumulative sums
// and softmax normalisers are in double so boundaries (top-p) are exact on exact inputs.
#include "engine/sampling_ops.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>

#include "backend/cpu/sum_exp.h"
#include "base/status.h"

namespace vllm {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

size_t checked_id(int32_t id, size_t vocab_size) {
  VLLM_CHECK_MSG(id >= 0 && static_cast<size_t>(id) < vocab_size,
                 "token id {} outside the logits row of {} entries", id, vocab_size);
  return static_cast<size_t>(id);
}

float max_logit(std::span<const float> logits) {
  float m = kNegInf;
  for (float v : logits) m = std::max(m, v);
  return m;
}

// Orders token ids by logit, largest first, lower id first on ties.
struct ByLogitDesc {
  std::span<const float> logits;
  bool operator()(int32_t a, int32_t b) const {
    const float la = logits[static_cast<size_t>(a)];
    const float lb = logits[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  }
};

// sum_i exp(l_i - m): float exponentials (what torch's float32 softmax uses), double sum;
// SIMD where the CPU has it (backend/cpu/sum_exp.h).
double sum_exp(std::span<const float> logits, float m) {
  return cpu::sum_exp(logits.data(), static_cast<int64_t>(logits.size()), m);
}

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

void apply_token_bitmask(std::span<float> logits, std::span<const uint32_t> bitmask) {
  const size_t covered = std::min(logits.size(), bitmask.size() * 32);
  for (size_t w = 0; w * 32 < covered; ++w) {
    const uint32_t bits = bitmask[w];
    if (bits == 0xFFFFFFFFu) continue;
    const size_t end = std::min(covered, w * 32 + 32);
    if (bits == 0) {  // most words of a grammar's mask
      std::fill(logits.begin() + static_cast<std::ptrdiff_t>(w * 32),
                logits.begin() + static_cast<std::ptrdiff_t>(end), kNegInf);
      continue;
    }
    for (size_t i = w * 32; i < end; ++i) {
      if (!((bits >> (i % 32)) & 1u)) logits[i] = kNegInf;
    }
  }
  for (size_t i = covered; i < logits.size(); ++i) logits[i] = kNegInf;
}

void apply_min_tokens(std::span<float> logits, int32_t min_tokens, size_t num_generated,
                      std::span<const int32_t> stop_ids, std::span<const int32_t> eos_ids) {
  if (min_tokens <= 0 || num_generated >= static_cast<size_t>(min_tokens)) return;
  for (int32_t id : stop_ids) logits[checked_id(id, logits.size())] = kNegInf;
  for (int32_t id : eos_ids) logits[checked_id(id, logits.size())] = kNegInf;
}

void apply_logit_bias(std::span<float> logits, const std::map<int32_t, float>& logit_bias) {
  for (const auto& [id, bias] : logit_bias) logits[checked_id(id, logits.size())] += bias;
}

void apply_penalties(std::span<float> logits, std::span<const int32_t> prompt_token_ids,
                     std::span<const int32_t> output_token_ids, const Penalties& penalties) {
  const size_t vocab = logits.size();
  if (penalties.repetition != 1.0) {
    std::vector<uint8_t> seen(vocab, 0);
    for (int32_t id : prompt_token_ids) seen[checked_id(id, vocab)] = 1;
    for (int32_t id : output_token_ids) seen[checked_id(id, vocab)] = 1;
    const float r = static_cast<float>(penalties.repetition);
    const float inv_r = 1.0f / r;
    for (size_t i = 0; i < vocab; ++i) {
      if (seen[i]) logits[i] *= logits[i] > 0.0f ? inv_r : r;
    }
  }
  if (penalties.frequency == 0.0 && penalties.presence == 0.0) return;
  std::vector<int32_t> sorted(output_token_ids.begin(), output_token_ids.end());
  std::sort(sorted.begin(), sorted.end());
  const float frequency = static_cast<float>(penalties.frequency);
  const float presence = static_cast<float>(penalties.presence);
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
    float& logit = logits[checked_id(sorted[i], vocab)];
    logit -= frequency * static_cast<float>(j - i);
    logit -= presence;
    i = j;
  }
}

void apply_temperature(std::span<float> logits, double temperature) {
  const float t = static_cast<float>(temperature);
  for (float& v : logits) v /= t;
}

void apply_min_p(std::span<float> logits, double min_p) {
  if (min_p <= 0.0) return;
  const float m = max_logit(logits);
  if (m == kNegInf) return;
  // p_i < min_p * p_max  <=>  l_i < l_max + log(min_p) (the softmax normaliser cancels).
  const double cutoff = static_cast<double>(m) + std::log(min_p);
  for (float& v : logits) {
    if (static_cast<double>(v) < cutoff) v = kNegInf;
  }
}

void apply_top_k(std::span<float> logits, int32_t k) {
  if (k <= 0 || static_cast<size_t>(k) >= logits.size()) return;
  float threshold = kNegInf;  // the k-th largest logit
  if (k <= 1024) {
    // One pass keeping the k largest in a min-heap: most logits only meet its top.
    std::vector<float> heap(logits.begin(), logits.begin() + k);
    std::make_heap(heap.begin(), heap.end(), std::greater<float>());
    for (size_t i = static_cast<size_t>(k); i < logits.size(); ++i) {
      if (logits[i] > heap.front()) {
        std::pop_heap(heap.begin(), heap.end(), std::greater<float>());
        heap.back() = logits[i];
        std::push_heap(heap.begin(), heap.end(), std::greater<float>());
      }
    }
    threshold = heap.front();
  } else {
    std::vector<float> values(logits.begin(), logits.end());
    auto kth = values.begin() + (k - 1);
    std::nth_element(values.begin(), kth, values.end(), std::greater<float>());
    threshold = *kth;
  }
  for (float& v : logits) {
    if (v < threshold) v = kNegInf;
  }
}

void apply_top_p(std::span<float> logits, double p) {
  if (p >= 1.0) return;
  const float m = max_logit(logits);
  if (m == kNegInf) return;
  std::vector<int32_t> candidates;
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] == kNegInf) continue;
    candidates.push_back(static_cast<int32_t>(i));
    total += std::exp(logits[i] - m);
  }
  // Sort only as far as needed: the top 64 first, then 8x more while the mass is short
  // (select the next window with nth_element, then sort just the window).
  const ByLogitDesc order{logits};
  const size_t n = candidates.size();
  size_t sorted = 0;
  size_t keep = n;
  double before = 0.0;  // mass of the tokens ahead of the current one
  for (size_t end = std::min<size_t>(n, 64); keep == n && sorted < n; end = std::min(n, end * 8)) {
    auto first = candidates.begin() + static_cast<ptrdiff_t>(sorted);
    auto last = candidates.begin() + static_cast<ptrdiff_t>(end);
    if (last != candidates.end()) std::nth_element(first, last, candidates.end(), order);
    std::sort(first, last, order);
    for (; sorted < end; ++sorted) {
      // vLLM masks a token when the mass from it downwards is <= 1 - p.
      if (!(1.0 - before / total > 1.0 - p)) {
        keep = sorted;
        break;
      }
      before += std::exp(logits[static_cast<size_t>(candidates[sorted])] - m);
    }
  }
  for (size_t i = keep; i < n; ++i) logits[static_cast<size_t>(candidates[i])] = kNegInf;
}

int32_t argmax(std::span<const float> logits) {
  VLLM_CHECK(!logits.empty());
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

int32_t sample_from_logits(std::span<const float> logits, double u) {
  const float m = max_logit(logits);
  if (m == kNegInf) return argmax(logits);
  std::vector<float> weights(logits.size());
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) total += weights[i] = std::exp(logits[i] - m);
  const double target = u * total;
  double cumulative = 0.0;
  int32_t last = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double w = weights[i];
    if (w <= 0.0) continue;
    cumulative += w;
    last = static_cast<int32_t>(i);
    if (cumulative > target) return last;
  }
  return last;  // rounding left target at the very top: the last drawable token
}

double uniform_from_stream(uint64_t seed, uint64_t counter) {
  constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ULL;
  // Each seed starts at a scrambled point, so nearby seeds (seed + i for n > 1) get
  // unrelated streams; draw `counter` is SplitMix64's output number counter + 1 from there.
  const uint64_t start = mix64(seed + kGamma);
  const uint64_t z = mix64(start + (counter + 1) * kGamma);
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

TokenLogprobs gather_logprobs(std::span<const float> raw_logits, int32_t token_id,
                              int32_t num_logprobs) {
  const size_t vocab = raw_logits.size();
  const size_t token = checked_id(token_id, vocab);
  const float m = max_logit(raw_logits);
  const double log_z = static_cast<double>(m) + std::log(sum_exp(raw_logits, m));

  TokenLogprobs out;
  out.token_id = token_id;
  out.logprob = static_cast<float>(static_cast<double>(raw_logits[token]) - log_z);
  const float chosen = raw_logits[token];
  out.rank = std::count_if(raw_logits.begin(), raw_logits.end(),
                           [chosen](float v) { return v >= chosen; });

  if (num_logprobs == 0 || num_logprobs < -1) return out;
  const size_t n = num_logprobs == -1 ? vocab : std::min(vocab, static_cast<size_t>(num_logprobs));
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), ByLogitDesc{raw_logits});
  out.top_token_ids.assign(ids.begin(), ids.begin() + n);
  out.top_logprobs.reserve(n);
  for (int32_t id : out.top_token_ids) {
    out.top_logprobs.push_back(
        static_cast<float>(static_cast<double>(raw_logits[static_cast<size_t>(id)]) - log_z));
  }
  return out;
}

}  // namespace vllm
