// The peer benchmark's workload, shared by both engines' drivers so they time the same thing:
// S sequences of P prompt ids, G greedy tokens each, all submitted at once.
//   prefill tok/s = S * P / (time until every sequence has its first token)
//   decode tok/s  = S * (G - 1) / (time from then until every sequence has G tokens)
// Prompt ids are a fixed pseudo-random function of (sequence, position) below `max_id`, or
// the ids given with --prompt-ids (every sequence, for the greedy-token check on real text).
// Each driver prints one line: RESULT key=value ... tokens=<first sequence's ids>.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace peers {

struct Options {
  std::string model;
  std::string label = "model";
  int threads = 1;
  int seqs = 1;
  int prompt_len = 128;
  int gen = 128;
  int max_id = 8000;
  std::vector<int32_t> fixed_prompt;  // --prompt-ids a,b,c
};

inline std::vector<int32_t> parse_ids(const char* text) {
  std::vector<int32_t> ids;
  for (const char* p = text; *p != '\0';) {
    char* end = nullptr;
    ids.push_back(static_cast<int32_t>(std::strtol(p, &end, 10)));
    if (end == p) return {};
    p = *end == ',' ? end + 1 : end;
  }
  return ids;
}

inline bool parse_options(int argc, char** argv, Options& o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const char* k = argv[i];
    const char* v = argv[i + 1];
    if (!std::strcmp(k, "--model"))
      o.model = v;
    else if (!std::strcmp(k, "--label"))
      o.label = v;
    else if (!std::strcmp(k, "--threads"))
      o.threads = std::atoi(v);
    else if (!std::strcmp(k, "--seqs"))
      o.seqs = std::atoi(v);
    else if (!std::strcmp(k, "--prompt-len"))
      o.prompt_len = std::atoi(v);
    else if (!std::strcmp(k, "--gen"))
      o.gen = std::atoi(v);
    else if (!std::strcmp(k, "--max-id"))
      o.max_id = std::atoi(v);
    else if (!std::strcmp(k, "--prompt-ids")) {
      o.fixed_prompt = parse_ids(v);
      o.prompt_len = static_cast<int>(o.fixed_prompt.size());
    } else {
      std::fprintf(stderr, "unknown flag %s\n", k);
      return false;
    }
  }
  if (argc % 2 != 1 || o.model.empty() || o.threads < 1 || o.seqs < 1 || o.prompt_len < 1 ||
      o.gen < 2 || o.max_id < 2) {
    std::fprintf(stderr,
                 "usage: %s --model PATH [--label NAME] [--threads N] [--seqs S] "
                 "[--prompt-len P] [--gen G (>= 2)] [--max-id V] [--prompt-ids a,b,c]\n",
                 argv[0]);
    return false;
  }
  return true;
}

inline std::vector<int32_t> prompt_ids(int seq, int len, int max_id) {
  std::vector<int32_t> ids(static_cast<size_t>(len));
  uint64_t state = 0x243F6A8885A308D3ULL ^ (static_cast<uint64_t>(seq) << 32);
  for (int i = 0; i < len; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    ids[i] = static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(max_id - 1)) + 1;
  }
  return ids;
}

// Sequence `seq`'s prompt under the options.
inline std::vector<int32_t> prompt_for(const Options& o, int seq) {
  return o.fixed_prompt.empty() ? prompt_ids(seq, o.prompt_len, o.max_id) : o.fixed_prompt;
}

using Clock = std::chrono::steady_clock;

inline double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

inline void print_result(const char* engine, const Options& o, double prefill_s, double decode_s,
                         const std::vector<int32_t>& tokens) {
  std::printf(
      "RESULT engine=%s model=%s threads=%d seqs=%d prefill_tok_s=%.1f decode_tok_s=%.2f "
      "ttft_ms=%.2f tokens=",
      engine, o.label.c_str(), o.threads, o.seqs, o.seqs * o.prompt_len / prefill_s,
      o.seqs * (o.gen - 1) / decode_s, prefill_s * 1e3);
  for (size_t i = 0; i < tokens.size(); ++i) std::printf(i ? ",%d" : "%d", tokens[i]);
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace peers
