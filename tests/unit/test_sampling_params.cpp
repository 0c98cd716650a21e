// SamplingParams: vLLM's defaults, each validation rule with vLLM's message, normalize(),
// and from_json's field parsing and type errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/sampling_params.h"

namespace vllm {
namespace test_sampling_params {
namespace {

using nlohmann::json;

constexpr int32_t kVocab = 100;

TEST(SamplingParams, DefaultsAreVllms) {
  SamplingParams p;
  EXPECT_EQ(p.n, 1);
  EXPECT_EQ(p.presence_penalty, 0.0);
  EXPECT_EQ(p.frequency_penalty, 0.0);
  EXPECT_EQ(p.repetition_penalty, 1.0);
  EXPECT_EQ(p.temperature, 1.0);
  EXPECT_EQ(p.top_p, 1.0);
  EXPECT_EQ(p.top_k, 0);
  EXPECT_EQ(p.min_p, 0.0);
  EXPECT_FALSE(p.seed.has_value());
  EXPECT_TRUE(p.stop.empty());
  EXPECT_TRUE(p.stop_token_ids.empty());
  EXPECT_FALSE(p.ignore_eos);
  ASSERT_TRUE(p.max_tokens.has_value());
  EXPECT_EQ(*p.max_tokens, 16);
  EXPECT_EQ(p.min_tokens, 0);
  EXPECT_FALSE(p.logprobs.has_value());
  EXPECT_FALSE(p.prompt_logprobs.has_value());
  EXPECT_TRUE(p.skip_special_tokens);
  EXPECT_TRUE(p.spaces_between_special_tokens);
  EXPECT_FALSE(p.include_stop_str_in_output);
  EXPECT_TRUE(p.logit_bias.empty());
  EXPECT_FALSE(p.is_greedy());
  EXPECT_FALSE(p.has_penalties());
  EXPECT_TRUE(p.validate(kVocab).is_ok());
}

struct Rule {
  const char* name;
  std::function<void(SamplingParams&)> change;
  const char* message;  // the whole error message
};

TEST(SamplingParams, EachRuleRejectsWithVllmsMessage) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const Rule rules[] = {
      {"n", [](auto& p) { p.n = 0; }, "n must be at least 1, got 0."},
      {"n max", [](auto& p) { p.n = 16385; }, "n must be at most 16384, got 16385."},
      {"presence", [](auto& p) { p.presence_penalty = 2.5; },
       "presence_penalty must be in [-2, 2], got 2.5."},
      {"presence nan", [&](auto& p) { p.presence_penalty = nan; },
       "presence_penalty must be in [-2, 2], got nan."},
      {"frequency", [](auto& p) { p.frequency_penalty = -3; },
       "frequency_penalty must be in [-2, 2], got -3.0."},
      {"repetition inf", [&](auto& p) { p.repetition_penalty = inf; },
       "repetition_penalty must be a finite number, got inf."},
      {"repetition zero", [](auto& p) { p.repetition_penalty = 0; },
       "repetition_penalty must be greater than zero, got 0.0."},
      {"temperature nan", [&](auto& p) { p.temperature = nan; },
       "temperature must be a finite number, got nan."},
      {"temperature negative", [](auto& p) { p.temperature = -0.5; },
       "temperature must be non-negative, got -0.5."},
      {"temperature above 2", [](auto& p) { p.temperature = 2.5; },
       "temperature must be in [0, 2], got 2.5."},
      {"top_p zero", [](auto& p) { p.top_p = 0; }, "top_p must be in (0, 1], got 0.0."},
      {"top_p above 1", [](auto& p) { p.top_p = 1.5; }, "top_p must be in (0, 1], got 1.5."},
      {"top_k", [](auto& p) { p.top_k = -2; }, "top_k must be 0 (disable), or at least 1, got -2."},
      {"min_p", [](auto& p) { p.min_p = 1.25; }, "min_p must be in [0, 1], got 1.25."},
      {"min_p negative", [](auto& p) { p.min_p = -0.1; }, "min_p must be in [0, 1], got -0.1."},
      {"max_tokens", [](auto& p) { p.max_tokens = 0; }, "max_tokens must be at least 1, got 0."},
      {"min_tokens", [](auto& p) { p.min_tokens = -1; },
       "min_tokens must be greater than or equal to 0, got -1."},
      {"min over max", [](auto& p) { p.min_tokens = 20; },
       "min_tokens must be less than or equal to max_tokens=16, got 20."},
      {"logprobs", [](auto& p) { p.logprobs = -2; },
       "logprobs must be non-negative or -1, got -2."},
      {"prompt_logprobs", [](auto& p) { p.prompt_logprobs = -5; },
       "prompt_logprobs must be non-negative or -1, got -5."},
      {"stop empty",
       [](auto& p) {
         p.stop = {"ok", ""};
       },
       "stop cannot contain an empty string."},
      {"greedy n", [](auto& p) { p.temperature = 0, p.n = 2; },
       "n must be 1 when using greedy sampling, got 2."},
      {"logprobs limit", [](auto& p) { p.logprobs = 21; },
       "logprobs: Requested sample logprobs of 21, which is greater than max allowed: 20"},
      {"logprobs -1 limit", [](auto& p) { p.logprobs = -1; },
       "logprobs: Requested sample logprobs of 100, which is greater than max allowed: 20"},
      {"prompt logprobs limit", [](auto& p) { p.prompt_logprobs = 30; },
       "prompt_logprobs: Requested prompt logprobs of 30, which is greater than max allowed: "
       "20"},
      {"stop ids",
       [](auto& p) {
         p.stop_token_ids = {5, 100, -1};
       },
       "token_id(s) [100, -1] in stop_token_ids contain out-of-vocab token ids. Vocabulary "
       "size: 100"},
      {"bias ids",
       [](auto& p) {
         p.logit_bias = {{3, 1.0f}, {150, 2.0f}};
       },
       "token_id(s) [150] in logit_bias contain out-of-vocab token ids. Vocabulary size: 100"},
      {"bias nan",
       [](auto& p) {
         p.logit_bias = {{3, std::nanf("")}};
       },
       "logit_bias for token 3 must be a finite number, got nan."},
  };
  for (const Rule& rule : rules) {
    SamplingParams p;
    rule.change(p);
    Status status = p.validate(kVocab);
    ASSERT_FALSE(status.is_ok()) << rule.name;
    EXPECT_EQ(status.code(), ErrorCode::kInvalidArgument) << rule.name;
    EXPECT_EQ(status.message(), rule.message) << rule.name;
  }
}

TEST(SamplingParams, BoundaryValuesAreAccepted) {
  const std::function<void(SamplingParams&)> accepted[] = {
      [](auto& p) { p.top_k = -1; },
      [](auto& p) { p.top_k = 1; },
      [](auto& p) { p.top_p = 1e-6; },
      [](auto& p) { p.min_p = 1.0; },
      [](auto& p) { p.temperature = 2.0; },
      [](auto& p) { p.temperature = 0.0; },
      [](auto& p) { p.presence_penalty = -2.0; },
      [](auto& p) { p.repetition_penalty = 1e-3; },
      [](auto& p) { p.max_tokens.reset(), p.min_tokens = 1000; },
      [](auto& p) { p.min_tokens = 16; },
      [](auto& p) { p.logprobs = 20; },
      [](auto& p) { p.logprobs = 0; },
      [](auto& p) { p.prompt_logprobs = -1; },
      [](auto& p) {
        p.stop_token_ids = {0, 99};
      },
      [](auto& p) {
        p.logit_bias = {{0, -100.0f}, {99, 100.0f}};
      },
      [](auto& p) { p.n = 16384; },
  };
  for (size_t i = 0; i < std::size(accepted); ++i) {
    SamplingParams p;
    accepted[i](p);
    // prompt_logprobs -1 means the whole vocabulary: allowed when max_logprobs is -1.
    Status status = p.validate(kVocab, /*max_logprobs=*/p.prompt_logprobs ? -1 : 20);
    EXPECT_TRUE(status.is_ok()) << "case " << i << ": " << status.to_string();
  }
}

TEST(SamplingParams, NormalizeFollowsVllmsPostInit) {
  SamplingParams p;
  p.temperature = 0.001;
  p.seed = -1;
  p.stop_token_ids = {3, 3, 1, 3, 7, 1};
  p.normalize();
  EXPECT_EQ(p.temperature, kMinTemperature);
  EXPECT_FALSE(p.seed.has_value());
  EXPECT_EQ(p.stop_token_ids, (std::vector<int32_t>{3, 1, 7}));

  SamplingParams greedy;
  greedy.temperature = 0.0;
  greedy.seed = 5;
  greedy.normalize();
  EXPECT_EQ(greedy.temperature, 0.0);  // zero stays greedy
  EXPECT_TRUE(greedy.is_greedy());
  EXPECT_EQ(greedy.seed, 5);
}

TEST(SamplingParamsJson, ParsesEveryField) {
  json request = json::parse(R"({
    "model": "m", "prompt": "hi", "n": 3, "temperature": 0.7, "top_p": 0.9, "top_k": 40,
    "min_p": 0.05, "seed": 1234, "presence_penalty": 0.5, "frequency_penalty": -0.25,
    "repetition_penalty": 1.1, "logit_bias": {"5": 150, " 7 ": -3.5, "+9": 0},
    "stop": ["\n\n", "END"], "stop_token_ids": [2, 2, 11], "ignore_eos": true,
    "max_tokens": 64, "min_tokens": 4, "logprobs": 5, "prompt_logprobs": 2,
    "skip_special_tokens": false, "spaces_between_special_tokens": false,
    "include_stop_str_in_output": true
  })");
  auto parsed = SamplingParams::from_json(request);
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().to_string();
  const SamplingParams& p = *parsed;
  EXPECT_EQ(p.n, 3);
  EXPECT_DOUBLE_EQ(p.temperature, 0.7);
  EXPECT_DOUBLE_EQ(p.top_p, 0.9);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_DOUBLE_EQ(p.min_p, 0.05);
  EXPECT_EQ(p.seed, 1234);
  EXPECT_DOUBLE_EQ(p.presence_penalty, 0.5);
  EXPECT_DOUBLE_EQ(p.frequency_penalty, -0.25);
  EXPECT_DOUBLE_EQ(p.repetition_penalty, 1.1);
  EXPECT_EQ(p.logit_bias, (std::map<int32_t, float>{{5, 100.0f}, {7, -3.5f}, {9, 0.0f}}));
  EXPECT_EQ(p.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(p.stop_token_ids, (std::vector<int32_t>{2, 11}));  // normalized
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_EQ(p.max_tokens, 64);
  EXPECT_EQ(p.min_tokens, 4);
  EXPECT_EQ(p.logprobs, 5);
  EXPECT_EQ(p.prompt_logprobs, 2);
  EXPECT_FALSE(p.skip_special_tokens);
  EXPECT_FALSE(p.spaces_between_special_tokens);
  EXPECT_TRUE(p.include_stop_str_in_output);
  EXPECT_TRUE(p.validate(kVocab).is_ok());
}

TEST(SamplingParamsJson, AbsentAndNullKeepDefaults) {
  SamplingParams defaults;
  defaults.temperature = 0.6;
  defaults.top_k = 20;
  defaults.max_tokens.reset();
  auto parsed = SamplingParams::from_json(
      json::parse(R"({"top_k": null, "stop": null, "seed": null, "max_tokens": null})"), defaults);
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().to_string();
  EXPECT_DOUBLE_EQ(parsed->temperature, 0.6);
  EXPECT_EQ(parsed->top_k, 20);
  EXPECT_FALSE(parsed->max_tokens.has_value());
  EXPECT_FALSE(parsed->seed.has_value());

  auto plain = SamplingParams::from_json(json::object());
  ASSERT_TRUE(plain.is_ok());
  EXPECT_EQ(plain->max_tokens, 16);
  EXPECT_EQ(plain->temperature, 1.0);
}

TEST(SamplingParamsJson, OpenAiShapes) {
  auto parse = [](const char* text) { return SamplingParams::from_json(json::parse(text)); };
  auto p = parse(R"({"stop": "###", "seed": -1, "top_k": 5.0, "max_tokens": 10,
                     "max_completion_tokens": 99})");
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->stop, std::vector<std::string>{"###"});
  EXPECT_FALSE(p->seed.has_value());  // -1 means no seed
  EXPECT_EQ(p->top_k, 5);             // an integral float is an integer
  EXPECT_EQ(p->max_tokens, 99);       // chat's max_completion_tokens wins

