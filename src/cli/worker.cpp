// `vllm worker`: a tensor-parallel worker process (engine/worker.h). Rank 0 -- a `vllm serve`,
// `generate`, ... with --tensor-parallel-size N -- starts ranks 1..N-1 this way; it is not
// meant to be run by hand, so it is left out of --help.
#include "engine/worker.h"

#include <memory>

#include "cli/commands.h"

namespace vllm::cli {

Runner add_worker_command(CLI::App& app) {
  auto options = std::make_shared<engine::WorkerOptions>();
  CLI::App* cmd = app.add_subcommand("worker", "");
  cmd->group("");  // hidden
  cmd->add_option("--master-addr", options->master_addr)->required();
  cmd->add_option("--master-port", options->master_port)->required()->check(CLI::Range(1, 65535));
  cmd->add_option("--rank", options->rank)->required()->check(CLI::Range(1, 63));
  return [options] { return engine::run_worker(*options); };
}

}  // namespace vllm::cli
