// JSON Schema -> grammar: what each keyword accepts and refuses, errors naming keyword and
// path, and a property test: random schemas, random walks through their masks, and every
// completed output parsed and checked against its schema by a separate validator.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "structured/json_schema.h"
#include "structured/structured_outputs.h"
#include "structured_schema_gen.h"
#include "structured_test_util.h"

namespace vllm::structured {
namespace test_structured_json_schema {
namespace {

using J = nlohmann::ordered_json;
using testing::byte_vocab;
using testing::matches;
using testing::random_schema;
using testing::valid;

std::shared_ptr<const CompiledGrammar> schema_grammar(const std::string& schema,
                                                      JsonGrammarOptions options = {}) {
  auto g = json_schema_to_grammar(J::parse(schema), options);
  EXPECT_TRUE(g.has_value()) << g.status().to_string();
  if (!g) return nullptr;
  return testing::compile(*g, byte_vocab());
}

std::string schema_error(const std::string& schema) {
  auto g = json_schema_to_grammar(J::parse(schema));
  if (!g) return g.status().message();
  auto a = build_automaton(*g);
  return a ? "ok" : a.status().message();
}

TEST(StructuredJsonSchema, ObjectsKeepSchemaOrderAndRequiredness) {
  auto g = schema_grammar(R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
      "required": ["name", "tags"]})");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(matches(g, R"({"name": "Ann", "age": 30, "tags": []})"));
  EXPECT_TRUE(matches(g, R"({"name":"Ann","tags":["a","b"]})"));
  EXPECT_TRUE(matches(g, "{\n  \"name\" : \"x\",\n\t\"tags\": [ \"a\" ]\n}"));
  EXPECT_FALSE(matches(g, R"({"tags": [], "name": "Ann"})"));          // schema order
  EXPECT_FALSE(matches(g, R"({"name": "Ann"})"));                      // tags required
  EXPECT_FALSE(matches(g, R"({"name": "Ann", "tags": [], "x": 1})"));  // no extra properties
  EXPECT_FALSE(matches(g, R"({"name": "Ann", "age": 3.5, "tags": []})"));
}

TEST(StructuredJsonSchema, AllOptionalPropertiesAndCommas) {
  auto g = schema_grammar(R"({"properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                              "c": {"type": "integer"}}})");
  ASSERT_NE(g, nullptr);
  for (const char* ok : {"{}", R"({"a": 1})", R"({"b": 2})", R"({"c": 3})", R"({"a": 1, "c": 3})",
                         R"({"a": 1, "b": 2, "c": 3})", R"({"b": 2, "c": 3})"}) {
    EXPECT_TRUE(matches(g, ok)) << ok;
  }
  for (const char* bad :
       {R"({, "a": 1})", R"({"a": 1,})", R"({"a": 1 "b": 2})", R"({"c": 3, "a": 1})"}) {
    EXPECT_FALSE(matches(g, bad)) << bad;
  }
}

TEST(StructuredJsonSchema, CompactWhitespaceUsesPythonSeparators) {
  JsonGrammarOptions compact;
  compact.any_whitespace = false;
  auto g = schema_grammar(
      R"({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}},
                              "required": ["a"]})",
      compact);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(matches(g, R"({"a": [1, 2, 3]})"));
  EXPECT_FALSE(matches(g, R"({"a":[1,2,3]})"));
  EXPECT_FALSE(matches(g, R"({ "a": [1, 2, 3]})"));
}

TEST(StructuredJsonSchema, AdditionalPropertiesWhenAllowed) {
  auto g = schema_grammar(R"({"type": "object", "properties": {"a": {"type": "integer"}},
                              "additionalProperties": {"type": "boolean"}})");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(matches(g, R"({"a": 1, "x": true, "y": false})"));
  EXPECT_TRUE(matches(g, R"({"x": true})"));
  EXPECT_FALSE(matches(g, R"({"a": 1, "x": 2})"));
  auto any = schema_grammar(R"({"type": "object", "additionalProperties": true})");
  EXPECT_TRUE(matches(any, R"({"k": {"deep": [1, {"x": null}]}, "s": "v"})"));
}

