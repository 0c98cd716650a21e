// SamplingParams: how one request wants its tokens chosen.
//
// Mirrors vLLM's vllm/sampling_params.py: the same field names, the same defaults, and the
// same validation rules with the same messages ("top_p must be in (0, 1], got 1.5."), so a
// vLLM user sees familiar errors. The life of a params object:
//   from_json(request)   parse OpenAI / vLLM request fields (type errors name the field),
//                        then normalize()
//   validate(vocab_size) vLLM's _verify_args + verify(): value ranges, then the checks that
//                        need the model (token ids in vocabulary, logprobs limit)
// The sampler (sampler.h) reads the fields; output processing reads stop / detokenize ones.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "structured/structured_outputs.h"

namespace vllm {

inline constexpr double kSamplingEps = 1e-5;        // temperature below this means greedy
inline constexpr double kMinTemperature = 1e-2;     // vLLM raises 0 < t < 0.01 to 0.01
inline constexpr int32_t kDefaultMaxLogprobs = 20;  // vLLM's --max-logprobs default
inline constexpr int32_t kMaxNSequences = 16384;    // vLLM's VLLM_MAX_N_SEQUENCES default
inline constexpr float kMaxLogitBias = 100.0f;      // from_json clamps biases to +-100

struct SamplingParams {
  int32_t n = 1;                    // outputs per prompt (>= 1)
  double presence_penalty = 0.0;    // [-2, 2], over output tokens
  double frequency_penalty = 0.0;   // [-2, 2], per occurrence in output tokens
  double repetition_penalty = 1.0;  // > 0, over prompt + output tokens (1 = off)
  double temperature = 1.0;         // [0, 2]; < kSamplingEps is greedy
  double top_p = 1.0;               // (0, 1]; 1 = off
  int32_t top_k = 0;                // 0 or -1 = off, else >= 1
  double min_p = 0.0;               // [0, 1]; 0 = off
  std::optional<int64_t> seed;      // per-request generator; none = the engine's
  std::vector<std::string> stop;    // stop strings (output processor)
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  std::optional<int32_t> max_tokens = 16;  // none = up to max_model_len
  int32_t min_tokens = 0;                  // EOS / stop_token_ids masked until reached
  std::optional<int32_t> logprobs;         // top-N per output token; -1 = whole vocab
  std::optional<int32_t> prompt_logprobs;  // top-N per prompt token; -1 = whole vocab
  bool skip_special_tokens = true;
  bool spaces_between_special_tokens = true;
  bool include_stop_str_in_output = false;
  std::map<int32_t, float> logit_bias;  // token id -> added to its logit
  // Structured outputs (vLLM's StructuredOutputsParams): the output must match a JSON
  // Schema, regex, choice or grammar. Compiled and checked by the engine.
  std::optional<structured::StructuredOutputsParams> structured_outputs;

  bool is_greedy() const { return temperature < kSamplingEps; }
  bool has_penalties() const {
    return presence_penalty != 0.0 || frequency_penalty != 0.0 || repetition_penalty != 1.0;
  }

  // vLLM's __post_init__ adjustments: 0 < temperature < 0.01 becomes 0.01 (with a
  // warning), seed -1 means no seed, duplicate stop_token_ids are dropped (first kept).
  // from_json calls it; code that builds params by hand may too. Idempotent.
  void normalize();

  // kInvalidArgument naming the field and the value for the first rule broken: vLLM's
  // value ranges, then stop_token_ids / logit_bias ids in [0, vocab_size) and
  // logprobs / prompt_logprobs (-1 meaning vocab_size) at most max_logprobs (-1: vocab).
  Status validate(int32_t vocab_size, int32_t max_logprobs = kDefaultMaxLogprobs) const;

  // Reads the sampling fields of an OpenAI / vLLM request object (completions or chat):
  // n, temperature, top_p, top_k, min_p, seed, presence_penalty, frequency_penalty,
  // repetition_penalty, logit_bias ({"token id": bias}, biases clamped to [-100, 100]),
  // stop (string or list), stop_token_ids, ignore_eos, max_tokens (chat's
  // max_completion_tokens wins when both are set), min_tokens, logprobs (an integer, or
  // chat's boolean: true takes top_logprobs, default 0; false = none), prompt_logprobs,
  // skip_special_tokens, spaces_between_special_tokens, include_stop_str_in_output,
  // structured_outputs and its older names guided_json / guided_regex / guided_choice /
  // guided_grammar / guided_whitespace_pattern (structured/structured_outputs.h).
  // Absent or null fields keep `defaults`: the caller puts the API's defaults there (chat:
  // max_tokens none) and the model's generation_config ones. Other fields are ignored. A
  // wrong type is kInvalidArgument naming the field ("'top_k' must be an integer, got
  // string"). The result is normalize()d but not validate()d (that needs the vocabulary).
  static Expected<SamplingParams> from_json(const nlohmann::json& request,
                                            const SamplingParams& defaults);
  static Expected<SamplingParams> from_json(const nlohmann::json& request);  // vLLM defaults
};

}  // namespace vllm
