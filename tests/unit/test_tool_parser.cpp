// Tool call parsers (hermes, qwen3_coder) and the qwen3 reasoning parser: whole outputs as
// vLLM parses them, and streamed outputs cut at every byte boundary giving the same result.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/reasoning_parser.h"
#include "server/tool_parser.h"

namespace vllm::server {
namespace test_tool_parser {
namespace {

using nlohmann::ordered_json;

struct Streamed {
  std::string content;
  std::vector<ToolCall> calls;
};

// Feeds `output` in two pieces cut at `cut`, then finishes.
Streamed stream_tools(ToolParser& parser, const std::string& output, size_t cut) {
  Streamed s;
  parser.feed(output.substr(0, cut), &s.content, &s.calls);
  parser.feed(output.substr(cut), &s.content, &s.calls);
  parser.finish(&s.content, &s.calls);
  return s;
}

Streamed stream_tools_bytewise(ToolParser& parser, const std::string& output) {
  Streamed s;
  for (char c : output) parser.feed(std::string(1, c), &s.content, &s.calls);
  parser.finish(&s.content, &s.calls);
  return s;
}

TEST(HermesToolParser, ParsesCallsAndContent) {
  const std::string output =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\", \"days\": 3, \"units\": [\"c\", \"é\"]}}\n</tool_call>\n<tool_call>\n{\"name\": "
      "\"get_time\", \"arguments\": {}}\n</tool_call>";
  ToolParseResult r = make_hermes_tool_parser()->parse(output);
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  // json.dumps(..., ensure_ascii=False): spaces after separators, key order kept.
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"city": "Paris", "days": 3, "units": ["c", "é"]})");
  EXPECT_EQ(r.tool_calls[1].name, "get_time");
  EXPECT_EQ(r.tool_calls[1].arguments, "{}");
  EXPECT_EQ(r.tool_calls[0].id.rfind("chatcmpl-tool-", 0), 0u);
  EXPECT_EQ(r.tool_calls[0].id.size(), 14u + 32u);
  EXPECT_NE(r.tool_calls[0].id, r.tool_calls[1].id);
  ASSERT_TRUE(r.content.has_value());
  EXPECT_EQ(*r.content, "Let me check.\n");
}

TEST(HermesToolParser, NoCallsOrBadJsonIsPlainContent) {
  ToolParseResult plain = make_hermes_tool_parser()->parse("just text");
  EXPECT_TRUE(plain.tool_calls.empty());
  EXPECT_EQ(plain.content.value_or(""), "just text");
  const std::string bad = "x<tool_call>{\"name\": \"f\", \"arguments\": {</tool_call>";
  ToolParseResult r = make_hermes_tool_parser()->parse(bad);
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(r.content.value_or(""), bad);
  // No "arguments": vLLM refuses the call.
  EXPECT_TRUE(make_hermes_tool_parser()
                  ->parse("<tool_call>{\"name\": \"f\"}</tool_call>")
                  .tool_calls.empty());
  // Only a call: no content at all.
  ToolParseResult only = make_hermes_tool_parser()->parse(
      "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>");
  ASSERT_EQ(only.tool_calls.size(), 1u);
  EXPECT_FALSE(only.content.has_value());
}

TEST(HermesToolParser, UnterminatedLastCallStillParses) {
  ToolParseResult r = make_hermes_tool_parser()->parse(
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"a": 1})");
}

TEST(HermesToolParser, StreamingAtEveryCutEqualsWhole) {
  const std::string output =
      "Sure <tool_ thing> here.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": "
      "\"<tool_call>\"}}"
      "\n</tool_call>\n<tool_call>{\"name\": \"b\", \"arguments\": {\"y\": [1, 2.5, "
      "null]}}</tool_call>";
  ToolParseResult whole = make_hermes_tool_parser()->parse(output);
  ASSERT_EQ(whole.tool_calls.size(), 2u);
  for (size_t cut = 0; cut <= output.size(); ++cut) {
    auto parser = make_hermes_tool_parser();
    Streamed s = stream_tools(*parser, output, cut);
    ASSERT_EQ(s.content, whole.content.value_or("")) << "cut " << cut;
    ASSERT_EQ(s.calls.size(), 2u) << "cut " << cut;
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(s.calls[i].name, whole.tool_calls[i].name);
      EXPECT_EQ(s.calls[i].arguments, whole.tool_calls[i].arguments);
    }
  }
  auto parser = make_hermes_tool_parser();
  Streamed bytes = stream_tools_bytewise(*parser, output);
  EXPECT_EQ(bytes.content, whole.content.value_or(""));
  EXPECT_EQ(bytes.calls.size(), 2u);
}

