// `vllm bench serve`: vLLM's serving benchmark client against any OpenAI-compatible server,
// with vLLM's flags, printed table and result JSON; plus a concurrency sweep
// (--max-concurrency 1,4,16,64) and its plot (--plot FILE.png).
//
// Prompts need the model's tokenizer for exact input lengths: --tokenizer (default --model)
// names a folder with tokenizer.json. A folder with only config.json (the golden
// checkpoints) gives token-id prompts instead, which completions endpoints accept. There is
// no Hub download: a Hub name needs --tokenizer DIR.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>

#include "base/logging.h"
#include "bench/plot.h"
#include "bench/random_dataset.h"
#include "bench/serve_benchmark.h"
#include "cli/bench.h"
#include "loader/hf_config.h"

namespace vllm::cli {
namespace {

namespace fs = std::filesystem;

struct BenchServeArgs {
  bench::ServeBenchmarkOptions options;
  bench::RandomDatasetOptions dataset;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string base_url;
  std::string served_model_name;
  std::string tokenizer;
  std::string dataset_name = "random";
  std::string max_concurrency;  // "16" or a sweep "1,4,16,64"
  std::string percentile_metrics = "ttft,tpot,itl,e2el";
  std::string metric_percentiles = "99";
  std::optional<int64_t> seed;
  std::optional<double> temperature, top_p, min_p, frequency_penalty, presence_penalty,
      repetition_penalty;
  std::optional<int64_t> top_k;
  std::string extra_body;
  std::vector<std::string> save_result;  // [] flag only, [FILE] a file name
  bool save_result_given = false;
  std::string result_dir, result_filename;
  std::string plot;
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, sep);) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

Expected<std::vector<double>> parse_numbers(const std::string& s, const char* flag) {
  std::vector<double> out;
  for (const std::string& item : split(s, ',')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (end == item.c_str() || *end != '\0') {
      return make_error(ErrorCode::kInvalidArgument, "{} {}: '{}' is not a number", flag, s, item);
    }
    out.push_back(v);
  }
  return out;
}

// The tokenizer (or, for a checkpoint without one, the vocabulary size for token-id prompts).
struct PromptSource {
  std::unique_ptr<Tokenizer> tokenizer;
  int64_t vocab_size = 0;
};

Expected<PromptSource> load_prompt_source(const std::string& id) {
  PromptSource src;
  fs::path path(id);
  if (fs::is_regular_file(path)) path = path.parent_path();
  if (fs::exists(path / "tokenizer.json")) {
    VLLM_ASSIGN_OR_RETURN(auto tok, Tokenizer::from_file(path / "tokenizer.json"));
    src.tokenizer = std::make_unique<Tokenizer>(std::move(tok));
    return src;
  }
  if (fs::exists(path / "config.json")) {
    VLLM_ASSIGN_OR_RETURN(auto config, load_model_config(path));
    src.vocab_size = config.vocab_size;
    VLLM_LOG_INFO("{} has no tokenizer.json: sending prompts as token ids", id);
    return src;
  }
  return make_error(ErrorCode::kNotFound,
                    "tokenizer '{}': not a folder with tokenizer.json (or config.json); pass "
                    "--tokenizer DIR (Hub names are not downloaded)",
                    id);
}

std::string python_float(double v) {
  if (std::isinf(v)) return "inf";
  return v == std::floor(v) ? fmt::format("{:.1f}", v) : fmt::format("{}", v);
}

// vLLM's default name: {label}-{rate}qps[-concurrency{N}]-{model}-{date}.json.
fs::path result_path(const BenchServeArgs& a, const nlohmann::json& result,
                     std::optional<int64_t> mc, bool sweep) {
  std::string name = a.result_filename;
  if (name.empty() && !a.save_result.empty()) name = a.save_result.front();
  if (name.empty()) {
    const std::string label = a.options.label.empty() ? a.options.endpoint.backend : a.options.label;
    name = fmt::format("{}-{}qps{}-{}-{}.json", label, python_float(a.options.request_rate),
                       mc ? fmt::format("-concurrency{}", *mc) : "",
                       fs::path(a.options.model_id).filename().string(), result["date"].get<std::string>());
  } else if (sweep && mc) {
    const fs::path p(name);
    name = (p.parent_path() / fmt::format("{}-concurrency{}{}", p.stem().string(), *mc,
                                          p.extension().string())).string();
  }
  return a.result_dir.empty() ? fs::path(name) : fs::path(a.result_dir) / name;
}

int run_bench_serve(BenchServeArgs& a) {
  bench::ServeBenchmarkOptions& o = a.options;
  o.endpoint.base_url = a.base_url.empty() ? fmt::format("http://{}:{}", a.host, a.port) : a.base_url;
  while (!o.endpoint.base_url.empty() && o.endpoint.base_url.back() == '/') o.endpoint.base_url.pop_back();
  o.model_name = a.served_model_name.empty() ? o.model_id : a.served_model_name;
  o.tokenizer_id = a.tokenizer.empty() ? o.model_id : a.tokenizer;
  o.percentile_metrics = split(a.percentile_metrics, ',');
  for (const std::string& m : o.percentile_metrics) {
    if (m != "ttft" && m != "tpot" && m != "itl" && m != "e2el") {
      VLLM_LOG_ERROR("--percentile-metrics: '{}' is not one of ttft, tpot, itl, e2el", m);
      return 2;
    }
  }
  auto percentiles = parse_numbers(a.metric_percentiles, "--metric-percentiles");
  auto levels = parse_numbers(a.max_concurrency, "--max-concurrency");
  if (!percentiles || !levels) {
    VLLM_LOG_ERROR("{}", (!percentiles ? percentiles.status() : levels.status()).message());
    return 2;
  }
  o.percentiles = *percentiles;
  o.seed = static_cast<uint64_t>(a.seed.value_or(0));
  // Sampling flags go into every request body; greedy unless --temperature says otherwise.
  o.extra_body = nlohmann::json::object();
  if (a.top_p) o.extra_body["top_p"] = *a.top_p;
  if (a.top_k) o.extra_body["top_k"] = *a.top_k;
  if (a.min_p) o.extra_body["min_p"] = *a.min_p;
  o.extra_body["temperature"] = a.temperature.value_or(0.0);
  if (a.frequency_penalty) o.extra_body["frequency_penalty"] = *a.frequency_penalty;
  if (a.presence_penalty) o.extra_body["presence_penalty"] = *a.presence_penalty;
  if (a.repetition_penalty) o.extra_body["repetition_penalty"] = *a.repetition_penalty;
  if (!a.extra_body.empty()) {
    auto extra = nlohmann::json::parse(a.extra_body, nullptr, false);
    if (extra.is_discarded() || !extra.is_object()) {
      VLLM_LOG_ERROR("--extra-body: not a JSON object");
      return 2;
    }
    o.extra_body.update(extra);
  }
  // vLLM: the random dataset against an OpenAI backend always ignores EOS, so outputs run to
  // their sampled lengths.
  o.ignore_eos = true;
  if (Status s = bench::validate_endpoint(o.endpoint); !s.is_ok()) {
    VLLM_LOG_ERROR("{}", s.message());
    return 2;
  }

  auto source = load_prompt_source(o.tokenizer_id);
  if (!source) {
    VLLM_LOG_ERROR("{}", source.status().message());
    return 2;
  }
  if (!source->tokenizer && o.endpoint.backend == "openai-chat") {
    VLLM_LOG_ERROR("--backend openai-chat needs text prompts: pass --tokenizer DIR with tokenizer.json");
    return 2;
  }
  a.dataset.seed = o.seed;
  auto requests = bench::sample_random_requests(a.dataset, source->tokenizer.get(), source->vocab_size);
  if (!requests) {
    VLLM_LOG_ERROR("{}", requests.status().message());
    return 2;
  }

  std::vector<std::optional<int64_t>> runs;
  for (double l : *levels) {
    if (l < 1 || l != std::floor(l)) {
      VLLM_LOG_ERROR("--max-concurrency {}: levels must be positive integers", a.max_concurrency);
      return 2;
    }
    runs.push_back(static_cast<int64_t>(l));
  }
  if (runs.empty()) runs.push_back(std::nullopt);
  const bool sweep = runs.size() > 1;
  if (!a.plot.empty() && !runs.front()) {
    VLLM_LOG_ERROR("--plot needs --max-concurrency levels to plot against");
    return 2;
  }

  std::vector<bench::SweepPoint> points;
  for (const std::optional<int64_t>& mc : runs) {
    o.max_concurrency = mc;
    auto result = bench::run_serve_benchmark(o, *requests, source->tokenizer.get(), stdout);
    if (!result) {
      VLLM_LOG_ERROR("{}", result.status().message());
      return 1;
    }
    std::fputs(result->table.c_str(), stdout);
    std::fflush(stdout);
    if (mc) points.push_back({*mc, result->metrics});
    if (a.save_result_given || !a.result_filename.empty()) {
      const fs::path path = result_path(a, result->json, mc, sweep);
      if (path.has_parent_path()) fs::create_directories(path.parent_path());
      std::ofstream out(path);
      out << result->json.dump() << "\n";
      if (!out) {
        VLLM_LOG_ERROR("--save-result {}: cannot write", path.string());
        return 1;
      }
    }
  }
  if (!a.plot.empty()) {
    bench::PlotOptions plot;
    plot.title = fmt::format("vllm bench serve: {}, random {} in / {} out tokens, {} prompts per level",
                             o.model_name, a.dataset.input_len, a.dataset.output_len,
                             a.dataset.num_requests);
    if (Status s = bench::write_sweep_plot(a.plot, points, plot); !s.is_ok()) {
      VLLM_LOG_ERROR("{}", s.message());
      return 1;
    }
    std::printf("Sweep plot written to %s\n", a.plot.c_str());
  }
  return 0;
}

}  // namespace

