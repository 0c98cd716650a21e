// Normalizers of tokenizer.json: NFC / NFD / NFKC / NFKD, Lowercase, Replace, Prepend, Strip,
// StripAccents, Nmt, ByteLevel and Sequence, with `tokenizers`' semantics. They run on each
// piece of text left between added tokens, never on the whole input at once.
#include "tokenizer/components.h"
#include "tokenizer/json_util.h"
#include "tokenizer/unicode_util.h"

namespace vllm::tok {
namespace {

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalizationForm form) : form_(form) {}
  Status normalize(std::string_view text, std::string* out) const override {
    bool ascii = true;
    for (char c : text) {
      if (static_cast<unsigned char>(c) >= 0x80) {
        ascii = false;
        break;
      }
    }
    if (ascii) {
      out->append(text);
      return Status::ok();
    }
    if (!append_normalized(out, text, form_)) {
      return make_error(ErrorCode::kInternal, "Unicode normalization failed (ICU data missing?)");
    }
    return Status::ok();
  }

 private:
  NormalizationForm form_;
};

class Lowercase final : public Normalizer {
 public:
  Status normalize(std::string_view text, std::string* out) const override {
    append_lowercase(out, text);
    return Status::ok();
  }
};

class Replace final : public Normalizer {
 public:
  Replace(Pattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  Status normalize(std::string_view text, std::string* out) const override {
    std::vector<Match> matches;
    VLLM_RETURN_IF_ERROR(pattern_.find_matches(text, &matches));
    size_t last = 0;
    for (const Match& m : matches) {
      out->append(text.substr(last, m.begin - last));
      out->append(content_);
      last = m.end;
    }
    out->append(text.substr(last));
    return Status::ok();
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  Status normalize(std::string_view text, std::string* out) const override {
    if (!text.empty()) out->append(prefix_);
    out->append(text);
    return Status::ok();
  }

 private:
  std::string prefix_;
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  Status normalize(std::string_view text, std::string* out) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        size_t pos = begin;
        if (!is_whitespace(next_code_point(text, &pos))) break;
        begin = pos;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        size_t pos = start;
        if (!is_whitespace(next_code_point(text, &pos))) break;
        end = start;
      }
    }
    out->append(text.substr(begin, end - begin));
    return Status::ok();
  }

 private:
  bool left_, right_;
};

class StripAccents final : public Normalizer {
 public:
  Status normalize(std::string_view text, std::string* out) const override {
    size_t pos = 0;
    while (pos < text.size()) {
      size_t start = pos;
      char32_t c = next_code_point(text, &pos);
      if (!is_combining_mark(c)) out->append(text.substr(start, pos - start));
    }
    return Status::ok();
  }
};

class Nmt final : public Normalizer {
 public:
  Status normalize(std::string_view text, std::string* out) const override {
    size_t pos = 0;
    while (pos < text.size()) {
      size_t start = pos;
      char32_t c = next_code_point(text, &pos);
      if ((c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F ||
          c == 0x8F || c == 0x9F) {
        continue;
      }
      if (c == 0x09 || c == 0x0A || c == 0x0C || c == 0x0D || c == 0x1680 ||
          (c >= 0x200B && c <= 0x200F) || c == 0x2028 || c == 0x2029 || c == 0x2581 ||
          c == 0xFEFF || c == 0xFFFD) {
        out->push_back(' ');
      } else {
        out->append(text.substr(start, pos - start));
      }
    }
    return Status::ok();
  }
};

class ByteLevelNormalizer final : public Normalizer {
 public:
  Status normalize(std::string_view text, std::string* out) const override {
    const ByteLevelTable& t = byte_level_table();
    for (char c : text) {
      auto b = static_cast<unsigned char>(c);
      out->append(t.utf8[b], t.utf8_len[b]);
    }
    return Status::ok();
  }
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  Status normalize(std::string_view text, std::string* out) const override {
    if (parts_.empty()) {
      out->append(text);
      return Status::ok();
    }
    std::string a(text), b;
    for (const auto& part : parts_) {
      b.clear();
      VLLM_RETURN_IF_ERROR(part->normalize(a, &b));
      a.swap(b);
    }
    out->append(a);
    return Status::ok();
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

Expected<std::unique_ptr<Normalizer>> make_normalizer(const nlohmann::json& j,
                                                      std::string_view where) {
  if (!j.is_object()) return wrong_type(where, "an object", j);
  VLLM_ASSIGN_OR_RETURN(std::string type, read_required_string(j, "type", where));
  if (type == "NFC")
    return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalizationForm::kNFC));
  if (type == "NFD")
    return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalizationForm::kNFD));
  if (type == "NFKC")
    return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalizationForm::kNFKC));
  if (type == "NFKD")
    return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalizationForm::kNFKD));
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new Lowercase());
  if (type == "StripAccents") return std::unique_ptr<Normalizer>(new StripAccents());
  if (type == "Nmt") return std::unique_ptr<Normalizer>(new Nmt());
  if (type == "ByteLevel") return std::unique_ptr<Normalizer>(new ByteLevelNormalizer());
  if (type == "Replace") {
    VLLM_ASSIGN_OR_RETURN(Pattern p, Pattern::from_field(j, "pattern", where));
    VLLM_ASSIGN_OR_RETURN(std::string content, read_required_string(j, "content", where));
    return std::unique_ptr<Normalizer>(new Replace(std::move(p), std::move(content)));
  }
  if (type == "Prepend") {
    VLLM_ASSIGN_OR_RETURN(std::string prefix, read_required_string(j, "prepend", where));
    return std::unique_ptr<Normalizer>(new Prepend(std::move(prefix)));
  }
  if (type == "Strip") {
    VLLM_ASSIGN_OR_RETURN(bool left, read_bool(j, "strip_left", where, true));
    VLLM_ASSIGN_OR_RETURN(bool right, read_bool(j, "strip_right", where, true));
    return std::unique_ptr<Normalizer>(new Strip(left, right));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> parts;
    VLLM_RETURN_IF_ERROR(for_each_element(j, "normalizers", where, [&](const json& e, std::string w) {
      VLLM_ASSIGN_OR_RETURN(auto part, make_normalizer(e, w));
      parts.push_back(std::move(part));
      return Status::ok();
    }));
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(parts)));
  }
  return make_error(ErrorCode::kUnsupported, "{}: normalizer type '{}' is not supported", where,
                    type);
}

}  // namespace vllm::tok
