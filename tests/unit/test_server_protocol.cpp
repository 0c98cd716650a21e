// Request parsing and checking for the OpenAI endpoints, and the error shape.
#include <gtest/gtest.h>

#include <string>

#include "server/api_error.h"
#include "server/protocol.h"

namespace vllm::server {
namespace test_server_protocol {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

Expected<CompletionRequest> completion(const std::string& body) {
  auto j = parse_json_object(body);
  if (!j) return j.status();
  return parse_completion_request(*j, SamplingParams());
}

Expected<ChatRequest> chat(const std::string& body) {
  auto j = parse_ordered_json_object(body);
  if (!j) return j.status();
  return parse_chat_request(*j, SamplingParams());
}

std::string error_of(const Status& s) {
  return s.message();
}

TEST(ServerProtocol, CompletionPromptForms) {
  auto text = completion(R"({"prompt": "hi", "max_tokens": 5, "echo": true, "stream": true,
                            "stream_options": {"include_usage": true}})");
  ASSERT_TRUE(text.has_value()) << text.status().to_string();
  ASSERT_EQ(text->prompts.size(), 1u);
  EXPECT_EQ(text->prompts[0].text.value_or(""), "hi");
  EXPECT_TRUE(text->echo);
  EXPECT_TRUE(text->stream);
  EXPECT_TRUE(text->stream_options.include_usage);
  EXPECT_TRUE(text->max_tokens_given);
  EXPECT_EQ(text->params.max_tokens.value_or(0), 5);

  auto batch = completion(R"({"prompt": ["a", "b"]})");
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->prompts.size(), 2u);
  EXPECT_EQ(batch->params.max_tokens.value_or(0), 16);  // the completions default
  EXPECT_FALSE(batch->max_tokens_given);

  auto ids = completion(R"({"prompt": [1, 2, 3]})");
  ASSERT_TRUE(ids.has_value());
  ASSERT_EQ(ids->prompts.size(), 1u);
  EXPECT_EQ(ids->prompts[0].token_ids, (std::vector<int32_t>{1, 2, 3}));
  auto id_batch = completion(R"({"prompt": [[1, 2], [3]]})");
  ASSERT_TRUE(id_batch.has_value());
  EXPECT_EQ(id_batch->prompts.size(), 2u);
}

TEST(ServerProtocol, CompletionErrorsNameTheField) {
  struct Case {
    const char* body;
    const char* message_part;
  };
  const Case cases[] = {
      {R"({})", "'prompt' is required"},
      {R"({"prompt": 5})", "'prompt' must be"},
      {R"({"prompt": []})", "must not be empty"},
      {R"({"prompt": ["a", 1]})", "'prompt' must be"},
      {R"({"prompt": [1, -2]})", "out of range"},
      {R"({"prompt": [[]]})", "empty token list"},
      {R"({"prompt": "x", "max_tokens": "5"})", "'max_tokens' must be an integer, got string"},
      {R"({"prompt": "x", "temperature": "hot"})", "'temperature' must be a number"},
      {R"({"prompt": "x", "stream": "yes"})", "'stream' must be a boolean"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream=True"},
      {R"({"prompt": "x", "model": 7})", "'model' must be a string"},
      {R"({"prompt": "x", "suffix": "y"})", "suffix"},
      {R"({"prompt": "x", "best_of": 3})", "best_of"},
      {R"({"prompt": "x", "logprobs": true})", "'logprobs' must be an integer"},
      {R"({"prompt": "x", "response_format": {"type": "json_schema"}})",
       "needs a 'json_schema' object"},
      {R"({"prompt": "x", "response_format": {"type": "structural_tag"}})",
       "response_format type 'structural_tag' is not supported"},
      {R"({"prompt": "x", "response_format": {"type": "json_object"}, "guided_regex": "a"})",
       "only use one kind of structured outputs constraint"},
      {R"({"prompt": "x", "response_format": "json"})", "'response_format' must be an object"},
      {R"({"prompt": "x", "stop": [1]})", "'stop' must be"},
      {R"({"prompt": "x", "logit_bias": {"abc": 1}})", "logit_bias"},
  };
  for (const Case& c : cases) {
    auto r = completion(c.body);
    ASSERT_FALSE(r.has_value()) << c.body;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument) << c.body;
    EXPECT_NE(error_of(r.status()).find(c.message_part), std::string::npos)
        << c.body << " -> " << r.status().message();
  }
}

TEST(ServerProtocol, CompletionEchoWithLogprobsAsksForPromptLogprobs) {
  auto r = completion(R"({"prompt": "x", "echo": true, "logprobs": 2})");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->params.logprobs.value_or(-5), 2);
  EXPECT_EQ(r->params.prompt_logprobs.value_or(-5), 2);
  auto json_mode = completion(R"({"prompt": "x", "response_format": {"type": "json_object"}})");
  ASSERT_TRUE(json_mode.has_value());
  ASSERT_TRUE(json_mode->params.structured_outputs.has_value());
  EXPECT_TRUE(json_mode->params.structured_outputs->json_object);
}

TEST(ServerProtocol, MalformedBodies) {
  EXPECT_FALSE(parse_json_object("{").has_value());
  EXPECT_FALSE(parse_json_object("[1, 2]").has_value());
  EXPECT_FALSE(parse_json_object("").has_value());
  // Invalid UTF-8 inside a string is malformed JSON.
  auto bad_utf8 = parse_json_object("{\"prompt\": \"\xff\xfe\"}");
  ASSERT_FALSE(bad_utf8.has_value());
  EXPECT_NE(bad_utf8.status().message().find("not valid JSON"), std::string::npos);
  EXPECT_TRUE(parse_json_object(R"({"a": "é"})").has_value());
}

