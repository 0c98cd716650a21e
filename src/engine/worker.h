// A tensor-parallel worker: the process behind `vllm worker`, ranks 1..N-1 of a group whose
// rank 0 runs the engine (worker_group.h).
//
// It connects to rank 0 at --master-addr / --master-port, says its rank, receives the group's
// unique id and what to load, loads its shard and says it is ready; then it runs what the
// step channel brings -- allocate the caches, run a step (forward_step.h), shut down -- until
// told to stop. It keeps no engine state: no scheduler, no sampler; its logits are dropped.
//
// It never outlives rank 0: a watch on the connection aborts the group and exits the moment
// rank 0 goes. Any error (a load that fails, a step that fails) is sent to rank 0 and aborts
// the group, so every rank's collectives return at once.
#pragma once

#include <string>

namespace vllm::engine {

struct WorkerOptions {
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  int rank = 0;
};

// Runs the worker until rank 0 shuts it down (0) or something fails (1, after logging why).
int run_worker(const WorkerOptions& options);

}  // namespace vllm::engine