TEST(StructuredJsonSchema, EnumConstAnyOfAndNullable) {
  auto g = schema_grammar(R"({"type": "object", "properties": {
      "color": {"enum": ["red", "green", 3, null]},
      "kind": {"const": "car"},
      "v": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]},
      "n": {"type": "integer", "nullable": true}},
      "required": ["color", "kind", "v", "n"]})");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(matches(g, R"({"color": "red", "kind": "car", "v": 5, "n": null})"));
  EXPECT_TRUE(matches(g, R"({"color": 3, "kind": "car", "v": "ab", "n": 4})"));
  EXPECT_TRUE(matches(g, R"({"color": null, "kind": "car", "v": -1, "n": 0})"));
  EXPECT_FALSE(matches(g, R"({"color": "blue", "kind": "car", "v": 5, "n": 1})"));
  EXPECT_FALSE(matches(g, R"({"color": "red", "kind": "bus", "v": 5, "n": 1})"));
  EXPECT_FALSE(matches(g, R"({"color": "red", "kind": "car", "v": "abc", "n": 1})"));
}

TEST(StructuredJsonSchema, RefsAndRecursion) {
  auto g = schema_grammar(R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object",
      "properties": {"value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["value"]}}})");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(matches(g, R"({"value": 1})"));
  EXPECT_TRUE(matches(
      g, R"({"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}, {"value": 4}]})"));
  EXPECT_FALSE(matches(g, R"({"value": 1, "children": [{"children": []}]})"));
  auto root_ref = schema_grammar(
      R"({"type": "array", "items": {"anyOf": [{"type": "integer"}, {"$ref": "#"}]}})");
  EXPECT_TRUE(matches(root_ref, "[1, [2, [], [3, 4]]]"));
}

TEST(StructuredJsonSchema, StringLengthsPatternsAndFormats) {
  auto g = schema_grammar(R"({"type": "array", "prefixItems": [
      {"type": "string", "minLength": 2, "maxLength": 3},
      {"type": "string", "pattern": "^a[\"\\\\]b$"},
      {"type": "string", "format": "date"},
      {"type": "string", "format": "uuid"},
      {"type": "string", "format": "email"}], "items": false})");
  ASSERT_NE(g, nullptr);
  const std::string uuid = "\"123e4567-e89b-12d3-a456-426614174000\"";
  EXPECT_TRUE(matches(g, R"(["ab", "a\"b", "2024-02-28", )" + uuid + R"(, "a.b@c.org"])"));
  EXPECT_TRUE(matches(g, R"(["\u00e9\n\"", "a\\b", "1999-12-31", )" + uuid + R"(, "x@y.z"])"));
  EXPECT_FALSE(matches(g, R"(["a", "a\"b", "2024-02-28", )" + uuid + R"(, "x@y.z"])"));
  EXPECT_FALSE(matches(g, R"(["ab", "a"b", "2024-02-28", )" + uuid + R"(, "x@y.z"])"));
  EXPECT_FALSE(matches(g, R"(["ab", "a\"b", "2024-13-01", )" + uuid + R"(, "x@y.z"])"));
  EXPECT_FALSE(matches(g, R"(["ab", "a\"b", "2024-02-30", )" + uuid + R"(, "x@y.z"])"));
  EXPECT_FALSE(matches(g, R"(["ab", "a\"b", "2024-02-28", )" + uuid + R"(, "not-an-email"])"));
}

TEST(StructuredJsonSchema, ArraysCountItems) {
  auto g = schema_grammar(
      R"({"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 3})");
  ASSERT_NE(g, nullptr);
  EXPECT_FALSE(matches(g, "[]"));
  EXPECT_FALSE(matches(g, "[true]"));
  EXPECT_TRUE(matches(g, "[true, false]"));
  EXPECT_TRUE(matches(g, "[true,false,true]"));
  EXPECT_FALSE(matches(g, "[true, false, true, true]"));
  auto tuple =
      schema_grammar(R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
                                  "items": {"type": "null"}, "minItems": 1})");
  EXPECT_TRUE(matches(tuple, "[1]"));
  EXPECT_TRUE(matches(tuple, R"([1, "a", null, null])"));
  EXPECT_FALSE(matches(tuple, R"(["a"])"));
  EXPECT_FALSE(matches(tuple, R"([1, "a", 2])"));
}

