// The C ABI (include/vllm.h): submit and poll from C-style code, errors as statuses.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "vllm.h"

namespace test_capi {
namespace {

std::string golden(const char* name) {
  return std::string(VLLM_SOURCE_DIR) + "/tests/golden/" + name;
}

vllm_engine* make_engine() {
  vllm_engine_options options;
  vllm_engine_options_init(&options);
  options.max_model_len = 128;
  options.kv_cache_memory_bytes = 4 << 20;
  vllm_engine* engine = nullptr;
  EXPECT_EQ(vllm_engine_create(golden("llama").c_str(), &options, &engine), VLLM_OK)
      << vllm_last_error();
  return engine;
}

std::vector<int32_t> drain(vllm_engine* engine, const char* id, std::string* reason) {
  std::vector<int32_t> out;
  int finished = 0;
  while (!finished) {
    int32_t buffer[3];  // small on purpose: tokens that do not fit wait for the next poll
    size_t n = 0;
    const char* why = nullptr;
    vllm_status s = vllm_poll(engine, id, -1, buffer, 3, &n, &finished, &why);
    EXPECT_EQ(s, VLLM_OK) << vllm_last_error();
    if (s != VLLM_OK) break;
    out.insert(out.end(), buffer, buffer + n);
    if (finished) *reason = why;
  }
  return out;
}

TEST(CApi, SubmitPollAbort) {
  vllm_engine* engine = make_engine();
  ASSERT_NE(engine, nullptr);
  const int32_t prompt[] = {5, 9, 13, 21};
  const char* greedy = R"({"temperature": 0, "max_tokens": 10, "ignore_eos": true})";
  ASSERT_EQ(vllm_submit(engine, "a", prompt, 4, greedy), VLLM_OK) << vllm_last_error();
  ASSERT_EQ(vllm_submit(engine, "b", prompt, 4, greedy), VLLM_OK) << vllm_last_error();
  std::string reason_a, reason_b;
  auto a = drain(engine, "a", &reason_a);
  auto b = drain(engine, "b", &reason_b);
  EXPECT_EQ(a.size(), 10u);
  EXPECT_EQ(a, b);
  EXPECT_EQ(reason_a, "length");

  // Finished ids are forgotten; unknown ids are NOT_FOUND.
  size_t n = 0;
  int finished = 0;
  EXPECT_EQ(vllm_poll(engine, "a", 0, nullptr, 0, &n, &finished, nullptr), VLLM_NOT_FOUND);

  ASSERT_EQ(vllm_submit(engine, "long", prompt, 4, R"({"max_tokens": 100, "ignore_eos": true})"),
            VLLM_OK);
  EXPECT_EQ(vllm_abort(engine, "long"), VLLM_OK);
  std::string reason;
  drain(engine, "long", &reason);
  EXPECT_EQ(reason, "abort");
  vllm_engine_destroy(engine);
}

TEST(CApi, ErrorsAreStatusesWithMessages) {
  vllm_engine* engine = nullptr;
  EXPECT_EQ(vllm_engine_create("/nonexistent/model", nullptr, &engine), VLLM_NOT_FOUND);
  EXPECT_NE(std::string(vllm_last_error()).find("/nonexistent/model"), std::string::npos);
  engine = make_engine();
  ASSERT_NE(engine, nullptr);
  const int32_t prompt[] = {1, 2};
  EXPECT_EQ(vllm_submit(engine, "x", prompt, 2, "{not json"), VLLM_INVALID_ARGUMENT);
  EXPECT_EQ(vllm_submit(engine, "x", prompt, 2, R"({"temperature": -3})"), VLLM_INVALID_ARGUMENT);
  EXPECT_NE(std::string(vllm_last_error()).find("temperature"), std::string::npos);
  EXPECT_EQ(vllm_submit(engine, "x", prompt, 0, nullptr), VLLM_INVALID_ARGUMENT);
  EXPECT_EQ(vllm_submit(engine, nullptr, prompt, 2, nullptr), VLLM_INVALID_ARGUMENT);
  vllm_engine_destroy(engine);
  vllm_engine_destroy(nullptr);
}

}  // namespace
}  // namespace test_capi
