// A fixed pool of worker threads for data-parallel loops in the CPU backend.
//
// parallel_for splits [begin, end) into chunks of at least `grain` indices; the workers and
// the calling thread claim chunks from a shared counter until none are left, so a call
// finishes even when every worker is busy with other callers' work. Calls made while a
// chunk is running (from a worker or from a caller inside its own chunk) run inline, so
// nested loops never deadlock. Several threads may call parallel_for on one pool at once.
//
// Latency: a forward pass issues many short loops back to back, and a futex wake-up per loop
// (tens of microseconds on a busy machine) would cost more than small loops themselves. So
// idle workers poll for new jobs for a short while (kSpinMicros) before they sleep, and a
// caller polls for its job to finish before it sleeps; only sleeping workers are woken with
// a notify. Between steps the workers fall asleep and cost nothing.
//
// The body must not throw: an exception escaping it on a worker terminates the process.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace vllm {

class ThreadPool {
 public:
  // `num_threads` is the parallelism of one call, the caller included: num_threads - 1
  // workers are started. Values below 1 are treated as 1 (no workers; everything inline).
  explicit ThreadPool(int num_threads);
  // Stops and joins the workers. No parallel_for may be running on this pool.
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // How long idle workers (and a caller waiting for its job) poll before sleeping.
  static constexpr int64_t kSpinMicros = 100;

  // Calls fn(chunk_begin, chunk_end) over disjoint chunks covering [begin, end) exactly
  // once and returns when all have run. grain < 1 counts as 1. Ranges of at most `grain`
  // indices, pools of one thread and nested calls run fn(begin, end) on this thread.
  void parallel_for(int64_t begin, int64_t end, int64_t grain,
                    const std::function<void(int64_t, int64_t)>& fn);

  // True while this thread is running a chunk of some parallel_for (nested calls go inline).
  static bool in_parallel_region();

 private:
  struct Job;

  void worker_loop();
  // Claims and runs chunks of `job` until none are left; returns how many it ran.
  static int64_t run_chunks(Job& job);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_cv_;  // workers wait here for jobs (or stop)
  std::condition_variable done_cv_;  // callers wait here for their job to drain
  std::deque<Job*> jobs_;            // jobs that may still have unclaimed chunks
  bool stop_ = false;
  int sleeping_ = 0;                // workers blocked on work_cv_ (guarded by mutex_)
  std::atomic<int64_t> queued_{0};  // jobs_.size(), readable without the lock
};

// Threads for the default pool: VLLM_CPU_THREADS when set to a positive integer, else the
// count set_default_num_threads() gave, else std::thread::hardware_concurrency() (at least 1).
int default_num_threads();
// The default pool's size when VLLM_CPU_THREADS is unset (a tensor-parallel rank's share of
// the cores). False, and nothing changed, once the pool exists.
bool set_default_num_threads(int num_threads);

// The process-wide pool, created on first use with default_num_threads(). It is never
// destroyed (its workers idle until the process exits), so static destructors may use it.
ThreadPool& default_thread_pool();

// default_thread_pool().parallel_for(...).
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

}  // namespace vllm
