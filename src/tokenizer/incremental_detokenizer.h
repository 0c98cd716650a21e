// Streaming detokenization: feed generated ids one at a time, get the new text.
//
// Guarantees (the property tests check them on every real tokenizer):
//   - the text only grows: each step returns an addition, never a correction;
//   - no returned piece ends inside a UTF-8 character (it is always valid UTF-8);
//   - step() outputs followed by flush() concatenate to Tokenizer::decode() of all fed ids
//     (same skip_special_tokens, no clean-up of tokenization spaces, as vLLM streams), for
//     every decoder chain (the fuzz target tests/fuzz/fuzz_tokenizer_json.cpp checks it).
//
// The method is `tokenizers`' DecodeStream, which vLLM's FastIncrementalDetokenizer drives:
// keep a window of ids starting at the last emission, decode it, and emit what grew unless
// the text ends in U+FFFD (an incomplete character). Two refinements keep the guarantees
// where DecodeStream can break them: text from byte-fallback tokens <0xNN> is held until
// their run ends (a later byte can turn the run into U+FFFDs), and a window that does not
// begin the sequence is decoded as the middle of one (Metaspace / Strip only touch the
// real start). A decoder chain that can change text already decoded when more tokens follow
// (Decoder::appends_only is false: a Replace or an end Strip on the joined string; no real
// tokenizer has one) cannot stream without taking text back, so its whole text comes out
// of flush(); vLLM restarts its stream there and loses the equality.
//
// spaces_between_special_tokens=false with skip_special_tokens=false reproduces vLLM's
// quirk: an added token right after another added token is returned as its raw content.
// That mode is outside the concatenation guarantee (as in vLLM).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace vllm {

class IncrementalDetokenizer {
 public:
  // `prompt_ids` give the first generated tokens their context, as vLLM primes its stream
  // with a suffix of the prompt (decoded text of the prompt itself is never returned).
  // The tokenizer must outlive this object.
  IncrementalDetokenizer(const Tokenizer& tokenizer, const DecodeOptions& options,
                         std::span<const int32_t> prompt_ids = {});

  // New text for one more id (often empty). kOutOfRange for an id outside the vocabulary;
  // the detokenizer is unchanged then.
  Expected<std::string> step(int32_t id);

  // The text held back at the end of the stream (an incomplete character shows as U+FFFD,
  // as decode() shows it). Call when the sequence finishes; vLLM drops this tail instead.
  Expected<std::string> flush();

 private:
  Expected<std::string> advance(int32_t id, bool force);
  bool skipped(int32_t id) const;

  const Tokenizer* tokenizer_;
  DecodeOptions options_;
  std::vector<int32_t> ids_;  // window: context [0, prefix_index_) then pending ids
  size_t prefix_index_ = 0;
  std::string prefix_;        // decode of the context
  bool at_start_ = true;      // the window begins the sequence
  bool hold_all_ = false;     // the decoder may rewrite text: everything waits for flush()
  bool space_quirk_ = false;  // vLLM's spaces_between_special_tokens=false handling
  bool last_added_ = false;
};

}  // namespace vllm