TEST(ServerProtocol, ChatRequest) {
  auto r = chat(R"({"model": "m", "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": "{\"b\": 1, \"a\": 2}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "3"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "logprobs": true, "top_logprobs": 3, "max_completion_tokens": 7,
    "chat_template_kwargs": {"enable_thinking": false}})");
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  EXPECT_EQ(r->model.value_or(""), "m");
  EXPECT_EQ(r->messages[1]["content"], "Hi\nthere");
  // Tool-call arguments become objects for the template, keys in their order.
  EXPECT_EQ(r->messages[2]["tool_calls"][0]["function"]["arguments"].dump(), R"({"b":1,"a":2})");
  EXPECT_EQ(r->tool_choice.kind, ToolChoice::Kind::kAuto);  // tools given, no tool_choice
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->params.logprobs.value_or(-1), 3);
  EXPECT_EQ(r->params.max_tokens.value_or(0), 7);
  EXPECT_TRUE(r->add_generation_prompt);
  EXPECT_FALSE(r->add_special_tokens);
  EXPECT_EQ(r->chat_template_kwargs["enable_thinking"], false);

  auto plain = chat(R"({"messages": [{"role": "user", "content": "x"}]})");
  ASSERT_TRUE(plain.has_value());
  EXPECT_FALSE(plain->params.max_tokens.has_value());  // chat: up to the context length
  EXPECT_EQ(plain->tool_choice.kind, ToolChoice::Kind::kNone);
  EXPECT_FALSE(plain->params.logprobs.has_value());
}

TEST(ServerProtocol, ChatErrors) {
  struct Case {
    const char* body;
    const char* message_part;
  };
  const Case cases[] = {
      {R"({})", "'messages' is required"},
      {R"({"messages": "hi"})", "'messages' must be a list"},
      {R"({"messages": []})", "at least one message"},
      {R"({"messages": [5]})", "messages[0]' must be an object"},
      {R"({"messages": [{"content": "x"}]})", "needs a string 'role'"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
       "'image_url' is not supported"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 1})",
       "'logprobs' must be a boolean"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})",
       "`logprobs` must be set"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "auto"})",
       "`tools` must be set"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})",
       "tools[0]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}],
          "tool_choice": {"type": "function", "function": {"name": "g"}}})",
       "Tool 'g' has not been passed"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}],
          "tool_choice": "sometimes"})",
       "'tool_choice' must be"},
      {R"({"messages": [{"role": "user", "content": "x"}], "continue_final_message": true})",
       "Cannot set both"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": []})",
       "'chat_template_kwargs'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": "2"})", "'n' must be an integer"},
  };
  for (const Case& c : cases) {
    auto r = chat(c.body);
    ASSERT_FALSE(r.has_value()) << c.body;
    EXPECT_NE(r.status().message().find(c.message_part), std::string::npos)
        << c.body << " -> " << r.status().message();
  }
}

TEST(ServerProtocol, TokenizeAndDetokenize) {
  auto prompt = parse_tokenize_request(
      ordered_json::parse(R"({"prompt": "hello", "return_token_strs": true})"));
  ASSERT_TRUE(prompt.has_value());
  EXPECT_EQ(prompt->prompt.value_or(""), "hello");
  EXPECT_TRUE(prompt->add_special_tokens);
  EXPECT_TRUE(prompt->return_token_strs);
  auto messages = parse_tokenize_request(
      ordered_json::parse(R"({"messages": [{"role": "user", "content": "x"}]})"));
  ASSERT_TRUE(messages.has_value());
  ASSERT_TRUE(messages->chat.has_value());
  EXPECT_FALSE(messages->add_special_tokens);
  EXPECT_FALSE(parse_tokenize_request(ordered_json::parse(R"({"prompt": 3})")).has_value());
  EXPECT_FALSE(parse_tokenize_request(ordered_json::parse(R"({})")).has_value());
  auto detok = parse_detokenize_request(json::parse(R"({"tokens": [1, 2]})"));
  ASSERT_TRUE(detok.has_value());
  EXPECT_EQ(detok->tokens.size(), 2u);
  EXPECT_FALSE(parse_detokenize_request(json::parse(R"({"tokens": "12"})")).has_value());
  EXPECT_FALSE(parse_detokenize_request(json::parse(R"({"tokens": [1.5]})")).has_value());
}

TEST(ServerProtocol, ErrorShape) {
  ApiError e = api_error_from_status(make_error(ErrorCode::kInvalidArgument, "bad"));
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.body(),
            R"({"error":{"code":400,"message":"bad","param":null,"type":"BadRequestError"}})");
  EXPECT_EQ(api_error_from_status(make_error(ErrorCode::kNotFound, "no")).status, 404);
  EXPECT_EQ(api_error_from_status(make_error(ErrorCode::kNotFound, "no")).type, "NotFoundError");
  EXPECT_EQ(api_error_from_status(make_error(ErrorCode::kInternal, "bug")).status, 500);
  EXPECT_EQ(make_api_error(413, "big").type, "RequestEntityTooLargeError");
  EXPECT_EQ(make_api_error(401, "Unauthorized").type, "AuthenticationError");
}

}  // namespace
}  // namespace test_server_protocol
}  // namespace vllm::server
