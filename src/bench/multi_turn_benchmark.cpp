// `vllm bench multi-turn`; see multi_turn_benchmark.h.
#include "bench/multi_turn_benchmark.h"

#include <fmt/format.h>

#include <chrono>
#include <deque>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench/stats.h"

namespace vllm::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Conversation {
  std::vector<int32_t> history;  // everything sent and received so far
  int64_t turn = 0;
};

struct InFlight {
  size_t conversation = 0;
  Clock::time_point sent;
  bool first_token_seen = false;
  int64_t prompt_len = 0;
  std::vector<int32_t> reply;
};

uint64_t fnv1a(uint64_t hash, int32_t value) {
  for (int byte = 0; byte < 4; ++byte) {
    hash ^= static_cast<uint32_t>(value) >> (8 * byte) & 0xffu;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

}  // namespace

Expected<nlohmann::json> run_multi_turn_benchmark(const MultiTurnOptions& o,
                                                  engine::LoadedEngine& loaded, std::FILE* out) {
  if (o.num_conversations <= 0 || o.num_turns <= 0 || o.system_prompt_len < 0 || o.user_len <= 0 ||
      o.output_len <= 0 || o.max_concurrency <= 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--num-conversations, --num-turns, --user-len, --output-len and "
                      "--max-concurrency must be positive, --system-prompt-len not negative");
  }
  engine::EngineCore& core = *loaded.core;
  const int64_t longest = o.system_prompt_len + o.num_turns * (o.user_len + o.output_len);
  const int64_t max_model_len = core.config().scheduler.max_model_len;
  if (longest > max_model_len) {
    return make_error(ErrorCode::kInvalidArgument,
                      "the last turn holds {} tokens, more than max_model_len {}", longest,
                      max_model_len);
  }
  // vLLM's dummy prompts: token ids uniform in [0, 10000) (the vocabulary, if smaller).
  const int64_t high = std::min<int64_t>(10000, core.model_config().vocab_size);
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(high - 1));
  auto random_tokens = [&](int64_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& id : t) id = token(rng);
    return t;
  };
  const std::vector<int32_t> system = random_tokens(o.system_prompt_len);
  std::vector<Conversation> conversations(static_cast<size_t>(o.num_conversations));
  std::vector<std::vector<std::vector<int32_t>>> user_messages(conversations.size());
  for (auto& messages : user_messages) {
    for (int64_t t = 0; t < o.num_turns; ++t) messages.push_back(random_tokens(o.user_len));
  }

  SamplingParams params;
  params.temperature = 0.0;
  params.ignore_eos = true;
  params.max_tokens = static_cast<int32_t>(o.output_len);
  std::map<std::string, InFlight> in_flight;
  std::deque<size_t> not_started;
  for (size_t c = 0; c < conversations.size(); ++c) not_started.push_back(c);
  int64_t next_request = 0;
  auto send_turn = [&](size_t c) -> Status {
    Conversation& conv = conversations[c];
    if (conv.turn == 0) conv.history = system;
    const auto& message = user_messages[c][static_cast<size_t>(conv.turn)];
    conv.history.insert(conv.history.end(), message.begin(), message.end());
    const std::string id = fmt::format("chat-{}", next_request++);
    InFlight f;
    f.conversation = c;
    f.prompt_len = static_cast<int64_t>(conv.history.size());
    f.sent = Clock::now();
    VLLM_RETURN_IF_ERROR(core.add_request(id, conv.history, params));
    in_flight.emplace(id, std::move(f));
    return Status::ok();
  };

  std::vector<double> ttfts;
  std::vector<std::vector<double>> ttft_by_turn(static_cast<size_t>(o.num_turns));
  int64_t prompt_tokens = 0, cached_tokens = 0, output_tokens = 0;
  uint64_t digest = 0xcbf29ce484222325ULL;
  const engine::EngineStats before = core.stats();
  const auto start = Clock::now();
  while (!not_started.empty() && static_cast<int64_t>(in_flight.size()) < o.max_concurrency) {
    VLLM_RETURN_IF_ERROR(send_turn(not_started.front()));
    not_started.pop_front();
  }
  while (!in_flight.empty()) {
    VLLM_ASSIGN_OR_RETURN(auto outputs, core.step());
    const auto now = Clock::now();
    for (const engine::EngineCoreOutput& output : outputs) {
      auto it = in_flight.find(output.request_id);
      if (it == in_flight.end()) continue;
      InFlight& f = it->second;
      Conversation& conv = conversations[f.conversation];
      if (!f.first_token_seen && !output.new_token_ids.empty()) {
        f.first_token_seen = true;
        const double ttft = std::chrono::duration<double>(now - f.sent).count();
        ttfts.push_back(ttft);
        ttft_by_turn[static_cast<size_t>(conv.turn)].push_back(ttft);
      }
      f.reply.insert(f.reply.end(), output.new_token_ids.begin(), output.new_token_ids.end());
      if (!output.finished()) continue;
      prompt_tokens += f.prompt_len;
      cached_tokens += output.num_cached_tokens;
      output_tokens += static_cast<int64_t>(f.reply.size());
      for (int32_t id : f.reply) digest = fnv1a(digest, id);
      conv.history.insert(conv.history.end(), f.reply.begin(), f.reply.end());
      const size_t c = f.conversation;
      in_flight.erase(it);
      if (++conv.turn < o.num_turns) {
        VLLM_RETURN_IF_ERROR(send_turn(c));
      } else if (!not_started.empty()) {
        VLLM_RETURN_IF_ERROR(send_turn(not_started.front()));
        not_started.pop_front();
      }
    }
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  const engine::EngineStats after = core.stats();
  const int64_t num_requests = o.num_conversations * o.num_turns;
  const int64_t computed = prompt_tokens - cached_tokens;

  std::fprintf(out, "============ Multi-turn chat benchmark ============\n");
  std::fprintf(out, "%-40s %lld x %lld turns\n",
               "Conversations:", static_cast<long long>(o.num_conversations),
               static_cast<long long>(o.num_turns));
  std::fprintf(out, "%-40s %.2f\n", "Benchmark duration (s):", elapsed);
  std::fprintf(out, "%-40s %lld\n", "Total prompt tokens:", static_cast<long long>(prompt_tokens));
  std::fprintf(out, "%-40s %lld\n",
               "Prefix-cache hit tokens:", static_cast<long long>(cached_tokens));
  std::fprintf(out, "%-40s %lld\n", "Prefill tokens computed:", static_cast<long long>(computed));
  std::fprintf(out, "%-40s %.2f\n", "Output token throughput (tok/s):", output_tokens / elapsed);
  std::fprintf(out, "%-40s %.2f\n", "Mean TTFT (ms):", mean(ttfts) * 1e3);
  std::fprintf(out, "%-40s %.2f\n", "Median TTFT (ms):", median(ttfts) * 1e3);
  std::fprintf(out, "%-40s %.2f\n", "P99 TTFT (ms):", percentile(ttfts, 99) * 1e3);
  nlohmann::json by_turn = nlohmann::json::array();
  for (size_t t = 0; t < ttft_by_turn.size(); ++t) {
    const double turn_mean = mean(ttft_by_turn[t]) * 1e3;
    std::fprintf(out, "%-40s %.2f\n", fmt::format("Mean TTFT, turn {} (ms):", t + 1).c_str(),
                 turn_mean);
    by_turn.push_back(turn_mean);
  }
  std::fprintf(out, "%-40s %lld\n", "Preemptions:",
               static_cast<long long>(after.num_preemptions - before.num_preemptions));
  std::fprintf(out, "%-40s %016llx\n", "Output digest:", static_cast<unsigned long long>(digest));
  std::fprintf(out, "===================================================\n");
  return nlohmann::json{{"num_conversations", o.num_conversations},
                        {"num_turns", o.num_turns},
                        {"system_prompt_len", o.system_prompt_len},
                        {"user_len", o.user_len},
                        {"output_len", o.output_len},
                        {"max_concurrency", o.max_concurrency},
                        {"num_requests", num_requests},
                        {"duration", elapsed},
                        {"total_prompt_tokens", prompt_tokens},
                        {"cached_prompt_tokens", cached_tokens},
                        {"computed_prompt_tokens", computed},
                        {"output_throughput", output_tokens / elapsed},
                        {"mean_ttft_ms", mean(ttfts) * 1e3},
                        {"median_ttft_ms", median(ttfts) * 1e3},
                        {"p99_ttft_ms", percentile(ttfts, 99) * 1e3},
                        {"mean_ttft_ms_by_turn", by_turn},
                        {"num_preemptions", after.num_preemptions - before.num_preemptions},
                        {"output_digest", fmt::format("{:016x}", digest)}};
}

}  // namespace vllm::bench
