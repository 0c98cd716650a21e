// UTF-8 / Unicode helpers (see unicode_util.h). Character properties and normalization come
// from ICU, whose Unicode version (15 in ICU 72) is close to what Rust's std and the
// `tokenizers` crates were built with.
#include "tokenizer/unicode_util.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#include <unicode/uchar.h>

namespace vllm::tok {
namespace {

// Length of the valid UTF-8 prefix of the sequence at bytes[i] (how many bytes belong to a
// well-formed start), and whether it is a complete character. Follows the Unicode
// "maximal subpart" rule that Rust's from_utf8_lossy implements.
struct SeqCheck {
  size_t len;      // bytes consumed (>= 1)
  bool valid;      // a complete, well-formed character
  bool truncated;  // valid so far but cut off by the end of input
};

SeqCheck check_sequence(const unsigned char* p, size_t n) {
  unsigned char b = p[0];
  if (b < 0x80) return {1, true, false};
  size_t width;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b >= 0xC2 && b <= 0xDF) {
    width = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    width = 3;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    width = 4;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return {1, false, false};
  }
  if (n < 2) return {1, false, true};
  if (p[1] < lo || p[1] > hi) return {1, false, false};
  for (size_t k = 2; k < width; ++k) {
    if (n <= k) return {k, false, true};
    if (p[k] < 0x80 || p[k] > 0xBF) return {k, false, false};
  }
  return {width, true, false};
}

}  // namespace

size_t find_invalid_utf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    SeqCheck c = check_sequence(p + i, n - i);
    if (!c.valid) return i;
    i += c.len;
  }
  return std::string_view::npos;
}

char32_t next_code_point(std::string_view text, size_t* pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + *pos;
  unsigned char b = p[0];
  if (b < 0x80) {
    *pos += 1;
    return b;
  }
  if (b < 0xE0) {
    *pos += 2;
    return (char32_t(b & 0x1F) << 6) | (p[1] & 0x3F);
  }
  if (b < 0xF0) {
    *pos += 3;
    return (char32_t(b & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  }
  *pos += 4;
  return (char32_t(b & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) | (char32_t(p[2] & 0x3F) << 6) |
         (p[3] & 0x3F);
}

void append_utf8(std::string* out, char32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

void append_utf8_lossy(std::string* out, std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size();
  size_t i = 0;
  size_t run_start = 0;  // start of the pending run of valid bytes
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    SeqCheck c = check_sequence(p + i, n - i);
    if (c.valid) {
      i += c.len;
      continue;
    }
    out->append(bytes.data() + run_start, i - run_start);
    out->append(kReplacementUtf8);
    i += c.len;
    run_start = i;
  }
  out->append(bytes.data() + run_start, n - run_start);
}

size_t incomplete_utf8_tail(std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t n = bytes.size();
  // An incomplete sequence is at most 3 bytes long: look back for its lead byte.
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    unsigned char b = p[n - back];
    if ((b & 0xC0) != 0x80) {  // a lead byte or ASCII
      SeqCheck c = check_sequence(p + n - back, back);
      return c.truncated && c.len == back ? back : 0;
    }
  }
  return 0;
}

bool is_whitespace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return u_isUWhiteSpace(static_cast<UChar32>(cp));
}

bool is_numeric(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  int8_t t = u_charType(static_cast<UChar32>(cp));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

bool is_word_char(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') ||
           cp == '_';
  }
  auto c = static_cast<UChar32>(cp);
  if (u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL)) {
    return true;
  }
  int8_t t = u_charType(c);
  return t == U_NON_SPACING_MARK || t == U_COMBINING_SPACING_MARK || t == U_ENCLOSING_MARK ||
         t == U_DECIMAL_DIGIT_NUMBER || t == U_CONNECTOR_PUNCTUATION;
}

bool is_punctuation(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
           (cp >= 0x7B && cp <= 0x7E);
  }
  int8_t t = u_charType(static_cast<UChar32>(cp));
  return t == U_CONNECTOR_PUNCTUATION || t == U_DASH_PUNCTUATION || t == U_START_PUNCTUATION ||
         t == U_END_PUNCTUATION || t == U_INITIAL_PUNCTUATION || t == U_FINAL_PUNCTUATION ||
         t == U_OTHER_PUNCTUATION;
}

bool is_combining_mark(char32_t cp) {
  int8_t t = u_charType(static_cast<UChar32>(cp));
  return t == U_NON_SPACING_MARK || t == U_COMBINING_SPACING_MARK || t == U_ENCLOSING_MARK;
}

void append_lowercase(std::string* out, std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    char32_t cp = next_code_point(text, &pos);
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
    } else if (cp == 0x130) {  // the one unconditional multi-char lowercase mapping
      out->append("i\xCC\x87");
    } else {
      append_utf8(out, static_cast<char32_t>(u_tolower(static_cast<UChar32>(cp))));
    }
  }
}

bool append_normalized(std::string* out, std::string_view text, NormalizationForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case NormalizationForm::kNFC:
      n = icu::Normalizer2::getNFCInstance(status);
      break;
    case NormalizationForm::kNFD:
      n = icu::Normalizer2::getNFDInstance(status);
      break;
    case NormalizationForm::kNFKC:
      n = icu::Normalizer2::getNFKCInstance(status);
      break;
    case NormalizationForm::kNFKD:
      n = icu::Normalizer2::getNFKDInstance(status);
      break;
  }
  if (U_FAILURE(status) || n == nullptr) return false;
  icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  if (n->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) {
    out->append(text);
    return true;
  }
  status = U_ZERO_ERROR;
  icu::StringByteSink<std::string> sink(out);
  n->normalizeUTF8(0, piece, sink, nullptr, status);
  return U_SUCCESS(status);
}

const ByteLevelTable& byte_level_table() {
  static const ByteLevelTable table = [] {
    ByteLevelTable t{};
    for (auto& v : t.char_to_byte) v = -1;
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      char32_t c = printable(b) ? char32_t(b) : char32_t(256 + n++);
      t.byte_to_char[b] = c;
      t.char_to_byte[c] = static_cast<int16_t>(b);
      std::string s;
      append_utf8(&s, c);
      t.utf8_len[b] = static_cast<uint8_t>(s.size());
      for (size_t k = 0; k < s.size(); ++k) t.utf8[b][k] = s[k];
    }
    return t;
  }();
  return table;
}

}  // namespace vllm::tok
