// `vllm bench`: dispatch to serve / throughput / latency / multi-turn, and the offline-engine
// benchmarks (vLLM's `vllm bench throughput` and `vllm bench latency` flags and output; our
// multi-turn chat workload for prefix caching).
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>

#include "base/logging.h"
#include "bench/multi_turn_benchmark.h"
#include "bench/offline_benchmark.h"
#include "cli/bench.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"

namespace vllm::cli {
namespace {

Status write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path);
  if (!out) return make_error(ErrorCode::kIoError, "--output-json {}: cannot write", path);
  out << j.dump(4) << "\n";
  return out ? Status::ok() : make_error(ErrorCode::kIoError, "--output-json {}: write failed", path);
}

template <typename Options, typename RunFn>
int run_offline(engine::EngineArgs& engine_args, const Options& options, const std::string& output_json,
                RunFn run) {
  auto loaded = engine::build_engine(engine_args);
  if (!loaded) {
    VLLM_LOG_ERROR("{}", loaded.status().to_string());
    return 1;
  }
  auto result = run(options, *loaded, stdout);
  if (!result) {
    VLLM_LOG_ERROR("{}", result.status().to_string());
    return result.status().code() == ErrorCode::kInvalidArgument ? 2 : 1;
  }
  if (!output_json.empty()) {
    Status s = write_json(output_json, *result);
    if (!s.is_ok()) {
      VLLM_LOG_ERROR("{}", s.message());
      return 1;
    }
  }
  return 0;
}

Runner add_throughput(CLI::App& bench) {
  struct Args {
    engine::EngineArgs engine;
    bench::ThroughputOptions options;
    std::optional<int64_t> seed;
    std::string dataset_name = "random";
    std::string output_json;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = bench.add_subcommand("throughput", "Offline inference throughput (no HTTP)");
  cmd->add_option("--model", a->engine.model, "Model folder (Hugging Face layout)")->required();
  add_engine_flags(cmd, &a->engine);
  cmd->add_option("--dataset-name", a->dataset_name, "Only random for now")->check(CLI::IsMember({"random"}));
  cmd->add_option("--input-len", a->options.input_len, "Prompt tokens per request")->capture_default_str();
  cmd->add_option("--output-len", a->options.output_len, "Output tokens per request")->capture_default_str();
  cmd->add_option("--num-prompts", a->options.num_prompts)->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--random-range-ratio", a->options.range_ratio, "Lengths uniform in len*(1 +- r)")
      ->capture_default_str();
  cmd->add_option("--prefix-len", a->options.prefix_len, "Shared random prefix tokens")->capture_default_str();
  cmd->add_option("--n", a->options.n, "Outputs per prompt")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--seed", a->seed, "Random seed (prompts and engine)");
  cmd->add_flag("--disable-detokenize", a->options.disable_detokenize, "Leave detokenization out");
  cmd->add_flag("--disable-tqdm", a->options.disable_tqdm, "No progress bar");
  cmd->add_option("--output-json", a->output_json, "Write the results as JSON");
  return [a] {
    a->options.seed = static_cast<uint64_t>(a->seed.value_or(0));
    a->engine.seed = a->seed;
    return run_offline(a->engine, a->options, a->output_json, bench::run_throughput_benchmark);
  };
}

Runner add_latency(CLI::App& bench) {
  struct Args {
    engine::EngineArgs engine;
    bench::LatencyOptions options;
    std::optional<int64_t> seed;
    std::string output_json;
  };
  auto a = std::make_shared<Args>();
  // vLLM turns prefix caching off for latency: repeated identical batches would hit it.
  a->engine.enable_prefix_caching = false;
  CLI::App* cmd = bench.add_subcommand("latency", "Latency of one fixed batch, offline (no HTTP)");
  cmd->add_option("--model", a->engine.model, "Model folder (Hugging Face layout)")->required();
  add_engine_flags(cmd, &a->engine);
  cmd->add_option("--input-len", a->options.input_len)->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--output-len", a->options.output_len)->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--batch-size", a->options.batch_size)->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--n", a->options.n, "Outputs per prompt")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--num-iters-warmup", a->options.num_iters_warmup)->capture_default_str();
  cmd->add_option("--num-iters", a->options.num_iters)->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--seed", a->seed, "Random seed (prompts and engine)");
  cmd->add_flag("--disable-detokenize", a->options.disable_detokenize, "Leave detokenization out");
  cmd->add_flag("--disable-tqdm", a->options.disable_tqdm, "No progress bars");
  cmd->add_option("--output-json", a->output_json, "Write the latencies as JSON");
  return [a] {
    a->options.seed = static_cast<uint64_t>(a->seed.value_or(0));
    a->engine.seed = a->seed;
    return run_offline(a->engine, a->options, a->output_json, bench::run_latency_benchmark);
  };
}

Runner add_multi_turn(CLI::App& bench) {
  struct Args {
    engine::EngineArgs engine;
    bench::MultiTurnOptions options;
    std::optional<int64_t> seed;
    std::string output_json;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = bench.add_subcommand(
      "multi-turn", "Multi-turn chat with a shared system prompt, offline (prefix caching)");
  cmd->add_option("--model", a->engine.model, "Model folder (Hugging Face layout)")->required();
  add_engine_flags(cmd, &a->engine);
  cmd->add_option("--num-conversations", a->options.num_conversations)->capture_default_str();
  cmd->add_option("--num-turns", a->options.num_turns)->capture_default_str();
  cmd->add_option("--system-prompt-len", a->options.system_prompt_len,
                  "Tokens of the system prompt every conversation shares")
      ->capture_default_str();
  cmd->add_option("--user-len", a->options.user_len, "Tokens of each user message")
      ->capture_default_str();
  cmd->add_option("--output-len", a->options.output_len, "Tokens of each reply")
      ->capture_default_str();
  cmd->add_option("--max-concurrency", a->options.max_concurrency, "Conversations in flight")
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Random seed (prompts and engine)");
  cmd->add_option("--output-json", a->output_json, "Write the results as JSON");
  return [a] {
    a->options.seed = static_cast<uint64_t>(a->seed.value_or(0));
    a->engine.seed = a->seed;
    return run_offline(a->engine, a->options, a->output_json, bench::run_multi_turn_benchmark);
  };
}

}  // namespace

Runner add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand(
      "bench", "Benchmarks with vLLM's metrics: serve, throughput, latency, multi-turn");
  bench->require_subcommand(1);
  auto runners = std::make_shared<std::map<std::string, Runner>>();
  (*runners)["serve"] = add_bench_serve_command(*bench);
  (*runners)["throughput"] = add_throughput(*bench);
  (*runners)["latency"] = add_latency(*bench);
  (*runners)["multi-turn"] = add_multi_turn(*bench);
  return [bench, runners] {
    for (CLI::App* sub : bench->get_subcommands()) return runners->at(sub->get_name())();
    return 2;
  };
}

}  // namespace vllm::cli
