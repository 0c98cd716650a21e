// vLLM's RandomDataset (`--dataset random`): synthetic prompts of exact token lengths.
//
// Per request: an input length uniform in [floor(I'(1-r)), ceil(I'(1+r))] where I' is
// --random-input-len less the special tokens the tokenizer adds, an output length uniform in
// [max(1, floor(O(1-r))), max(1, ceil(O(1+r)))], and a random offset. The prompt is an
// optional shared random prefix followed by consecutive allowed (non-special) token ids
// starting at offset + index, decoded to text; the text is re-encoded and cut or padded until
// it encodes to exactly the target length (up to 10 tries, as vLLM's
// gen_prompt_decode_to_target_len). Seeded: the same seed gives the same prompts (our RNG is
// std::mt19937_64, so the prompts are not numpy's, but the construction is vLLM's).
//
// Without a tokenizer (a checkpoint with only config.json) prompts are token ids over
// [0, vocab_size) instead of text; completions servers accept a prompt of token ids.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace vllm::bench {

struct SampleRequest {
  std::string prompt;                     // text, or empty when prompt_token_ids is the prompt
  std::vector<int32_t> prompt_token_ids;  // the prompt's tokens (without special tokens)
  int64_t prompt_len = 0;
  int64_t expected_output_len = 0;
  std::string request_id;
};

struct RandomDatasetOptions {
  int64_t num_requests = 1000;
  int64_t input_len = 1024;   // --random-input-len
  int64_t output_len = 128;   // --random-output-len
  int64_t prefix_len = 0;     // --random-prefix-len
  double range_ratio = 0.0;   // --random-range-ratio, in [0, 1)
  uint64_t seed = 0;
  std::string request_id_prefix;
};

// `tokenizer` may be null: then `vocab_size` (the model's) bounds the token ids.
Expected<std::vector<SampleRequest>> sample_random_requests(const RandomDatasetOptions& options,
                                                            const Tokenizer* tokenizer,
                                                            int64_t vocab_size);

}  // namespace vllm::bench
