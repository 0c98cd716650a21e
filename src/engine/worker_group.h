// Rank 0's side of a tensor-parallel group (vLLM's MultiprocExecutor): it starts ranks
// 1..N-1 as worker processes, hands each what to load, sends every step's inputs to them, and
// watches them.
//
// Processes. The workers are this same executable run as `vllm worker --master-addr A
// --master-port P --rank R` (fork + exec through posix_spawn: forking a process that already
// runs threads -- the server's, the thread pool's -- without exec is unsafe, and a CUDA
// context never survives a fork). Each gets its own process group, so a Ctrl-C at the terminal
// reaches rank 0 alone, which then shuts the workers down in order.
//
// Rendezvous. Rank 0 listens on A:P; each worker connects, says its rank, and receives the
// group's unique id (the shared-memory segment's name; an NCCL unique id goes the same way)
// and what to load (worker.h). The connection stays open: it is the worker's liveness signal
// and carries its "ready" or its error back. Nothing here assumes one host but the
// shared-memory step channel, which has a TCP fallback (parallel/step_channel.h).
//
// Failure. A monitor thread watches every connection: a worker that closes it (it died), or
// reports an error, aborts the group -- every collective on every rank returns the reason at
// once -- and the failure callback (the engine client) learns it, even between steps. A worker
// that dies or cannot start therefore makes rank 0 fail with an error naming the rank, its
// pid and how it ended, never hang.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "engine/parallel_config.h"
#include "engine/step_message.h"
#include "parallel/communicator.h"
#include "parallel/socket.h"
#include "parallel/step_channel.h"

namespace vllm::parallel {
class ShmGroup;
}  // namespace vllm::parallel

namespace vllm::engine {

// What every rank loads (EngineArgs' model fields).
struct WorkerLoadSpec {
  std::string model;
  std::string load_format = "auto";
  std::string quantization;             // "" | fp8
  std::string kv_cache_dtype = "auto";  // auto | fp8 | fp8_e4m3
  std::string device = "cpu";
  std::string dtype = "auto";
  int64_t max_model_len = 0;
  bool enable_expert_parallel = false;
  std::string mamba_cache_dtype = "auto";  // vLLM's --mamba-cache-dtype
  std::string mamba_ssm_cache_dtype = "auto";
};

class WorkerGroup {
 public:
  // Starts ranks 1..N-1, waits until each has connected and been told what to load; they
  // load in the background (wait_ready). Rank 0 loads its own shard meanwhile, on
  // communicator().
  static Expected<std::unique_ptr<WorkerGroup>> start(const ParallelConfig& config,
                                                      const WorkerLoadSpec& load);
  // Shuts the workers down (or, after a failure, kills what is left) and reaps them.
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  int world_size() const { return world_size_; }
  // Rank 0's communicator.
  std::shared_ptr<parallel::Communicator> communicator() const { return comm_; }

  // Returns once every worker has loaded its shard: ok, or the first failure.
  Status wait_ready();
  // Queue a message for every worker (returns once it is in the channel).
  Status init_cache(const CacheConfig& config);
  Status forward(const ForwardStep& step);

  // Aborts the group (rank 0's own step failed, say): the workers' collectives fail and
  // they exit.
  void abort(const Status& reason);
  // Ok, or why the group failed.
  Status health() const;
  // Called once, from the monitor thread, when a worker fails; must return quickly. Null
  // clears it (and waits for a call in progress to return).
  void set_failure_callback(std::function<void(const Status&)> callback);

  std::vector<pid_t> worker_pids() const;

 private:
  struct Worker {
    int rank = 0;
    pid_t pid = -1;
    parallel::Socket socket;
    bool ready = false;
    bool reaped = false;
  };

  WorkerGroup() = default;
  Status publish(const StepMessage& message);
  void monitor();
  // The monitor's verdict on a worker whose connection closed or that sent an error.
  void fail(Worker& worker, const std::string& what);
  // "exited with status 1" / "was killed by signal 9 (Killed)", reaping it (waits up to
  // `wait_ms` for it to exit).
  std::string describe_exit(Worker& worker, int wait_ms);
  void stop_monitor();

  int world_size_ = 1;
  double startup_timeout_s_ = 600.0;
  std::shared_ptr<parallel::ShmGroup> shm_;
  std::shared_ptr<parallel::Communicator> comm_;
  std::unique_ptr<parallel::StepChannel> channel_;
  std::vector<Worker> workers_;  // ranks 1..N-1

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  Status failure_;             // guarded by mutex_
  bool stopping_ = false;      // guarded by mutex_: shutdown under way, closes are expected
  std::mutex callback_mutex_;  // held while the callback runs
  std::function<void(const Status&)> callback_;
  int wake_pipe_[2] = {-1, -1};  // wakes the monitor to stop
  std::thread monitor_;
};

}  // namespace vllm::engine