  auto chat = parse(R"({"logprobs": true, "top_logprobs": 4})");
  ASSERT_TRUE(chat.is_ok());
  EXPECT_EQ(chat->logprobs, 4);
  auto chat_no_top = parse(R"({"logprobs": true})");
  ASSERT_TRUE(chat_no_top.is_ok());
  EXPECT_EQ(chat_no_top->logprobs, 0);  // the sampled token's logprob only
  auto chat_off = parse(R"({"logprobs": false, "top_logprobs": 0})");
  ASSERT_TRUE(chat_off.is_ok());
  EXPECT_FALSE(chat_off->logprobs.has_value());

  auto top_without = parse(R"({"top_logprobs": 3})");
  ASSERT_FALSE(top_without.is_ok());
  EXPECT_NE(top_without.status().message().find("`logprobs` must be set to true"),
            std::string::npos);
  auto top_negative = parse(R"({"logprobs": true, "top_logprobs": -4})");
  ASSERT_FALSE(top_negative.is_ok());
  EXPECT_NE(top_negative.status().message().find("'top_logprobs'"), std::string::npos);
}

TEST(SamplingParamsJson, TypeErrorsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"temperature": "hot"})", "'temperature' must be a number, got string"},
      {R"({"top_p": true})", "'top_p' must be a number, got boolean"},
      {R"({"top_k": 1.5})", "'top_k' must be an integer, got number"},
      {R"({"n": [1]})", "'n' must be an integer, got array"},
      {R"({"max_tokens": 1e12})",
       "'max_tokens' is out of range [-2147483648, 2147483647], got "
       "1000000000000"},
      {R"({"min_tokens": 4294967296})",
       "'min_tokens' is out of range [-2147483648, 2147483647], got 4294967296"},
      {R"({"seed": 18446744073709551615})",
       "'seed' is out of range [-9223372036854775808, 9223372036854775807], got "
       "18446744073709551615"},
      {R"({"seed": "7"})", "'seed' must be an integer, got string"},
      {R"({"stop": 5})", "'stop' must be a string or a list of strings, got integer"},
      {R"({"stop": ["a", 1]})", "'stop' must be a string or a list of strings, got integer"},
      {R"({"stop_token_ids": "1,2"})", "'stop_token_ids' must be a list of integers, got string"},
      {R"({"stop_token_ids": [1, "2"]})",
       "'stop_token_ids' must be a list of integers, got string"},
      {R"({"ignore_eos": 1})", "'ignore_eos' must be a boolean, got integer"},
      {R"({"skip_special_tokens": "no"})", "'skip_special_tokens' must be a boolean, got string"},
      {R"({"logprobs": "5"})", "'logprobs' must be an integer or a boolean, got string"},
      {R"({"prompt_logprobs": 2.5})", "'prompt_logprobs' must be an integer, got number"},
      {R"({"logit_bias": [1, 2]})",
       "'logit_bias' must be an object mapping token ids to biases, got array"},
      {R"({"logit_bias": {"5": "up"}})",
       "'logit_bias' values must be numbers, got string for token '5'"},
      {R"({"logit_bias": {"abc": 1, "12x": 2, "3": 1}})",
       "logit_bias contains key(s) that cannot be converted to integer token IDs: ['12x', "
       "'abc']"},
  };
  for (const auto& [text, message] : cases) {
    auto parsed = SamplingParams::from_json(json::parse(text));
    ASSERT_FALSE(parsed.is_ok()) << text;
    EXPECT_EQ(parsed.status().code(), ErrorCode::kInvalidArgument) << text;
    EXPECT_EQ(parsed.status().message(), message) << text;
  }
  auto not_object = SamplingParams::from_json(json::parse("[1, 2]"));
  ASSERT_FALSE(not_object.is_ok());
  EXPECT_EQ(not_object.status().message(), "request must be a JSON object, got array");
}

TEST(SamplingParamsJson, ParsedValuesStillGoThroughValidate) {
  auto parsed = SamplingParams::from_json(json::parse(R"({"top_p": 0, "temperature": 0})"));
  ASSERT_TRUE(parsed.is_ok());
  Status status = parsed->validate(kVocab);
  EXPECT_EQ(status.message(), "top_p must be in (0, 1], got 0.0.");
}

}  // namespace
}  // namespace test_sampling_params
}  // namespace vllm
