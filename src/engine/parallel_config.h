// How an engine is spread over processes (vLLM's ParallelConfig): the tensor-parallel size
// and where the ranks meet, under torchrun's / vLLM's flag names.
#pragma once

#include <optional>
#include <string>

namespace vllm::engine {

// vLLM's default rendezvous port for multi-node runs.
inline constexpr int kDefaultMasterPort = 29501;

struct ParallelConfig {
  int tensor_parallel_size = 1;           // --tensor-parallel-size / -tp
  int nnodes = 1;                         // --nnodes
  int node_rank = 0;                      // --node-rank
  std::string master_addr = "127.0.0.1";  // --master-addr: where rank 0 listens
  // --master-port; unset: a free port on one node, kDefaultMasterPort across nodes.
  std::optional<int> master_port;
  // The executable started for ranks 1..N-1 (its `worker` subcommand); empty: this process's
  // own executable. Tests point it at the `vllm` binary.
  std::string worker_executable;
  // How step inputs reach the workers: "shm" (shared memory, one host) or "tcp" (the
  // fallback for ranks on other hosts); empty: VLLM_TP_STEP_CHANNEL, else shm.
  std::string step_channel;
  // --enable-expert-parallel: MoE layers hold whole experts per rank.
  bool enable_expert_parallel = false;
  // How long the workers may take to connect and load their shards.
  double startup_timeout_s = 600.0;
};

}  // namespace vllm::engine