TEST(HermesToolParser, StreamingReleasesContentEarly) {
  auto parser = make_hermes_tool_parser();
  std::string content;
  std::vector<ToolCall> calls;
  parser->feed("Hello <to", &content, &calls);
  EXPECT_EQ(content, "Hello ");  // "<to" could start <tool_call>: held back
  parser->feed("day>", &content, &calls);
  EXPECT_EQ(content, "Hello <today>");
  parser->feed("<tool_call>{\"name\": \"f\", \"arguments\": {}}", &content, &calls);
  EXPECT_TRUE(calls.empty());  // not closed yet
  parser->feed("</tool_call>", &content, &calls);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "f");
}

const ordered_json kCoderTools = ordered_json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                   "temp": {"type": "number"}, "metric": {"type": "boolean"},
                   "tags": {"type": "array"}, "opts": {"type": "object"}}}}}])");

TEST(Qwen3CoderToolParser, ParsesTypedParameters) {
  const std::string output =
      "I'll look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n"
      "</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=temp>\n21.5\n</parameter>\n"
      "<parameter=metric>\nTrue\n</parameter>\n<parameter=tags>\n[\"a\", 1]\n</parameter>\n"
      "<parameter=opts>\n{\"k\": null}\n</parameter>\n<parameter=unknown>\n42\n</parameter>\n"
      "<parameter=none>\nnull\n</parameter>\n</function>\n</tool_call>";
  ToolParseResult r = make_qwen3_coder_tool_parser(kCoderTools)->parse(output);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(
      r.tool_calls[0].arguments,
      R"({"city": "San Francisco", "days": 3, "temp": 21.5, "metric": true, "tags": ["a", 1], )"
      R"("opts": {"k": null}, "unknown": "42", "none": null})");
  EXPECT_EQ(r.content.value_or(""), "I'll look.\n");
}

TEST(Qwen3CoderToolParser, MultilineValuesAndWholeNumbers) {
  const std::string output =
      "<tool_call>\n<function=write>\n<parameter=text>\nline 1\n\nline 3\n</parameter>\n"
      "<parameter=n>\n7.0\n</parameter>\n</function>\n</tool_call>";
  const ordered_json tools = ordered_json::parse(
      R"([{"type":"function","function":{"name":"write","parameters":{"properties":{"n":{"type":"number"}}}}}])");
  ToolParseResult r = make_qwen3_coder_tool_parser(tools)->parse(output);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"text": "line 1\n\nline 3", "n": 7})");
  EXPECT_FALSE(r.content.has_value());
}

TEST(Qwen3CoderToolParser, StreamingAtEveryCutEqualsWhole) {
  const std::string output =
      "Checking <b>.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
      "<parameter=days>\n2\n</parameter>\n</function>\n</"
      "tool_call>\n<tool_call>\n<function=get_weather>\n"
      "<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>";
  ToolParseResult whole = make_qwen3_coder_tool_parser(kCoderTools)->parse(output);
  ASSERT_EQ(whole.tool_calls.size(), 2u);
  EXPECT_EQ(whole.tool_calls[1].arguments, R"({"city": "Rome"})");
  for (size_t cut = 0; cut <= output.size(); ++cut) {
    auto parser = make_qwen3_coder_tool_parser(kCoderTools);
    Streamed s = stream_tools(*parser, output, cut);
    ASSERT_EQ(s.content, whole.content.value_or("")) << "cut " << cut;
    ASSERT_EQ(s.calls.size(), 2u) << "cut " << cut;
    EXPECT_EQ(s.calls[0].arguments, whole.tool_calls[0].arguments);
    EXPECT_EQ(s.calls[1].arguments, whole.tool_calls[1].arguments);
  }
}

