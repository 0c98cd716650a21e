// Pre-tokenizers of tokenizer.json: Split (the model's regex), ByteLevel, Digits, Metaspace,
// Whitespace, WhitespaceSplit, Punctuation, BertPreTokenizer, CharDelimiterSplit and
// Sequence, with `tokenizers`' split behaviours (Isolated, Removed, Contiguous,
// MergedWithPrevious, MergedWithNext).
#include <algorithm>

#include "tokenizer/components.h"
#include "tokenizer/json_util.h"
#include "tokenizer/unicode_util.h"

namespace vllm::tok {

namespace {

// Segments of `text` from regex / literal matches (gaps are non-matches).
void segments_from_matches(uint32_t size, const std::vector<Match>& matches, bool invert,
                           std::vector<Segment>* segs) {
  segs->clear();
  uint32_t prev = 0;
  for (const Match& m : matches) {
    if (prev != m.begin) segs->push_back({prev, m.begin, invert});
    segs->push_back({m.begin, m.end, !invert});
    prev = m.end;
  }
  if (prev != size) segs->push_back({prev, size, invert});
  if (segs->empty()) segs->push_back({0, 0, invert});
}

// Segments from a per-character predicate: every matching character is its own segment.
template <typename Pred>
void segments_from_chars(std::string_view text, Pred pred, std::vector<Segment>* segs) {
  segs->clear();
  uint32_t last = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t start = pos;
    char32_t c = next_code_point(text, &pos);
    if (pred(c)) {
      if (last < start) segs->push_back({last, static_cast<uint32_t>(start), false});
      segs->push_back({static_cast<uint32_t>(start), static_cast<uint32_t>(pos), true});
      last = static_cast<uint32_t>(pos);
    }
  }
  if (pos > last) segs->push_back({last, static_cast<uint32_t>(pos), false});
}

template <typename Pred>
class CharSplit final : public PreTokenizer {
 public:
  CharSplit(Pred pred, SplitBehavior behavior) : pred_(pred), behavior_(behavior) {}
  Status pre_tokenize(Pieces* pieces) const override {
    std::vector<Segment> segs;
    for (const Piece& p : pieces->list) {
      if (p.id >= 0) {
        pieces->next.push_back(p);
        continue;
      }
      segments_from_chars(pieces->text(p), pred_, &segs);
      split_piece(pieces, p, segs, behavior_);
    }
    pieces->commit();
    return Status::ok();
  }

