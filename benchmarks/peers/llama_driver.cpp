// Times llama.cpp on the peer workload (workload.h) through its C API (llama.h), with greedy
// argmax over the logits of each sequence. run.sh compiles this against the llama.h and the
// prebuilt libraries of the npm packages it fetches; the CPU backend variant for this
// machine is loaded from --lib-dir.
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "llama.h"
#include "workload.h"

namespace {

int32_t argmax(const float* logits, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

void quiet_log(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

struct Run {
  std::vector<std::vector<int32_t>> tokens;
  double prefill_s = 0, decode_s = 0;
};

// Prefill of every prompt in one batch, then one token per sequence per decode step.
bool generate(llama_context* ctx, int32_t n_vocab, const std::vector<std::vector<int32_t>>& prompts,
              int gen, Run& run) {
  llama_memory_clear(llama_get_memory(ctx), true);
  const int S = static_cast<int>(prompts.size());
  int total = 0;
  for (const auto& p : prompts) total += static_cast<int>(p.size());
  llama_batch batch = llama_batch_init(std::max(total, S), 0, 1);
  run.tokens.assign(S, {});
  peers::Clock::time_point start = peers::Clock::now();
  batch.n_tokens = 0;
  std::vector<int> out_index(S);
  for (int s = 0; s < S; ++s) {
    for (size_t i = 0; i < prompts[s].size(); ++i) {
      const int j = batch.n_tokens++;
      batch.token[j] = prompts[s][i];
      batch.pos[j] = static_cast<int32_t>(i);
      batch.n_seq_id[j] = 1;
      batch.seq_id[j][0] = s;
      batch.logits[j] = i + 1 == prompts[s].size();
    }
    out_index[s] = batch.n_tokens - 1;
  }
  bool ok = true;
  for (int step = 0; step < gen && ok; ++step) {
    if (llama_decode(ctx, batch) != 0) {
      std::fprintf(stderr, "llama_driver: llama_decode failed at step %d\n", step);
      ok = false;
      break;
    }
    for (int s = 0; s < S; ++s) {
      run.tokens[s].push_back(argmax(llama_get_logits_ith(ctx, out_index[s]), n_vocab));
    }
    if (step == 0) run.prefill_s = peers::seconds(start, peers::Clock::now());
    batch.n_tokens = 0;
    for (int s = 0; s < S; ++s) {
      const int j = batch.n_tokens++;
      batch.token[j] = run.tokens[s].back();
      batch.pos[j] = static_cast<int32_t>(prompts[s].size()) + step;
      batch.n_seq_id[j] = 1;
      batch.seq_id[j][0] = s;
      batch.logits[j] = 1;
      out_index[s] = j;
    }
  }
  run.decode_s = peers::seconds(start, peers::Clock::now()) - run.prefill_s;
  llama_batch_free(batch);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  // --lib-dir DIR comes first; the rest are the shared workload flags.
  if (argc < 3 || std::strcmp(argv[1], "--lib-dir") != 0) {
    std::fprintf(stderr, "usage: llama_driver --lib-dir DIR <workload flags>\n");
    return 2;
  }
  const char* lib_dir = argv[2];
  argv[2] = argv[0];
  peers::Options o;
  if (!peers::parse_options(argc - 2, argv + 2, o)) return 2;

  llama_log_set(quiet_log, nullptr);
  ggml_backend_load_all_from_path(lib_dir);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(o.model.c_str(), mp);
  if (model == nullptr) {
    std::fprintf(stderr, "llama_driver: cannot load %s\n", o.model.c_str());
    return 1;
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = static_cast<uint32_t>(o.seqs * (o.prompt_len + o.gen) + 64);
  cp.n_batch = static_cast<uint32_t>(std::max(o.seqs * o.prompt_len, 512));
  cp.n_ubatch = cp.n_batch;
  cp.n_seq_max = static_cast<uint32_t>(o.seqs);
  cp.n_threads = o.threads;
  cp.n_threads_batch = o.threads;
  cp.no_perf = true;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) {
    std::fprintf(stderr, "llama_driver: cannot create a context\n");
    return 1;
  }
  const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

  Run run;
  if (!generate(ctx, n_vocab, {peers::prompt_ids(99, 16, o.max_id)}, 4, run)) return 1;  // warm-up
  std::vector<std::vector<int32_t>> prompts;
  for (int s = 0; s < o.seqs; ++s) prompts.push_back(peers::prompt_for(o, s));
  if (!generate(ctx, n_vocab, prompts, o.gen, run)) return 1;
  peers::print_result("llama.cpp", o, run.prefill_s, run.decode_s, run.tokens[0]);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
