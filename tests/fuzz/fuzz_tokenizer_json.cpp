// libFuzzer target for tokenizer.json loading: a model folder's tokenizer file is untrusted
// input. Any input must either be rejected with a Status carrying a message, or give a
// tokenizer that encodes and decodes a few fixed strings without crashing, whose decode of
// any id below vocab_size() either works or is kOutOfRange, and whose streaming
// detokenizer agrees with decode() (the property the unit tests check on real files).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_util.h"

namespace {

void require(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "fuzz_tokenizer_json invariant broken: %s\n", what);
    std::abort();
  }
}

const char* const kSamples[] = {
    "Hello world",
    "  hi  <s> there\n\n\t12345 caf\u00e9 e\u0301",
    "\u4f60\u597d\U0001F44D\U0001F3FD <|im_start|>",
    "",
};

void check_decode(const vllm::Tokenizer& t, const std::vector<int32_t>& ids) {
  for (bool skip : {false, true}) {
    vllm::DecodeOptions o;
    o.skip_special_tokens = skip;
    auto text = t.decode(ids, o);
    if (!text.has_value()) {
      require(
          text.status().code() == vllm::ErrorCode::kOutOfRange || !text.status().message().empty(),
          "decode error without a message");
      continue;
    }
    require(vllm::tok::find_invalid_utf8(*text) == std::string_view::npos,
            "decode produced invalid UTF-8");
    vllm::IncrementalDetokenizer stream(t, o);
    std::string streamed;
    bool ok = true;
    for (int32_t id : ids) {
      auto piece = stream.step(id);
      if (!piece.has_value()) {
        ok = false;
        break;
      }
      require(vllm::tok::find_invalid_utf8(*piece) == std::string_view::npos,
              "stream piece is not whole UTF-8");
      streamed += *piece;
    }
    if (!ok) continue;
    auto tail = stream.flush();
    require(tail.has_value(), "flush failed after successful steps");
    streamed += *tail;
    if (streamed != *text) {
      std::fprintf(stderr, "skip_special_tokens=%d ids:", skip ? 1 : 0);
      for (int32_t id : ids) std::fprintf(stderr, " %d", id);
      std::fprintf(stderr, "\ndecode:   \"%s\"\nstreamed: \"%s\"\n", text->c_str(),
                   streamed.c_str());
      require(false, "the streamed pieces do not concatenate to decode()");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto tokenizer = vllm::Tokenizer::from_json(text, "fuzz.json");
  if (!tokenizer.has_value()) {
    require(!tokenizer.status().message().empty(), "error without a message");
    return 0;
  }
  const vllm::Tokenizer& t = tokenizer.value();
  for (const char* sample : kSamples) {
    for (bool special : {false, true}) {
      auto ids = t.encode(sample, special);
      if (!ids.has_value()) {
        require(!ids.status().message().empty(), "encode error without a message");
        continue;
      }
      for (int32_t id : *ids) require(id >= 0, "negative id");
      check_decode(t, *ids);
    }
  }
  std::vector<int32_t> all;
  for (int32_t id = 0; id < t.vocab_size() && id < 64; ++id) all.push_back(id);
  check_decode(t, all);
  require(!t.encode("\xff", false).has_value(), "invalid UTF-8 was accepted");
  return 0;
}