Runner add_bench_serve_command(CLI::App& bench) {
  auto a = std::make_shared<BenchServeArgs>();
  CLI::App* cmd = bench.add_subcommand("serve", "Benchmark an OpenAI-compatible server (streaming)");
  bench::ServeBenchmarkOptions& o = a->options;
  cmd->add_option("--backend", o.endpoint.backend, "openai (completions) | openai-chat")
      ->capture_default_str()->check(CLI::IsMember({"openai", "openai-chat"}));
  cmd->add_option("--base-url", a->base_url, "Server URL, e.g. http://127.0.0.1:8000 (else --host/--port)");
  cmd->add_option("--host", a->host)->capture_default_str();
  cmd->add_option("--port", a->port)->capture_default_str();
  cmd->add_option("--endpoint", o.endpoint.path, "API path")->capture_default_str();
  cmd->add_option("--model", o.model_id, "Model name (and default tokenizer folder)")->required();
  cmd->add_option("--served-model-name", a->served_model_name, "Model name sent in requests");
  cmd->add_option("--tokenizer", a->tokenizer, "Folder with tokenizer.json (default: --model)");
  cmd->add_option("--dataset-name,--dataset", a->dataset_name, "Only random for now")
      ->check(CLI::IsMember({"random"}));
  cmd->add_option("--random-input-len", a->dataset.input_len)->capture_default_str();
  cmd->add_option("--random-output-len", a->dataset.output_len)->capture_default_str();
  cmd->add_option("--random-range-ratio", a->dataset.range_ratio)->capture_default_str();
  cmd->add_option("--random-prefix-len", a->dataset.prefix_len)->capture_default_str();
  cmd->add_option("--num-prompts", a->dataset.num_requests)->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--max-concurrency", a->max_concurrency,
                  "Requests in flight at most; a list (1,4,16,64) runs a sweep");
  cmd->add_option("--request-rate", o.request_rate, "Requests per second (inf: all at once)")
      ->capture_default_str();
  cmd->add_option("--burstiness", o.burstiness, "Gamma shape of the arrivals (1: Poisson)")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Random seed (prompts and arrivals; default 0)");
  cmd->add_flag("--ignore-eos", o.ignore_eos, "Send ignore_eos (always on for the random dataset)");
  cmd->add_option("--percentile-metrics", a->percentile_metrics, "Of ttft,tpot,itl,e2el")->capture_default_str();
  cmd->add_option("--metric-percentiles", a->metric_percentiles, "e.g. 25,50,99")->capture_default_str();
  cmd->add_flag("--disable-tqdm", o.disable_tqdm, "No progress bar");
  cmd->add_option("--num-warmups", o.num_warmups)->capture_default_str();
  cmd->add_option("--ready-check-timeout-sec", o.ready_check_timeout_s)->capture_default_str();
  cmd->add_option("--request-id-prefix", a->dataset.request_id_prefix, "Prefix of x-request-id");
  cmd->add_option("--label", o.label, "Result label (default: the backend)");
  cmd->add_option("--save-result", a->save_result, "Write the result JSON (optionally to FILE)")
      ->expected(0, 1)->each([a](const std::string&) { a->save_result_given = true; });
  cmd->add_flag("--save-detailed", o.save_detailed, "Also save generated_texts");
  cmd->add_option("--result-dir", a->result_dir);
  cmd->add_option("--result-filename", a->result_filename);
  cmd->add_option("--plot", a->plot, "PNG of TTFT, TPOT and throughput against --max-concurrency levels");
  cmd->add_option("--temperature", a->temperature, "Default 0 (greedy)");
  cmd->add_option("--top-p", a->top_p);
  cmd->add_option("--top-k", a->top_k);
  cmd->add_option("--min-p", a->min_p);
  cmd->add_option("--frequency-penalty", a->frequency_penalty);
  cmd->add_option("--presence-penalty", a->presence_penalty);
  cmd->add_option("--repetition-penalty", a->repetition_penalty);
  cmd->add_option("--extra-body", a->extra_body, "JSON object merged into every request");
  CLI::Option* save = cmd->get_option("--save-result");
  return [a, save] {
    a->save_result_given = a->save_result_given || save->count() > 0;
    if (a->dataset.request_id_prefix.empty()) a->dataset.request_id_prefix = "bench-";
    return run_bench_serve(*a);
  };
}

}  // namespace vllm::cli
