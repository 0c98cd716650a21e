// The server's structured-output fields: response_format json_schema / json_object,
// structured_outputs and guided_* on both endpoints, and tool_choice "required" / named
// (their schemas, and turning the constrained output back into tool calls).
#include <gtest/gtest.h>

#include "server/forced_tool_calls.h"
#include "server/protocol.h"
#include "structured/json_schema.h"
#include "structured_test_util.h"

namespace vllm::server {
namespace test_structured_server {
namespace {

using nlohmann::ordered_json;

Expected<ChatRequest> chat(const std::string& body) {
  auto j = parse_ordered_json_object(body);
  if (!j) return j.status();
  return parse_chat_request(*j, SamplingParams());
}

Expected<CompletionRequest> completion(const std::string& body) {
  auto j = parse_ordered_json_object(body);
  if (!j) return j.status();
  return parse_completion_request(*j, SamplingParams());
}

TEST(StructuredServer, ResponseFormatJsonSchemaKeepsPropertyOrder) {
  auto r = chat(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {
      "type": "json_schema", "json_schema": {"name": "p", "strict": true,
      "schema": {"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}}}}}})");
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  ASSERT_TRUE(r->params.structured_outputs.has_value());
  EXPECT_EQ(
      *r->params.structured_outputs->json,
      R"({"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}}})");
  auto no_schema = chat(R"({"messages": [{"role": "user", "content": "x"}],
                            "response_format": {"type": "json_schema", "json_schema": {"name": "any"}}})");
  ASSERT_TRUE(no_schema.has_value());
  EXPECT_TRUE(no_schema->params.structured_outputs->json_object);
}

TEST(StructuredServer, StructuredOutputsOnBothEndpoints) {
  auto c = completion(
      R"({"prompt": "x", "structured_outputs": {"json": {"properties": {"b": {}, "a": {}}},
                          "disable_any_whitespace": true}})");
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(*c->params.structured_outputs->json, R"({"properties":{"b":{},"a":{}}})");
  EXPECT_TRUE(c->params.structured_outputs->disable_any_whitespace);
  auto g = chat(
      R"({"messages": [{"role": "user", "content": "x"}], "guided_grammar": "root ::= \"a\""})");
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(*g->params.structured_outputs->grammar, "root ::= \"a\"");
  auto both = chat(R"({"messages": [{"role": "user", "content": "x"}], "guided_regex": "a",
                       "response_format": {"type": "json_object"}})");
  ASSERT_FALSE(both.has_value());
  EXPECT_NE(both.status().message().find("only use one kind"), std::string::npos);
}

ordered_json weather_tools() {
  return ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}, "unit": {"$ref": "#/$defs/unit"}}, "required": ["city"],
      "$defs": {"unit": {"enum": ["C", "F"]}}}}},
    {"type": "function", "function": {"name": "get_time"}}])");
}

TEST(StructuredServer, NamedToolSchemaIsTheFunctionsParameters) {
  ToolChoice named{ToolChoice::Kind::kNamed, "get_time"};
  auto schema = forced_tool_schema(named, weather_tools());
  ASSERT_TRUE(schema.has_value());
  EXPECT_EQ(*schema, R"({"type":"object","properties":{}})");
  ToolChoice missing{ToolChoice::Kind::kNamed, "nope"};
  EXPECT_FALSE(forced_tool_schema(missing, weather_tools()).has_value());
}

TEST(StructuredServer, RequiredToolSchemaAcceptsCallArrays) {
  ToolChoice required{ToolChoice::Kind::kRequired, ""};
  auto schema = forced_tool_schema(required, weather_tools());
  ASSERT_TRUE(schema.has_value());
  auto grammar = structured::json_schema_to_grammar(ordered_json::parse(*schema));
  ASSERT_TRUE(grammar.has_value()) << grammar.status().to_string();
  auto g = structured::testing::compile(*grammar, structured::testing::byte_vocab());
  using structured::testing::matches;
  EXPECT_TRUE(
      matches(g, R"([{"name": "get_weather", "parameters": {"city": "Paris", "unit": "C"}}])"));
  EXPECT_TRUE(matches(
      g,
      R"([{"name": "get_time", "parameters": {}}, {"name": "get_weather", "parameters": {"city": "x"}}])"));
  EXPECT_FALSE(matches(g, "[]"));
  EXPECT_FALSE(matches(g, R"([{"name": "get_weather", "parameters": {"unit": "C"}}])"));
  EXPECT_FALSE(
      matches(g, R"([{"name": "get_weather", "parameters": {"city": "x", "unit": "K"}}])"));
  EXPECT_FALSE(matches(g, R"([{"name": "other", "parameters": {}}])"));
}

TEST(StructuredServer, RequiredOutputsBecomeCalls) {
  auto calls = parse_required_tool_calls(
      R"([{"name": "get_weather", "parameters": {"city": "Zürich"}}, {"name": "get_time", "parameters": {}}])");
  ASSERT_TRUE(calls.has_value());
  ASSERT_EQ(calls->size(), 2u);
  EXPECT_EQ((*calls)[0].name, "get_weather");
  EXPECT_EQ((*calls)[0].arguments, R"({"city": "Zürich"})");
  EXPECT_EQ((*calls)[1].arguments, "{}");
  EXPECT_FALSE(
      parse_required_tool_calls(R"([{"name": "get_weather", "parameters": {"ci)").has_value());

  // Streamed in arbitrary pieces: each call comes out whole when its element closes.
  const std::string text =
      R"([{"name": "a", "parameters": {"s": "}]\"{"}} , {"name": "b", "parameters": {"n": [1, {"x": 2}]}}])";
  for (size_t piece : {1u, 3u, 7u}) {
    RequiredToolCallStream stream;
    std::vector<ToolCall> got;
    for (size_t i = 0; i < text.size(); i += piece) {
      const size_t before = got.size();
      stream.feed(std::string_view(text).substr(i, piece), &got);
      if (got.size() > before && got.size() == 1) {
        EXPECT_LT(i, text.find("\"b\"")) << "the first call is emitted before the second starts";
      }
    }
    ASSERT_EQ(got.size(), 2u) << piece;
    EXPECT_EQ(got[0].name, "a");
    EXPECT_EQ(got[0].arguments, R"({"s": "}]\"{"})");
    EXPECT_EQ(got[1].arguments, R"({"n": [1, {"x": 2}]})");
  }
}

}  // namespace
}  // namespace test_structured_server
}  // namespace vllm::server
