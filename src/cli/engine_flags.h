// The engine flags every offline command shares (vLLM's EngineArgs.add_cli_args): --model,
// --load-format and the scheduler / KV cache limits. `vllm generate` and `vllm bench
// throughput|latency` register them the same way, so a flag means the same thing everywhere.
#pragma once

#include <CLI/CLI.hpp>

#include "engine/engine_args.h"

namespace vllm::cli {

// Registers the flags on `cmd`, writing into `args` (whose current values are the defaults).
// --seed is left to the command, which may use it for more than the engine.
void add_engine_flags(CLI::App* cmd, engine::EngineArgs& args);

}  // namespace vllm::cli
