// Subcommands of the `vllm` binary. Each registers its flags on the app and runs when chosen;
// the returned int is the process exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace vllm::cli {

using Runner = std::function<int()>;

// `vllm generate`: offline generation on the CPU backend.
Runner add_generate_command(CLI::App& app);
// `vllm chat`: interactive chat with a model's chat template (stdin lines in, streamed
// replies out).
Runner add_chat_command(CLI::App& app);
// `vllm tokenize`: JSON strings on stdin -> JSON arrays of ids on stdout.
Runner add_tokenize_command(CLI::App& app);
// `vllm serve`: the OpenAI-compatible HTTP server.
Runner add_serve_command(CLI::App& app);
// `vllm bench serve|throughput|latency`: benchmarks with vLLM's metrics.
Runner add_bench_command(CLI::App& app);
// `vllm render-chat`: JSON chat requests on stdin -> rendered prompts (JSON strings).
Runner add_render_chat_command(CLI::App& app);
// `vllm worker` (hidden): a tensor-parallel worker that rank 0 started.
Runner add_worker_command(CLI::App& app);

}  // namespace vllm::cli
