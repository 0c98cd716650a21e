// Small text helpers shared by the grammar front ends (EBNF, regex, JSON Schema).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace vllm::structured {

// Decodes the UTF-8 code point at *pos and advances past it; nullopt (pos unchanged) for
// an invalid, overlong or truncated sequence or a surrogate.
inline std::optional<uint32_t> decode_utf8(std::string_view text, size_t* pos) {
  const size_t i = *pos;
  if (i >= text.size()) return std::nullopt;
  const auto b0 = static_cast<unsigned char>(text[i]);
  if (b0 < 0x80) {
    *pos = i + 1;
    return b0;
  }
  size_t n = 0;
  uint32_t cp = 0, min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    n = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return std::nullopt;
  }
  if (i + n > text.size()) return std::nullopt;
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(text[i + k]);
    if ((b & 0xC0) != 0x80) return std::nullopt;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return std::nullopt;
  *pos = i + n;
  return cp;
}

inline int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace vllm::structured
