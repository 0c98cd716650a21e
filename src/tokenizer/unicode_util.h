// UTF-8 and Unicode helpers with the exact semantics the `tokenizers` library (Rust) has:
// validation, Rust's String::from_utf8_lossy replacement rule, char::is_whitespace /
// is_numeric / to_lowercase, the regex crate's \w, and NFC/NFD/NFKC/NFKD (through ICU).
// Everything takes and returns UTF-8; code points are char32_t.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace vllm::tok {

inline constexpr char32_t kReplacementChar = 0xFFFD;
inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

// Byte offset of the first invalid UTF-8 sequence, or npos when `text` is valid.
size_t find_invalid_utf8(std::string_view text);

// Length of the UTF-8 sequence starting with `lead` (valid input assumed): 1..4.
inline size_t utf8_len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// Decodes the code point at text[*pos] (valid UTF-8 assumed) and advances *pos.
char32_t next_code_point(std::string_view text, size_t* pos);
void append_utf8(std::string* out, char32_t cp);

// Appends `bytes` to `out` as Rust's String::from_utf8_lossy does: every maximal invalid
// subsequence becomes one U+FFFD.
void append_utf8_lossy(std::string* out, std::string_view bytes);

// Length in bytes of an incomplete (but so far valid) UTF-8 sequence at the end of `bytes`:
// the bytes more input could still complete. 0 when `bytes` ends on a boundary.
size_t incomplete_utf8_tail(std::string_view bytes);

bool is_whitespace(char32_t cp);      // Rust char::is_whitespace (White_Space)
bool is_numeric(char32_t cp);         // Rust char::is_numeric (Nd, Nl, No)
bool is_word_char(char32_t cp);       // regex crate \w (Alphabetic, M, Nd, Pc, Join_Control)
bool is_punctuation(char32_t cp);     // ASCII punctuation or a P* category
bool is_combining_mark(char32_t cp);  // M* categories

// Rust str::to_lowercase applied char by char (no final-sigma context), as the Lowercase
// normalizer does.
void append_lowercase(std::string* out, std::string_view text);

enum class NormalizationForm { kNFC, kNFD, kNFKC, kNFKD };
// Appends the normalized form of valid UTF-8 `text`. Returns false if ICU failed.
bool append_normalized(std::string* out, std::string_view text, NormalizationForm form);

// The GPT-2 byte <-> char mapping used by the ByteLevel pre-tokenizer and decoder.
struct ByteLevelTable {
  char32_t byte_to_char[256];
  char utf8[256][3];  // UTF-8 of byte_to_char (1 or 2 bytes)
  uint8_t utf8_len[256];
  // Code point (< 324) -> byte, or -1.
  int16_t char_to_byte[324];
};
const ByteLevelTable& byte_level_table();

}  // namespace vllm::tok