TEST(StructuredJsonSchema, IntegerRangesMatchExactly) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const int lo = std::uniform_int_distribution<int>(-1500, 1500)(rng);
    const int hi = lo + std::uniform_int_distribution<int>(0, 2500)(rng);
    const bool with_lo = trial % 5 != 1, with_hi = trial % 5 != 2;
    J schema = {{"type", "integer"}};
    if (with_lo) schema["minimum"] = lo;
    if (with_hi) schema["maximum"] = hi;
    auto g = schema_grammar(schema.dump());
    ASSERT_NE(g, nullptr);
    for (int v = -3000; v <= 4500; v += 7) {
      const bool in = (!with_lo || v >= lo) && (!with_hi || v <= hi);
      ASSERT_EQ(matches(g, std::to_string(v)), in) << schema.dump() << " value " << v;
    }
    for (int v : {lo, hi, lo - 1, hi + 1}) {
      const bool in = (!with_lo || v >= lo) && (!with_hi || v <= hi);
      ASSERT_EQ(matches(g, std::to_string(v)), in) << schema.dump() << " value " << v;
    }
    EXPECT_FALSE(matches(g, "007"));
    EXPECT_FALSE(matches(g, "-0"));
  }
}

TEST(StructuredJsonSchema, NumberRangesWithIntegerBounds) {
  auto g = schema_grammar(R"({"type": "number", "minimum": -2, "exclusiveMaximum": 3})");
  ASSERT_NE(g, nullptr);
  for (const char* ok : {"-2", "-2.0", "-1.5", "-0.25", "0", "0.5", "2.999", "2"}) {
    EXPECT_TRUE(matches(g, ok)) << ok;
  }
  for (const char* bad : {"-2.5", "-3", "3", "3.0", "3.1", "10", "1e2"}) {
    EXPECT_FALSE(matches(g, bad)) << bad;
  }
  auto positive = schema_grammar(R"({"type": "number", "exclusiveMinimum": 0})");
  EXPECT_TRUE(matches(positive, "0.001"));
  EXPECT_TRUE(matches(positive, "7"));
  EXPECT_FALSE(matches(positive, "0"));
  EXPECT_FALSE(matches(positive, "0.000"));
  EXPECT_FALSE(matches(positive, "-1"));
}