 private:
  Pred pred_;
  SplitBehavior behavior_;
};

template <typename Pred>
std::unique_ptr<PreTokenizer> char_split(Pred pred, SplitBehavior behavior) {
  return std::unique_ptr<PreTokenizer>(new CharSplit<Pred>(pred, behavior));
}

class Split final : public PreTokenizer {
 public:
  Split(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  Status pre_tokenize(Pieces* pieces) const override {
    std::vector<Segment> segs;
    for (const Piece& p : pieces->list) {
      if (p.id >= 0) {
        pieces->next.push_back(p);
        continue;
      }
      pieces->matches.clear();
      VLLM_RETURN_IF_ERROR(pattern_.find_matches(pieces->text(p), &pieces->matches));
      segments_from_matches(p.end - p.begin, pieces->matches, invert_, &segs);
      split_piece(pieces, p, segs, behavior_);
    }
    pieces->commit();
    return Status::ok();
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {
    if (use_regex_) {
      auto re = Pattern::regex(
          R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
          "ByteLevel");
      VLLM_CHECK(re.has_value());
      regex_ = std::move(re).value();
    }
  }
  Status pre_tokenize(Pieces* pieces) const override {
    std::vector<Segment> segs;
    if (add_prefix_space_ || use_regex_) {
      for (const Piece& p : pieces->list) {
        if (p.id >= 0) {
          pieces->next.push_back(p);
          continue;
        }
        Piece q = p;
        if (add_prefix_space_ && pieces->text(p).front() != ' ') {
          // Reserve first so the source bytes stay put while we copy them.
          pieces->arena.reserve(pieces->arena.size() + 1 + (p.end - p.begin));
          q.begin = static_cast<uint32_t>(pieces->arena.size());
          pieces->arena.push_back(' ');
          pieces->arena.append(pieces->arena.data() + p.begin, p.end - p.begin);
          q.end = static_cast<uint32_t>(pieces->arena.size());
        }
        if (!use_regex_) {
          pieces->next.push_back(q);
          continue;
        }
        pieces->matches.clear();
        VLLM_RETURN_IF_ERROR(regex_.find_matches(pieces->text(q), &pieces->matches));
        segments_from_matches(q.end - q.begin, pieces->matches, false, &segs);
        split_piece(pieces, q, segs, SplitBehavior::kIsolated);
      }
      pieces->commit();
    }
    // Map every byte to its printable stand-in.
    const ByteLevelTable& t = byte_level_table();
    for (Piece& p : pieces->list) {
      if (p.id >= 0) continue;
      size_t len = p.end - p.begin;
      pieces->arena.reserve(pieces->arena.size() + 2 * len);
      auto begin = static_cast<uint32_t>(pieces->arena.size());
      for (size_t k = 0; k < len; ++k) {
        auto b = static_cast<unsigned char>(pieces->arena[p.begin + k]);
        pieces->arena.append(t.utf8[b], t.utf8_len[b]);
      }
      p.begin = begin;
      p.end = static_cast<uint32_t>(pieces->arena.size());
    }
    return Status::ok();
  }

 private:
  bool add_prefix_space_;
  bool use_regex_;
  Pattern regex_;
};

class Metaspace final : public PreTokenizer {
 public:
  enum class Prepend { kFirst, kNever, kAlways };
  Metaspace(char32_t replacement, Prepend scheme, bool split)
      : replacement_(replacement), scheme_(scheme), split_(split) {
    append_utf8(&rep_, replacement);
  }
  Status pre_tokenize(Pieces* pieces) const override {
    std::vector<Segment> segs;
    for (const Piece& p : pieces->list) {
      if (p.id >= 0) {
        pieces->next.push_back(p);
        continue;
      }
      std::string& buf = pieces->buffer;
      buf.clear();
      for (char c : pieces->text(p)) {
        if (c == ' ') {
          buf += rep_;
        } else {
          buf.push_back(c);
        }
      }
      bool starts = buf.compare(0, rep_.size(), rep_) == 0;
      bool prepend =
          !starts && (scheme_ == Prepend::kAlways || (scheme_ == Prepend::kFirst && p.at_start));
      Piece q = p;
      q.begin = static_cast<uint32_t>(pieces->arena.size());
      if (prepend) pieces->arena += rep_;
      pieces->arena += buf;
      q.end = static_cast<uint32_t>(pieces->arena.size());
      if (!split_) {
        pieces->emit(q.begin, q.end, q.at_start);
        continue;
      }
      char32_t r = replacement_;
      segments_from_chars(
          pieces->text(q), [r](char32_t c) { return c == r; }, &segs);
      split_piece(pieces, q, segs, SplitBehavior::kMergedWithNext);
    }
    pieces->commit();
    return Status::ok();
  }

 private:
  char32_t replacement_;
  Prepend scheme_;
  bool split_;
  std::string rep_;
};

// `tokenizers`' Whitespace: keeps runs of \w and runs of [^\w\s]; drops whitespace.
class Whitespace final : public PreTokenizer {
 public:
  Status pre_tokenize(Pieces* pieces) const override {
    for (const Piece& p : pieces->list) {
      if (p.id >= 0) {
        pieces->next.push_back(p);
        continue;
      }
      std::string_view text = pieces->text(p);
      size_t pos = 0;
      int run_kind = -1;  // 0 word, 1 other
      size_t run_start = 0;
      while (pos <= text.size()) {
        size_t start = pos;
        int kind = 2;  // whitespace / end
        if (pos < text.size()) {
          char32_t c = next_code_point(text, &pos);
          kind = is_word_char(c) ? 0 : is_whitespace(c) ? 2 : 1;
        } else {
          ++pos;
        }
        if (kind != run_kind) {
          if (run_kind == 0 || run_kind == 1) {
            pieces->emit(p.begin + static_cast<uint32_t>(run_start),
                         p.begin + static_cast<uint32_t>(start), p.at_start && run_start == 0);
          }
          run_kind = kind;
          run_start = start;
        }
      }
    }
    pieces->commit();
    return Status::ok();
  }
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  Status pre_tokenize(Pieces* pieces) const override {
    for (const auto& part : parts_) VLLM_RETURN_IF_ERROR(part->pre_tokenize(pieces));
    return Status::ok();
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

class Chain final : public PreTokenizer {  // BertPreTokenizer: whitespace, then punctuation
 public:
  Chain(std::unique_ptr<PreTokenizer> a, std::unique_ptr<PreTokenizer> b)
      : a_(std::move(a)), b_(std::move(b)) {}
  Status pre_tokenize(Pieces* pieces) const override {
    VLLM_RETURN_IF_ERROR(a_->pre_tokenize(pieces));
    return b_->pre_tokenize(pieces);
  }

 private:
  std::unique_ptr<PreTokenizer> a_, b_;
};

}  // namespace

Expected<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const nlohmann::json& j,
                                                           std::string_view where) {
  if (!j.is_object()) return wrong_type(where, "an object", j);
  VLLM_ASSIGN_OR_RETURN(std::string type, read_required_string(j, "type", where));
  if (type == "Split") {
    VLLM_ASSIGN_OR_RETURN(Pattern p, Pattern::from_field(j, "pattern", where));
    VLLM_ASSIGN_OR_RETURN(SplitBehavior behavior,
                          parse_split_behavior(j, where, SplitBehavior::kIsolated));
    VLLM_ASSIGN_OR_RETURN(bool invert, read_bool(j, "invert", where, false));
    return std::unique_ptr<PreTokenizer>(new Split(std::move(p), behavior, invert));
  }
  if (type == "ByteLevel") {
    VLLM_ASSIGN_OR_RETURN(bool prefix, read_bool(j, "add_prefix_space", where, true));
    VLLM_ASSIGN_OR_RETURN(bool use_regex, read_bool(j, "use_regex", where, true));
    return std::unique_ptr<PreTokenizer>(new ByteLevel(prefix, use_regex));
  }
  if (type == "Digits") {
    VLLM_ASSIGN_OR_RETURN(bool individual, read_bool(j, "individual_digits", where, false));
    return char_split([](char32_t c) { return is_numeric(c); },
                      individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
  }
  if (type == "Metaspace") {
    VLLM_ASSIGN_OR_RETURN(char32_t rep, read_char(j, "replacement", where, U'\u2581'));
    VLLM_ASSIGN_OR_RETURN(std::optional<std::string> scheme_name,
                          read_optional_string(j, "prepend_scheme", where));
    Metaspace::Prepend scheme = Metaspace::Prepend::kAlways;
    if (scheme_name) {
      if (*scheme_name == "first") {
        scheme = Metaspace::Prepend::kFirst;
      } else if (*scheme_name == "never") {
        scheme = Metaspace::Prepend::kNever;
      } else if (*scheme_name != "always") {
        return make_error(ErrorCode::kInvalidFormat, "{}: unknown prepend_scheme '{}'",
                          join_path(where, "prepend_scheme"), *scheme_name);
      }
    }
    const json* add_prefix = json_find(j, "add_prefix_space");
    if (add_prefix != nullptr && add_prefix->is_boolean() && !add_prefix->get<bool>()) {
      if (scheme_name && scheme != Metaspace::Prepend::kNever) {
        return make_error(ErrorCode::kInvalidFormat,
                          "{}: add_prefix_space does not match declared prepend_scheme", where);
      }
      scheme = Metaspace::Prepend::kNever;
    }
    VLLM_ASSIGN_OR_RETURN(bool split, read_bool(j, "split", where, true));
    return std::unique_ptr<PreTokenizer>(new Metaspace(rep, scheme, split));
  }
  if (type == "Whitespace") return std::unique_ptr<PreTokenizer>(new Whitespace());
  if (type == "WhitespaceSplit") {
    return char_split([](char32_t c) { return is_whitespace(c); }, SplitBehavior::kRemoved);
  }
  if (type == "Punctuation") {
    VLLM_ASSIGN_OR_RETURN(SplitBehavior behavior,
                          parse_split_behavior(j, where, SplitBehavior::kIsolated));
    return char_split([](char32_t c) { return is_punctuation(c); }, behavior);
  }
  if (type == "BertPreTokenizer") {
    return std::unique_ptr<PreTokenizer>(new Chain(
        char_split([](char32_t c) { return is_whitespace(c); }, SplitBehavior::kRemoved),
        char_split([](char32_t c) { return is_punctuation(c); }, SplitBehavior::kIsolated)));
  }
  if (type == "CharDelimiterSplit") {
    VLLM_ASSIGN_OR_RETURN(char32_t delimiter, read_char(j, "delimiter", where, U' '));
    return char_split([delimiter](char32_t c) { return c == delimiter; }, SplitBehavior::kRemoved);
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    VLLM_RETURN_IF_ERROR(for_each_element(j, "pretokenizers", where, [&](const json& e, std::string w) {
      VLLM_ASSIGN_OR_RETURN(auto part, make_pre_tokenizer(e, w));
      parts.push_back(std::move(part));
      return Status::ok();
    }));
    return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(parts)));
  }
  return make_error(ErrorCode::kUnsupported, "{}: pre-tokenizer type '{}' is not supported", where,
                    type);
}

}  // namespace vllm::tok
