// Decoders of tokenizer.json: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace and
// Sequence, each a step on the list of token strings as `tokenizers`' decode_chain.
//
// DecodeState lets a streaming window decode exactly like the middle of a full decode:
// steps that treat the first string specially (Metaspace dropping the leading
// replacement, Strip after Fuse cutting the start of the text) only do so at_start.
#include "tokenizer/components.h"
#include "tokenizer/json_util.h"
#include "tokenizer/unicode_util.h"

namespace vllm::tok {
namespace {

class ByteLevelDecoder final : public Decoder {
 public:
  Status decode_chain(std::vector<std::string>* tokens, DecodeState* state) const override {
    const ByteLevelTable& t = byte_level_table();
    std::string bytes;
    for (const std::string& token : *tokens) {
      size_t mark = bytes.size();
      size_t pos = 0;
      bool mapped = true;
      while (pos < token.size()) {
        char32_t c = next_code_point(token, &pos);
        if (c >= 324 || t.char_to_byte[c] < 0) {
          mapped = false;
          break;
        }
        bytes.push_back(static_cast<char>(t.char_to_byte[c]));
      }
      if (!mapped) {  // a token outside the byte alphabet decodes to its own UTF-8
        bytes.resize(mark);
        bytes += token;
      }
    }
    std::string text;
    if (state->raw_bytes) {
      text = std::move(bytes);
    } else {
      append_utf8_lossy(&text, bytes);
    }
    tokens->assign(1, std::move(text));
    state->fused = true;
    return Status::ok();
  }
  // Token by token it appends (an incomplete character shows as U+FFFD at the end, which a
  // stream holds back). On one joined string, a later character outside the byte alphabet
  // switches the whole string to its own UTF-8.
  bool appends_only(bool* fused) const override {
    const bool before = *fused;
    *fused = true;
    return !before;
  }
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, bool prepend)
      : replacement_(replacement), prepend_(prepend) {}
  Status decode_chain(std::vector<std::string>* tokens, DecodeState* state) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& token = (*tokens)[i];
      if (state->raw_bytes && find_invalid_utf8(token) != std::string_view::npos) continue;
      bool drop = i == 0 && prepend_ && state->at_start;
      std::string out;
      size_t pos = 0;
      while (pos < token.size()) {
        size_t start = pos;
        char32_t c = next_code_point(token, &pos);
        if (c == replacement_) {
          if (!drop) out.push_back(' ');
        } else {
          out.append(token, start, pos - start);
        }
      }
      token.swap(out);
    }
    return Status::ok();
  }
  // One character at a time; the leading space it drops is only ever the text's first.
  bool appends_only(bool*) const override { return true; }

 private:
  char32_t replacement_;
  bool prepend_;
};

class ByteFallbackDecoder final : public Decoder {
 public:
  // "<0xNN>" -> NN, as `tokenizers` parses it (u8::from_str_radix on the two characters).
  static bool parse_byte(const std::string& token, unsigned char* out) {
    if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return false;
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    if (token[3] == '+') {  // from_str_radix accepts a leading '+'
      int lo = hex(token[4]);
      if (lo < 0) return false;
      *out = static_cast<unsigned char>(lo);
      return true;
    }
    int hi = hex(token[3]), lo = hex(token[4]);
    if (hi < 0 || lo < 0) return false;
    *out = static_cast<unsigned char>(hi * 16 + lo);
    return true;
  }

