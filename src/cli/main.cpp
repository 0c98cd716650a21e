// The `vllm` command: subcommands as vLLM's CLI names them.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "base/logging.h"

int main(int argc, char** argv) {
  CLI::App app{"vllm.cpp: a C++ port of vLLM's serving engine", "vllm"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", "vllm.cpp 0.1.0");
  CLI11_PARSE(app, argc, argv);
  if (app.get_subcommands().empty()) {
    std::fputs(app.help().c_str(), stdout);
  }
  return 0;
}
