// vLLM `serve` flags that have no effect in vllm.cpp: accepted, so that a vLLM command line
// starts, with a one-line warning each saying why nothing changes (chunked prefill is always
// on, preempted requests are recomputed rather than swapped, ...). A flag another part of
// the command defines already is left alone. Unknown flags are still refused by the parser.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace vllm::cli {

struct NoopFlags {
  std::vector<std::string> given;  // the flags that were on the command line, in order
};

void add_noop_flags(CLI::App* cmd, NoopFlags* flags);
// Logs one warning per given no-op flag.
void warn_noop_flags(const NoopFlags& flags);

}  // namespace vllm::cli