  Status decode_chain(std::vector<std::string>* tokens, DecodeState* state) const override {
    std::vector<std::string> out;
    out.reserve(tokens->size());
    std::string bytes;
    auto flush = [&] {
      if (bytes.empty()) return;
      if (state->raw_bytes || find_invalid_utf8(bytes) == std::string_view::npos) {
        out.push_back(bytes);
      } else {
        for (size_t k = 0; k < bytes.size(); ++k) out.emplace_back(kReplacementUtf8);
      }
      bytes.clear();
    };
    for (std::string& token : *tokens) {
      unsigned char b = 0;
      if (parse_byte(token, &b)) {
        bytes.push_back(static_cast<char>(b));
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    tokens->swap(out);
    return Status::ok();
  }
  bool has_byte_fallback() const override { return true; }
  // Byte runs are held back by the stream until they end; on one joined string, its end
  // could still complete a "<0xNN>".
  bool appends_only(bool* fused) const override { return !*fused; }
};

class FuseDecoder final : public Decoder {
 public:
  Status decode_chain(std::vector<std::string>* tokens, DecodeState* state) const override {
    std::string all;
    for (const std::string& t : *tokens) all += t;
    tokens->assign(1, std::move(all));
    state->fused = true;
    return Status::ok();
  }
  bool appends_only(bool* fused) const override {
    *fused = true;
    return true;
  }
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  Status decode_chain(std::vector<std::string>* tokens, DecodeState* state) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& token = (*tokens)[i];
      if (state->raw_bytes && find_invalid_utf8(token) != std::string_view::npos) continue;
      std::vector<size_t> offsets;  // byte offset of each character, plus the end
      std::vector<char32_t> chars;
      size_t pos = 0;
      while (pos < token.size()) {
        offsets.push_back(pos);
        chars.push_back(next_code_point(token, &pos));
      }
      offsets.push_back(token.size());
      // After Fuse the one string spans the window: its start is the text's start only
      // at_start.
      bool cut_start = !(state->fused && !state->at_start && i == 0);
      size_t start_cut = 0;
      if (cut_start) {
        for (size_t k = 0; k < start_ && k < chars.size() && chars[k] == content_; ++k) {
          start_cut = k + 1;
        }
      }
      size_t stop_cut = chars.size();
      for (size_t k = 0; k < stop_ && k < chars.size(); ++k) {
        size_t index = chars.size() - k - 1;
        if (chars[index] != content_) break;
        stop_cut = index;
      }
      if (stop_cut < start_cut) stop_cut = start_cut;
      token = token.substr(offsets[start_cut], offsets[stop_cut] - offsets[start_cut]);
    }
    return Status::ok();
  }
  // Per token it appends; on joined text, the start is cut only at the text's start, but a
  // cut at the end would take back characters when more follow.
  bool appends_only(bool* fused) const override { return !*fused || stop_ == 0; }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  Status decode_chain(std::vector<std::string>* tokens, DecodeState* state) const override {
    std::vector<Match> matches;
    for (std::string& token : *tokens) {
      if (state->raw_bytes && find_invalid_utf8(token) != std::string_view::npos) continue;
      matches.clear();
      VLLM_RETURN_IF_ERROR(pattern_.find_matches(token, &matches));
      if (matches.empty()) continue;
      std::string out;
      size_t last = 0;
      for (const Match& m : matches) {
        out.append(token, last, m.begin - last);
        out += content_;
        last = m.end;
      }
      out.append(token, last, std::string::npos);
      token.swap(out);
    }
    return Status::ok();
  }
  // Per token it appends; on joined text only a one-character literal cannot match across
  // the point where a later token's text begins.
  bool appends_only(bool* fused) const override {
    if (!*fused) return true;
    if (!pattern_.is_literal()) return false;
    const std::string& s = pattern_.text();
    size_t pos = 0;
    if (s.empty()) return false;
    (void)next_code_point(s, &pos);
    return pos == s.size();
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts)
      : parts_(std::move(parts)) {}
  Status decode_chain(std::vector<std::string>* tokens, DecodeState* state) const override {
    for (const auto& part : parts_) VLLM_RETURN_IF_ERROR(part->decode_chain(tokens, state));
    return Status::ok();
  }
  bool has_byte_fallback() const override {
    for (const auto& part : parts_) {
      if (part->has_byte_fallback()) return true;
    }
    return false;
  }
  bool appends_only(bool* fused) const override {
    bool all = true;
    for (const auto& part : parts_) all = part->appends_only(fused) && all;
    return all;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

Expected<std::unique_ptr<Decoder>> make_decoder(const nlohmann::json& j, std::string_view where) {
  if (!j.is_object()) return wrong_type(where, "an object", j);
  VLLM_ASSIGN_OR_RETURN(std::string type, read_required_string(j, "type", where));
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDecoder());
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder());
  if (type == "Metaspace") {
    VLLM_ASSIGN_OR_RETURN(char32_t rep, read_char(j, "replacement", where, U'\u2581'));
    VLLM_ASSIGN_OR_RETURN(std::optional<std::string> scheme,
                          read_optional_string(j, "prepend_scheme", where));
    bool prepend = !scheme || *scheme != "never";
    const json* add_prefix = json_find(j, "add_prefix_space");
    if (add_prefix != nullptr && add_prefix->is_boolean() && !add_prefix->get<bool>()) {
      prepend = false;
    }
    return std::unique_ptr<Decoder>(new MetaspaceDecoder(rep, prepend));
  }
  if (type == "Strip") {
    VLLM_ASSIGN_OR_RETURN(char32_t content, read_char(j, "content", where, U' '));
    VLLM_ASSIGN_OR_RETURN(int64_t start, read_int(j, "start", where, 0));
    VLLM_ASSIGN_OR_RETURN(int64_t stop, read_int(j, "stop", where, 0));
    if (start < 0 || stop < 0) {
      return make_error(ErrorCode::kInvalidFormat, "{}: start and stop must be >= 0", where);
    }
    return std::unique_ptr<Decoder>(
        new StripDecoder(content, static_cast<size_t>(start), static_cast<size_t>(stop)));
  }
  if (type == "Replace") {
    VLLM_ASSIGN_OR_RETURN(Pattern p, Pattern::from_field(j, "pattern", where));
    VLLM_ASSIGN_OR_RETURN(std::string content, read_required_string(j, "content", where));
    return std::unique_ptr<Decoder>(new ReplaceDecoder(std::move(p), std::move(content)));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> parts;
    VLLM_RETURN_IF_ERROR(for_each_element(j, "decoders", where, [&](const json& e, std::string w) {
      VLLM_ASSIGN_OR_RETURN(auto part, make_decoder(e, w));
      parts.push_back(std::move(part));
      return Status::ok();
    }));
    return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(parts)));
  }
  return make_error(ErrorCode::kUnsupported, "{}: decoder type '{}' is not supported", where, type);
}

}  // namespace vllm::tok
