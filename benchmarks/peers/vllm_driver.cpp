// Times vllm.cpp on the peer workload (workload.h) through the C ABI (include/vllm.h), the
// way an embedding program would drive it. Threads: VLLM_CPU_THREADS, set from --threads.
#include <cstdlib>
#include <string>
#include <vector>

#include "vllm.h"
#include "workload.h"

namespace {

bool check(vllm_status s, const char* what) {
  if (s == VLLM_OK) return true;
  std::fprintf(stderr, "vllm_driver: %s: %s\n", what, vllm_last_error());
  return false;
}

// Submits `prompts`, returns each one's tokens; *first_at is when every one had a token.
bool generate(vllm_engine* engine, const std::string& tag,
              const std::vector<std::vector<int32_t>>& prompts, int gen,
              std::vector<std::vector<int32_t>>& out, peers::Clock::time_point* first_at) {
  const std::string sampling =
      "{\"temperature\": 0, \"ignore_eos\": true, \"max_tokens\": " + std::to_string(gen) + "}";
  std::vector<std::string> ids;
  for (size_t s = 0; s < prompts.size(); ++s) {
    ids.push_back(tag + "-" + std::to_string(s));
    if (!check(vllm_submit(engine, ids.back().c_str(), prompts[s].data(), prompts[s].size(),
                           sampling.c_str()),
               "submit")) {
      return false;
    }
  }
  out.assign(prompts.size(), {});
  std::vector<int> finished(prompts.size(), 0);
  int32_t buf[4096];
  // First tokens (all sequences get theirs in the same step), then the rest.
  for (int phase = 0; phase < 2; ++phase) {
    for (size_t s = 0; s < prompts.size(); ++s) {
      while (!finished[s] && (phase == 1 || out[s].empty())) {
        size_t n = 0;
        vllm_status st =
            vllm_poll(engine, ids[s].c_str(), -1, buf, 4096, &n, &finished[s], nullptr);
        if (st == VLLM_TIMEOUT) continue;
        if (!check(st, "poll")) return false;
        out[s].insert(out[s].end(), buf, buf + n);
      }
    }
    if (phase == 0 && first_at != nullptr) *first_at = peers::Clock::now();
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  peers::Options o;
  if (!peers::parse_options(argc, argv, o)) return 2;
  setenv("VLLM_CPU_THREADS", std::to_string(o.threads).c_str(), 1);

  vllm_engine_options opts;
  vllm_engine_options_init(&opts);
  opts.max_num_seqs = o.seqs;
  opts.max_model_len = o.prompt_len + o.gen + 16;
  opts.kv_cache_memory_bytes = 256ll << 20;
  opts.enable_prefix_caching = 0;
  vllm_engine* engine = nullptr;
  if (!check(vllm_engine_create(o.model.c_str(), &opts, &engine), "engine_create")) return 1;

  std::vector<std::vector<int32_t>> out;
  // Warm-up: a short request (first-touch of weights and buffers, thread start).
  if (!generate(engine, "warmup", {peers::prompt_ids(99, 16, o.max_id)}, 4, out, nullptr)) return 1;

  std::vector<std::vector<int32_t>> prompts;
  for (int s = 0; s < o.seqs; ++s) prompts.push_back(peers::prompt_for(o, s));
  peers::Clock::time_point start = peers::Clock::now(), first_at;
  if (!generate(engine, "run", prompts, o.gen, out, &first_at)) return 1;
  peers::Clock::time_point end = peers::Clock::now();
  for (const auto& tokens : out) {
    if (static_cast<int>(tokens.size()) != o.gen) {
      std::fprintf(stderr, "vllm_driver: a sequence got %zu tokens, expected %d\n", tokens.size(),
                   o.gen);
      return 1;
    }
  }
  peers::print_result("vllm.cpp", o, peers::seconds(start, first_at), peers::seconds(first_at, end),
                      out[0]);
  vllm_engine_destroy(engine);
  return 0;
}