TEST(ToolParser, Factory) {
  EXPECT_TRUE(make_tool_parser("hermes", nullptr).has_value());
  EXPECT_TRUE(make_tool_parser("qwen3_coder", nullptr).has_value());
  EXPECT_FALSE(make_tool_parser("mistral", nullptr).has_value());
  EXPECT_TRUE(is_known_tool_parser("hermes"));
  EXPECT_FALSE(is_known_tool_parser("llama3_json"));
}

TEST(ReasoningParser, WholeOutputs) {
  ReasoningSplit a = split_reasoning("<think>\nLet me think.\n</think>\n\nThe answer is 4.");
  EXPECT_EQ(a.reasoning.value_or("?"), "\nLet me think.\n");
  EXPECT_EQ(a.content.value_or("?"), "\n\nThe answer is 4.");
  ReasoningSplit b = split_reasoning("Thinking started in the prompt</think>Answer");
  EXPECT_EQ(b.reasoning.value_or("?"), "Thinking started in the prompt");
  EXPECT_EQ(b.content.value_or("?"), "Answer");
  ReasoningSplit c = split_reasoning("No thinking here.");
  EXPECT_FALSE(c.reasoning.has_value());
  EXPECT_EQ(c.content.value_or("?"), "No thinking here.");
  ReasoningSplit d = split_reasoning("<think>cut off while thinking");
  EXPECT_FALSE(d.reasoning.has_value());  // vLLM: no </think>, all content
  EXPECT_EQ(d.content.value_or("?"), "cut off while thinking");
  ReasoningSplit e = split_reasoning("<think>only thoughts</think>");
  EXPECT_EQ(e.reasoning.value_or("?"), "only thoughts");
  EXPECT_FALSE(e.content.has_value());
}

TEST(ReasoningParser, PromptOpensThinking) {
  EXPECT_TRUE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_thinking("<|im_start|>assistant\n"));
}

void stream_reasoning(const std::string& output, size_t cut, bool starts_in_reasoning,
                      std::string* reasoning, std::string* content) {
  ReasoningStreamParser parser(starts_in_reasoning);
  parser.feed(output.substr(0, cut), reasoning, content);
  parser.feed(output.substr(cut), reasoning, content);
  parser.finish(reasoning, content);
}

TEST(ReasoningParser, StreamingAtEveryCutEqualsWhole) {
  struct Case {
    std::string output;
    bool starts_in_reasoning;
  };
  const std::vector<Case> cases = {
      {"<think>\nHmm, </thin k> 2+2.\n</think>\n\nIt is 4.", false},
      {"Prompt opened it.</think>Then <think> this is content.", true},
      {"Plain answer, no tags </think at all.", false},
      {"<think>x</think>", false},
      {"<thin", false},
  };
  for (const Case& c : cases) {
    const ReasoningSplit whole = split_reasoning(c.output);
    for (size_t cut = 0; cut <= c.output.size(); ++cut) {
      std::string reasoning, content;
      stream_reasoning(c.output, cut, c.starts_in_reasoning, &reasoning, &content);
      EXPECT_EQ(reasoning, whole.reasoning.value_or("")) << c.output << " cut " << cut;
      EXPECT_EQ(content, whole.content.value_or("")) << c.output << " cut " << cut;
    }
  }
}

TEST(ReasoningParser, StreamingHoldsOnlyPossibleTags) {
  ReasoningStreamParser parser;
  std::string reasoning, content;
  parser.feed("<think>abc</th", &reasoning, &content);
  EXPECT_EQ(reasoning, "abc");
  parser.feed("ought", &reasoning, &content);
  EXPECT_EQ(reasoning, "abc</thought");
  parser.feed("</think>", &reasoning, &content);
  parser.feed("ok", &reasoning, &content);
  EXPECT_EQ(content, "ok");
  // Cut off while thinking: what streamed was reasoning.
  ReasoningStreamParser cut;
  std::string r2, c2;
  cut.feed("<think>unfinished", &r2, &c2);
  cut.finish(&r2, &c2);
  EXPECT_EQ(r2, "unfinished");
  EXPECT_EQ(c2, "");
}

}  // namespace
}  // namespace test_tool_parser
}  // namespace vllm::server
