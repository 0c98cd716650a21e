// The stages of a tokenizer.json pipeline, as `tokenizers` runs them:
//
//   text -> added tokens split out -> normalizer (per remaining piece) -> pre-tokenizer
//        -> model (BPE, per word) -> post-processor (special tokens)      [encode]
//   ids -> token strings -> decoder chain -> text                           [decode]
//
// Encoding works on `Pieces`: byte ranges of one arena string. A piece that is an added
// token carries its id and is left alone by later stages, as in `tokenizers`'
// PreTokenizedString. We track no offsets into the original text: the API returns ids only.
// The one place offsets matter (Metaspace's prepend_scheme "first") uses `at_start`.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/pattern.h"

namespace vllm::tok {

struct Piece {
  uint32_t begin = 0;
  uint32_t end = 0;
  int32_t id = -1;        // >= 0: an added token, already final
  bool at_start = false;  // begins at offset 0 of the original text
};

// Working memory of one encode call. Stages read pieces from `list` and write the result
// to `next`, then swap; new text (a normalizer's or ByteLevel's output) is appended to
// `arena`, whose earlier bytes never move relative to piece offsets.
struct Pieces {
  std::string arena;
  std::vector<Piece> list;
  std::vector<Piece> next;
  std::vector<Match> matches;  // scratch
  std::string buffer;          // scratch

  std::string_view text(const Piece& p) const {
    return std::string_view(arena.data() + p.begin, p.end - p.begin);
  }
  // Appends a piece of `next` (dropping empty ones, as PreTokenizedString::split does).
  void emit(uint32_t begin, uint32_t end, bool at_start) {
    if (end > begin) next.push_back({begin, end, -1, at_start});
  }
  void commit() {
    list.swap(next);
    next.clear();
  }
};

// How a split treats the delimiters it finds (SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
Expected<SplitBehavior> parse_split_behavior(const nlohmann::json& object, std::string_view where,
                                             SplitBehavior fallback);

struct Segment {
  uint32_t begin;
  uint32_t end;
  bool is_match;
};
// Splits `piece` along `segments` (which cover it, offsets relative to the piece) per
// `behavior`, emitting into pieces->next.
void split_piece(Pieces* pieces, const Piece& piece, std::vector<Segment>& segments,
                 SplitBehavior behavior);

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Appends the normalized form of `text` to *out.
  virtual Status normalize(std::string_view text, std::string* out) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits / rewrites the pieces without an id.
  virtual Status pre_tokenize(Pieces* pieces) const = 0;
};

// Decoders transform the list of token strings; `at_start` says whether the first string
// is the first of the whole decode (a window of a stream may start later), and `fused`
// whether the list has already been joined into one string covering the window.
struct DecodeState {
  bool at_start = true;
  bool fused = false;
  // Keep the bytes of byte-level and byte-fallback tokens as they are (a token may hold part
  // of a UTF-8 character); steps that read characters leave such invalid text alone.
  bool raw_bytes = false;
};
class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual Status decode_chain(std::vector<std::string>* tokens, DecodeState* state) const = 0;
  // True when a decoder in the chain joins consecutive byte tokens <0xNN> (their text can
  // still change while more byte tokens follow).
  virtual bool has_byte_fallback() const { return false; }
  // Whether this step, applied after the earlier ones (`*fused`: an earlier step joined the
  // strings into one), only ever appends text as tokens are added at the end -- so a stream
  // may hand out text before the sequence ends. Updates *fused. False for a step that looks
  // across token boundaries in fused text (Replace of more than one character, Strip at the
  // end, ByteFallback or ByteLevel on the joined string): a later token can change text that
  // earlier tokens produced.
  virtual bool appends_only(bool* fused) const = 0;
};

// The special tokens a post-processor adds around a single sequence.
struct PostProcessor {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
};

Expected<std::unique_ptr<Normalizer>> make_normalizer(const nlohmann::json& j,
                                                      std::string_view where);
Expected<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const nlohmann::json& j,
                                                           std::string_view where);
Expected<std::unique_ptr<Decoder>> make_decoder(const nlohmann::json& j, std::string_view where);
Expected<PostProcessor> make_post_processor(const nlohmann::json& j, std::string_view where);

}  // namespace vllm::tok
