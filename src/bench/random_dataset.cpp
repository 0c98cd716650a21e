// vLLM's RandomDataset; see random_dataset.h.
#include "bench/random_dataset.h"

#include <cmath>
#include <random>

#include "base/logging.h"

namespace vllm::bench {
namespace {

using Rng = std::mt19937_64;

int64_t uniform(Rng& rng, int64_t low, int64_t high_inclusive) {
  return std::uniform_int_distribution<int64_t>(low, high_inclusive)(rng);
}

// Decode, re-encode, then cut or pad (random allowed tokens) until the text encodes to
// `target` tokens; vLLM's gen_prompt_decode_to_target_len. Returns the final mismatch.
Expected<int64_t> decode_to_target_len(const Tokenizer& tokenizer, std::vector<int32_t>& tokens,
                                       std::string& prompt, int64_t target,
                                       const std::vector<int32_t>& allowed, Rng& rng) {
  DecodeOptions decode;
  decode.skip_special_tokens = false;
  for (int tries_left = 10;; --tries_left) {
    VLLM_ASSIGN_OR_RETURN(prompt, tokenizer.decode(tokens, decode));
    VLLM_ASSIGN_OR_RETURN(tokens, tokenizer.encode(prompt, /*add_special_tokens=*/false));
    const int64_t len = static_cast<int64_t>(tokens.size());
    if (tries_left <= 0) return len - target;
    if (len == target) return 0;
    if (len < target) {
      while (static_cast<int64_t>(tokens.size()) < target) {
        tokens.push_back(allowed[uniform(rng, 0, static_cast<int64_t>(allowed.size()) - 1)]);
      }
    } else {
      tokens.resize(target);
    }
  }
}

}  // namespace

Expected<std::vector<SampleRequest>> sample_random_requests(const RandomDatasetOptions& o,
                                                            const Tokenizer* tokenizer,
                                                            int64_t vocab_size) {
  if (!(o.range_ratio >= 0.0 && o.range_ratio < 1.0)) {
    return make_error(ErrorCode::kInvalidArgument, "--random-range-ratio {}: must be in [0, 1)",
                      o.range_ratio);
  }
  if (o.num_requests <= 0) {
    return make_error(ErrorCode::kInvalidArgument, "--num-prompts {}: must be positive", o.num_requests);
  }
  if (tokenizer != nullptr) vocab_size = tokenizer->vocab_size();
  if (vocab_size <= 0) return make_error(ErrorCode::kInvalidArgument, "random dataset: no vocabulary");

  // Special tokens the tokenizer adds to one sequence (BOS and the like): the server adds
  // them too, so the sampled text is that much shorter.
  int64_t num_special = 0;
  std::vector<int32_t> allowed;
  if (tokenizer != nullptr) {
    VLLM_ASSIGN_OR_RETURN(auto with, tokenizer->encode("", /*add_special_tokens=*/true));
    VLLM_ASSIGN_OR_RETURN(auto without, tokenizer->encode("", /*add_special_tokens=*/false));
    num_special = static_cast<int64_t>(with.size()) - static_cast<int64_t>(without.size());
    for (int32_t id = 0; id < vocab_size; ++id) {
      if (!tokenizer->is_special(id) && tokenizer->id_to_token(id)) allowed.push_back(id);
    }
  } else {
    for (int32_t id = 0; id < vocab_size; ++id) allowed.push_back(id);
  }
  if (allowed.empty()) return make_error(ErrorCode::kInvalidArgument, "random dataset: no usable tokens");

  const double r = o.range_ratio;
  const int64_t real_input_len = std::max<int64_t>(0, o.input_len - num_special);
  const int64_t input_low = static_cast<int64_t>(std::floor(real_input_len * (1 - r)));
  const int64_t input_high = static_cast<int64_t>(std::ceil(real_input_len * (1 + r)));
  const int64_t output_low = std::max<int64_t>(1, static_cast<int64_t>(std::floor(o.output_len * (1 - r))));
  const int64_t output_high = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(o.output_len * (1 + r))));
  if (o.prefix_len + input_low < 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--random-input-len {} is too small: with {} special tokens and range ratio "
                      "{} a prompt could have no tokens",
                      o.input_len, num_special, r);
  }
  VLLM_LOG_INFO("Sampling input_len from [{}, {}] and output_len from [{}, {}]", input_low,
                input_high, output_low, output_high);

  Rng rng(o.seed);
  std::vector<int64_t> input_lens(o.num_requests), output_lens(o.num_requests), offsets(o.num_requests);
  for (auto& v : input_lens) v = uniform(rng, input_low, input_high);
  for (auto& v : output_lens) v = uniform(rng, output_low, output_high);
  for (auto& v : offsets) v = uniform(rng, 0, vocab_size - 1);
  const int64_t num_allowed = static_cast<int64_t>(allowed.size());
  std::vector<int32_t> prefix;
  for (int64_t i = 0; i < o.prefix_len; ++i) prefix.push_back(allowed[uniform(rng, 0, num_allowed - 1)]);
  if (tokenizer != nullptr && !prefix.empty()) {
    std::string text;
    VLLM_ASSIGN_OR_RETURN(auto mismatch,
                          decode_to_target_len(*tokenizer, prefix, text, o.prefix_len, allowed, rng));
    if (mismatch != 0) VLLM_LOG_WARNING("random prefix: {} tokens off after re-encoding", mismatch);
  }

  std::vector<SampleRequest> requests;
  int64_t mismatch_total = 0;
  for (int64_t i = 0; i < o.num_requests; ++i) {
    SampleRequest req;
    req.prompt_token_ids = prefix;
    for (int64_t k = 0; k < input_lens[i]; ++k) {
      req.prompt_token_ids.push_back(allowed[(offsets[i] + i + k) % num_allowed]);
    }
    if (tokenizer != nullptr) {
      const int64_t target = static_cast<int64_t>(req.prompt_token_ids.size());
      VLLM_ASSIGN_OR_RETURN(auto mismatch, decode_to_target_len(*tokenizer, req.prompt_token_ids,
                                                                req.prompt, target, allowed, rng));
      mismatch_total += mismatch;
    }
    req.prompt_len = static_cast<int64_t>(req.prompt_token_ids.size());
    req.expected_output_len = output_lens[i];
    req.request_id = o.request_id_prefix + std::to_string(i);
    requests.push_back(std::move(req));
  }
  if (mismatch_total != 0) {
    VLLM_LOG_WARNING(
        "Across all generated prompts, there were {} {} tokens than expected after decoding and "
        "re-encoding. This is expected due to the imperfect nature of the sampling procedure.",
        std::abs(mismatch_total), mismatch_total > 0 ? "more" : "fewer");
  }
  return requests;
}

}  // namespace vllm::bench
