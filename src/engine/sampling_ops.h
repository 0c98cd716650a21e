// The steps of sampling one token, each over one F32 logits row [vocab_size] on the CPU.
//
// The sampler (sampler.h) chains them in vLLM V1's order; they are separate functions so
// each can be tested against hand-computed logits. Masked tokens are set to -inf. Ties are
// broken towards the lower token id everywhere (argmax, top-p order, top-N logprobs).
// Random draws are counter-based: uniform_from_stream(seed, counter) is a pure function,
// so a seeded request draws the same numbers whatever else runs beside it.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

namespace vllm {

// The raw-model logprob of one chosen token (sampled, or the actual next prompt token),
// its rank and the top-N alternatives (vLLM's Logprob entries).
struct TokenLogprobs {
  int32_t token_id = -1;
  float logprob = 0.0f;  // log_softmax of the raw logits (vLLM's logprobs_mode raw_logprobs)
  int64_t rank = 0;      // 1-based: how many tokens have a logprob >= this token's
  // The N most likely tokens, most likely first (rank i + 1), when N was asked for.
  std::vector<int32_t> top_token_ids;
  std::vector<float> top_logprobs;
};

// Structured outputs: sets the logit of every token whose bit is clear in `bitmask` to -inf
// (bit id % 32 of word id / 32; tokens past the mask's end are masked too).
void apply_token_bitmask(std::span<float> logits, std::span<const uint32_t> bitmask);

// Sets the logits of `stop_ids` and `eos_ids` to -inf while num_generated < min_tokens.
void apply_min_tokens(std::span<float> logits, int32_t min_tokens, size_t num_generated,
                      std::span<const int32_t> stop_ids, std::span<const int32_t> eos_ids);

// logits[id] += bias for each entry.
void apply_logit_bias(std::span<float> logits, const std::map<int32_t, float>& logit_bias);

struct Penalties {
  double presence = 0.0;    // subtracted once from each token present in the output
  double frequency = 0.0;   // subtracted once per occurrence in the output
  double repetition = 1.0;  // tokens in prompt or output: positive logits / r, others * r
};
// vLLM's apply_penalties: repetition first, then frequency, then presence.
void apply_penalties(std::span<float> logits, std::span<const int32_t> prompt_token_ids,
                     std::span<const int32_t> output_token_ids, const Penalties& penalties);

void apply_temperature(std::span<float> logits, double temperature);

// Masks tokens whose probability is below min_p times the largest probability.
void apply_min_p(std::span<float> logits, double min_p);

// Keeps the tokens whose logit is >= the k-th largest (ties at the threshold all stay).
// k <= 0 or k >= the vocabulary size does nothing.
void apply_top_k(std::span<float> logits, int32_t k);

// Keeps the most likely tokens whose cumulative probability before them is below p: the
// smallest set of top tokens with mass >= p (vLLM's rule; a token starting exactly at mass p
// is dropped). The most likely token always stays. p >= 1 does nothing.
void apply_top_p(std::span<float> logits, double p);

// Index of the largest logit; the lowest such index on ties.
int32_t argmax(std::span<const float> logits);

// Inverse-CDF draw from softmax(logits) with u in [0, 1), scanning ids in order. Tokens
// at -inf are never drawn.
int32_t sample_from_logits(std::span<const float> logits, double u);

// A uniform double in [0, 1) for draw number `counter` of the stream `seed` (SplitMix64).
double uniform_from_stream(uint64_t seed, uint64_t counter);

// log_softmax(raw_logits)[token_id], the token's rank and, for num_logprobs > 0 (-1: the
// whole vocabulary), the top-N tokens.
TokenLogprobs gather_logprobs(std::span<const float> raw_logits, int32_t token_id,
                              int32_t num_logprobs);

}  // namespace vllm