TEST(StructuredJsonSchema, UnsupportedKeywordsAndBadSchemasAreNamed) {
  EXPECT_EQ(
      schema_error(
          R"({"type": "object", "properties": {"a": {"type": "string", "not": {"const": "x"}}}})"),
      "unsupported JSON Schema keyword 'not' at /properties/a");
  EXPECT_EQ(schema_error(R"({"type": "object", "patternProperties": {"^x": {}}})"),
            "unsupported JSON Schema keyword 'patternProperties' at /");
  EXPECT_EQ(schema_error(R"({"type": "integer", "multipleOf": 3})"),
            "unsupported JSON Schema keyword 'multipleOf' at /");
  EXPECT_EQ(schema_error(R"({"type": "strin"})"), "unknown type \"strin\" at /type");
  EXPECT_EQ(schema_error(R"({"$ref": "#/$defs/missing"})"),
            "\"#/$defs/missing\" does not point into the schema at /$ref");
  EXPECT_EQ(schema_error(R"({"$ref": "https://example.com/s.json"})"),
            "only local references (\"#...\") are supported, got \"https://example.com/s.json\" at "
            "/$ref");
  EXPECT_EQ(schema_error(R"({"type": "string", "format": "color"})"),
            "string format 'color' is not supported (supported: date, time, date-time, duration, "
            "email, hostname, ipv4, ipv6, uuid, uri, uri-reference) at /format");
  EXPECT_EQ(schema_error(R"({"type": "number", "minimum": 0.5})"),
            "a non-integer bound (0.5) on a number is not supported at /");
  EXPECT_EQ(schema_error(R"({"type": "object", "properties": {"a": false}, "required": ["a"]})"),
            "the schema is false, so no value can match it at /properties/a");
  EXPECT_EQ(schema_error(R"({"type": "string", "pattern": "a(b"})"),
            "pattern at /: regex: unbalanced '(' at position 1");
  EXPECT_EQ(schema_error(R"({"type": "integer", "minimum": 5, "maximum": 1})"),
            "no integer lies in [5, 1] at /");
  EXPECT_EQ(schema_error(R"({"type": "array", "items": {"type": "integer"}, "uniqueItems": true})"),
            "uniqueItems is not supported at /");
}

TEST(StructuredJsonSchema, ParamsFromRequestFields) {
  auto p =
      parse_structured_outputs(nlohmann::json::parse(R"({"structured_outputs": {"regex": "a+"}})"));
  ASSERT_TRUE(p.has_value());
  ASSERT_TRUE(p->has_value());
  EXPECT_EQ(*(*p)->regex, "a+");
  auto old = parse_structured_outputs(nlohmann::json::parse(
      R"({"guided_choice": ["x", "y"], "guided_decoding_backend": "xgrammar"})"));
  ASSERT_TRUE(old.has_value() && old->has_value());
  EXPECT_EQ((*old)->choice->size(), 2u);
  auto none = parse_structured_outputs(nlohmann::json::parse(R"({"temperature": 0})"));
  ASSERT_TRUE(none.has_value());
  EXPECT_FALSE(none->has_value());
  auto two = parse_structured_outputs(
      nlohmann::json::parse(R"({"structured_outputs": {"regex": "a", "choice": ["b"]}})"));
  ASSERT_FALSE(two.has_value());
  EXPECT_NE(two.status().message().find("only use one kind"), std::string::npos);
  auto bad = parse_structured_outputs(nlohmann::json::parse(R"({"guided_regex": 5})"));
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().message(), "'guided_regex' must be a string, got integer");
  auto tag = parse_structured_outputs(
      nlohmann::json::parse(R"({"structured_outputs": {"structural_tag": "{}"}})"));
  ASSERT_FALSE(tag.has_value());
  // Object schemas keep their key order when read from an ordered body.
  auto ordered =
      parse_structured_outputs(J::parse(R"({"guided_json": {"properties": {"z": {}, "a": {}}}})"));
  ASSERT_TRUE(ordered.has_value() && ordered->has_value());
  EXPECT_EQ(*(*ordered)->json, R"({"properties":{"z":{},"a":{}}})");
}

// --- property test: random schemas, random outputs, independent validation ---

TEST(StructuredJsonSchema, RandomSchemasGiveValidOutputs) {
  std::mt19937 rng(2024);
  auto vocab =
      byte_vocab({"{\"",  "\"}",  "\": ",    "\", \"",   "},",           "}]",  "]}", "[{",
                  "null", "true", "false",   "12",       "-1",           "0.5", "e+", "\"a",
                  "b\"",  "\\\"", "\\u00e9", "\xC3\xA9", "\xE4\xB8\xAD", "  ",  "\n"});
  int completed = 0;
  for (int trial = 0; trial < 120; ++trial) {
    const J schema = random_schema(rng, 0);
    JsonGrammarOptions options;
    options.any_whitespace = trial % 2 == 0;
    auto g = json_schema_to_grammar(schema, options);
    ASSERT_TRUE(g.has_value()) << schema.dump() << ": " << g.status().to_string();
    auto compiled = testing::compile(*g, vocab);
    ASSERT_NE(compiled, nullptr) << schema.dump();
    for (int sample = 0; sample < 3; ++sample) {
      GrammarMatcher m(compiled);
      std::string out;
      for (int step = 0; step < 400 && !m.is_terminated(); ++step) {
        const auto mask = testing::mask_of(m);
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < vocab->vocab_size(); ++id) {
          if (testing::bit(mask, id)) allowed.push_back(id);
        }
        ASSERT_FALSE(allowed.empty()) << schema.dump() << " after " << out;
        int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
        if (m.can_end() && rng() % 2 == 0) pick = testing::eos_of(*vocab);
        ASSERT_TRUE(m.accept_token(pick));
        if (!vocab->is_stop_token(pick)) out += vocab->token_bytes(pick);
      }
      if (!m.is_terminated()) continue;  // ran out of steps: nothing to check
      ++completed;
      auto parsed = nlohmann::json::parse(out, nullptr, false);
      ASSERT_FALSE(parsed.is_discarded()) << schema.dump() << " gave invalid JSON: " << out;
      std::string why;
      EXPECT_TRUE(valid(parsed, schema, &why)) << why << "\noutput: " << out;
    }
  }
  EXPECT_GT(completed, 200);
}

}  // namespace
}  // namespace test_structured_json_schema
}  // namespace vllm::structured
