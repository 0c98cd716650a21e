// The engine client: requests from several threads, streamed outputs, aborts, shutdown.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <thread>
#include <vector>

#include "engine/engine_client.h"

namespace vllm::engine {
namespace test_engine_client {
namespace {

std::unique_ptr<EngineClient> make_client() {
  auto model = load_model(std::filesystem::path(VLLM_SOURCE_DIR) / "tests/golden/qwen3", {});
  EXPECT_TRUE(model.has_value());
  EngineConfig config;
  config.scheduler.max_model_len = 128;
  config.scheduler.max_num_seqs = 4;
  config.kv_cache_memory_bytes = 4 << 20;
  auto core = EngineCore::create(std::move(*model), config, {});
  EXPECT_TRUE(core.has_value());
  return std::make_unique<EngineClient>(std::move(*core));
}

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

std::vector<int32_t> collect(OutputStream& stream, RequestStatus* status) {
  std::vector<int32_t> tokens;
  while (auto out = stream.next()) {
    tokens.insert(tokens.end(), out->new_token_ids.begin(), out->new_token_ids.end());
    if (out->finished()) *status = out->status;
  }
  return tokens;
}

TEST(EngineClient, ConcurrentCallersGetTheirOwnOutputs) {
  auto client = make_client();
  std::vector<std::vector<int32_t>> alone(6);
  for (int i = 0; i < 6; ++i) {
    auto stream = client->add_request("alone-" + std::to_string(i), {3, 5, 7, 11 + i, 13}, greedy(9));
    ASSERT_TRUE(stream.has_value());
    RequestStatus status{};
    alone[i] = collect(**stream, &status);
    EXPECT_EQ(alone[i].size(), 9u);
  }
  std::vector<std::vector<int32_t>> together(6);
  std::vector<std::thread> threads;
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] {
      auto stream = client->add_request("t-" + std::to_string(i), {3, 5, 7, 11 + i, 13}, greedy(9));
      ASSERT_TRUE(stream.has_value());
      RequestStatus status{};
      together[i] = collect(**stream, &status);
      EXPECT_EQ(status, RequestStatus::kFinishedLengthCapped);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(together, alone);
  const EngineStats stats = client->stats();
  EXPECT_EQ(stats.num_free_blocks, stats.num_usable_blocks);
}

TEST(EngineClient, AbortAndErrorsAndShutdown) {
  auto client = make_client();
  auto stream = client->add_request("long", {1, 2, 3}, greedy(100));
  ASSERT_TRUE(stream.has_value());
  ASSERT_TRUE((*stream)->next().has_value());  // it started
  client->abort_request("long");
  RequestStatus status{};
  collect(**stream, &status);
  EXPECT_EQ(status, RequestStatus::kFinishedAborted);

  EXPECT_FALSE(client->add_request("bad", {}, greedy(1)).has_value());
  // Paused, "dup" cannot finish before its id is offered again.
  client->pause();
  auto dup = client->add_request("dup", {1, 2}, greedy(50));
  ASSERT_TRUE(dup.has_value());
  auto second = client->add_request("dup", {1, 2}, greedy(5));
  ASSERT_FALSE(second.has_value());
  EXPECT_NE(second.status().message().find("request id dup is already in use"), std::string::npos);
  EXPECT_FALSE((*dup)->next(std::chrono::milliseconds(50)).has_value());  // nothing ran
  client->resume();
  ASSERT_TRUE((*dup)->next().has_value());  // it runs once resumed
  // Destroying the client with "dup" in flight ends its stream with an abort.
  client.reset();
  RequestStatus dup_status{};
  collect(**dup, &dup_status);
  EXPECT_TRUE(dup_status == RequestStatus::kFinishedAborted ||
              dup_status == RequestStatus::kFinishedLengthCapped);
}

TEST(EngineClient, AddRequestsShareOneStream) {
  auto client = make_client();
  auto a = client->add_request("a", {3, 5, 7}, greedy(4));
  ASSERT_TRUE(a.has_value());
  RequestStatus status{};
  const std::vector<int32_t> alone_a = collect(**a, &status);
  auto b = client->add_request("b", {2, 4}, greedy(6));
  ASSERT_TRUE(b.has_value());
  const std::vector<int32_t> alone_b = collect(**b, &status);

  std::vector<EngineClient::RequestSpec> specs;
  specs.push_back({"g-a", {3, 5, 7}, greedy(4)});
  specs.push_back({"g-b", {2, 4}, greedy(6)});
  auto stream = client->add_requests(std::move(specs));
  ASSERT_TRUE(stream.has_value());
  std::map<std::string, std::vector<int32_t>> got;
  int finished = 0;
  while (auto out = (*stream)->next()) {
    got[out->request_id].insert(got[out->request_id].end(), out->new_token_ids.begin(),
                                out->new_token_ids.end());
    finished += out->finished() ? 1 : 0;
  }
  EXPECT_EQ(finished, 2);
  EXPECT_TRUE((*stream)->done());
  EXPECT_EQ(got["g-a"], alone_a);
  EXPECT_EQ(got["g-b"], alone_b);

  // All or nothing: one bad request refuses the group; a duplicate id inside it too.
  std::vector<EngineClient::RequestSpec> bad;
  bad.push_back({"ok", {1, 2}, greedy(2)});
  bad.push_back({"empty", {}, greedy(2)});
  EXPECT_FALSE(client->add_requests(std::move(bad)).has_value());
  std::vector<EngineClient::RequestSpec> dup;
  dup.push_back({"same", {1, 2}, greedy(2)});
  dup.push_back({"same", {1, 2}, greedy(2)});
  EXPECT_FALSE(client->add_requests(std::move(dup)).has_value());
  auto ok = client->add_request("ok", {1, 2}, greedy(2));  // "ok" was not taken
  ASSERT_TRUE(ok.has_value());
  collect(**ok, &status);
  EXPECT_EQ(client->max_model_len(), 128);
}

// A failed step kills the engine: requests in flight end aborted, new ones are refused.
TEST(EngineClient, FailedStepKillsTheEngine) {
  auto client = make_client();
  EXPECT_FALSE(client->dead());
  client->fail_after_steps(3);
  auto stream = client->add_request("doomed", {1, 2, 3}, greedy(50));
  ASSERT_TRUE(stream.has_value());
  RequestStatus status{};
  const std::vector<int32_t> tokens = collect(**stream, &status);
  EXPECT_EQ(status, RequestStatus::kFinishedAborted);
  EXPECT_EQ(tokens.size(), 2u);  // two steps ran, the third failed
  EXPECT_TRUE(client->dead());
  auto refused = client->add_request("later", {1, 2}, greedy(2));
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.status().code(), ErrorCode::kInternal);
  EXPECT_NE(client->death_status().message().find("test hook"), std::string::npos);
}

// Per-step token counts (vLLM's iteration tokens), the engine's request events, and the
// stream's notify hook.
TEST(EngineClient, StepStatsEventsAndNotify) {
  auto client = make_client();
  std::atomic<int64_t> prompt_tokens{0}, generation_tokens{0}, steps{0};
  client->set_step_observer([&](const EngineClient::StepStats& step) {
    prompt_tokens += step.num_prompt_tokens;
    generation_tokens += step.num_generation_tokens;
    ++steps;
  });
  auto stream = client->add_request("counted", {3, 5, 7, 9}, greedy(6));
  ASSERT_TRUE(stream.has_value());
  std::atomic<int> notified{0};
  (*stream)->set_notify([&] { ++notified; });
  std::vector<EngineCoreEvent> events;
  int outputs = 0;
  while (auto out = (*stream)->next()) {
    ++outputs;
    events.insert(events.end(), out->events.begin(), out->events.end());
  }
  (*stream)->set_notify(nullptr);
  // The observer runs after the step's outputs are delivered: give the last call its moment.
  for (int i = 0; i < 2000 && steps.load() < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GE(notified.load(), 1);
  EXPECT_LE(notified.load(), outputs);
  EXPECT_EQ(generation_tokens.load(), 6);
  EXPECT_EQ(prompt_tokens.load(), 4);  // counted once, with the first token
  EXPECT_EQ(steps.load(), 6);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[0].type, EngineCoreEventType::kQueued);
  EXPECT_EQ(events[1].type, EngineCoreEventType::kScheduled);
  EXPECT_LE(events[0].timestamp, events[1].timestamp);
  EXPECT_LE(events[1].timestamp, monotonic_seconds());
  client->set_step_observer(nullptr);
}

}  // namespace
}  // namespace test_engine_client
}  // namespace vllm::engine
