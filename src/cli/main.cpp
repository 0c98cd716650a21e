// The `vllm` command: subcommands as vLLM's CLI names them.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <map>

#include "base/logging.h"
#include "cli/commands.h"

namespace {

// vLLM's short flag names that CLI11 cannot declare (one letter after a single dash):
// "-tp N" becomes "--tensor-parallel-size N".
void expand_short_flags(int argc, char** argv) {
  static char tensor_parallel_size[] = "--tensor-parallel-size";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-tp") == 0) argv[i] = tensor_parallel_size;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"vllm.cpp: a C++ port of vLLM's serving engine", "vllm"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", "vllm.cpp 0.1.0");
  std::map<std::string, vllm::cli::Runner> runners;
  runners["serve"] = vllm::cli::add_serve_command(app);
  runners["generate"] = vllm::cli::add_generate_command(app);
  runners["chat"] = vllm::cli::add_chat_command(app);
  runners["tokenize"] = vllm::cli::add_tokenize_command(app);
  runners["render-chat"] = vllm::cli::add_render_chat_command(app);
  runners["bench"] = vllm::cli::add_bench_command(app);
  runners["worker"] = vllm::cli::add_worker_command(app);
  expand_short_flags(argc, argv);
  CLI11_PARSE(app, argc, argv);
  for (CLI::App* sub : app.get_subcommands()) {
    return runners.at(sub->get_name())();
  }
  std::fputs(app.help().c_str(), stdout);
  return 0;
}
