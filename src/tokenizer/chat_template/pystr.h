// Python str semantics over UTF-8 bytes: Python strings are sequences of code points, so
// len(), indexing, slicing and iteration count code points, and strip()/split() use Python's
// notion of whitespace (which includes U+3000, U+00A0, ...). Templates call these through
// filters (trim, upper, ...) and methods (split, lstrip, startswith, ...).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vllm::jinja {

// Python's str.isspace() for one code point.
bool is_py_space(char32_t c);

// Decodes the code point at `pos`; returns its length in bytes (an invalid byte counts as
// a one-byte code point of its own value, so text never changes through these helpers).
size_t utf8_next(std::string_view s, size_t pos, char32_t* cp);
void append_utf8(char32_t cp, std::string* out);
bool is_ascii(std::string_view s);

// Byte offsets of each code point, plus s.size() at the end.
std::vector<size_t> code_point_offsets(std::string_view s);
size_t code_point_count(std::string_view s);

// str.strip / lstrip / rstrip; `chars` empty optional = whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right);
// str.split / rsplit; no separator = runs of whitespace. maxsplit < 0 = no limit.
// An empty separator is an error (returns false).
bool py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit,
              bool from_right, std::vector<std::string>* out);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
// str.replace (count < 0 = all); an empty `old` inserts between code points as Python does.
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       int64_t count);

std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);
std::string py_title(std::string_view s);  // str.title()
std::string py_swapcase(std::string_view s);
bool py_islower(std::string_view s);
bool py_isupper(std::string_view s);
char32_t py_to_upper(char32_t c);
char32_t py_to_lower(char32_t c);
bool py_is_cased_letter(char32_t c);

}  // namespace vllm::jinja
