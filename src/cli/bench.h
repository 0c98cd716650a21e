// `vllm bench serve|throughput|latency`: each registers its flags on the `bench` subcommand
// and returns a runner. bench_serve.cpp holds the HTTP client benchmark, bench.cpp the
// offline-engine ones and the `bench` dispatch.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace vllm::cli {

Runner add_bench_serve_command(CLI::App& bench);

}  // namespace vllm::cli
