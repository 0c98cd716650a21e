// ThreadPool: chunks are claimed from an atomic counter, so work is balanced dynamically and
// the caller alone can finish its job if every worker is busy. A job lives on its caller's
// stack; `users` (workers currently holding it) and `completed` change under the mutex (they
// are atomics only so that a spinning caller may read them without it), and the caller
// returns only after it has taken the job out of the queue and both say it is done. A worker
// touches a job only while it counts among its users.
#include "base/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>

#include "base/logging.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace vllm {
namespace {

// More chunks than threads lets fast threads take over work from slow ones (other processes
// share the cores) without making chunks so small that per-chunk overhead shows.
constexpr int64_t kChunksPerThread = 4;

thread_local int t_parallel_depth = 0;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Polls `ready` for up to ThreadPool::kSpinMicros; true as soon as it holds.
template <typename Ready>
bool spin_until(const Ready& ready) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::microseconds(ThreadPool::kSpinMicros);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      cpu_relax();
    }
    if (Clock::now() >= deadline) return ready();
  }
}

struct DepthGuard {
  DepthGuard() { ++t_parallel_depth; }
  ~DepthGuard() { --t_parallel_depth; }
};

}  // namespace

struct ThreadPool::Job {
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t begin = 0;
  int64_t base_size = 0;  // every chunk has base_size indices, the first `extra` one more
  int64_t extra = 0;
  int64_t num_chunks = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> completed{0};  // written under mutex_
  std::atomic<int> users{0};          // written under mutex_

  bool exhausted() const { return next.load(std::memory_order_relaxed) >= num_chunks; }
  bool done() const {
    return users.load(std::memory_order_acquire) == 0 &&
           completed.load(std::memory_order_acquire) == num_chunks;
  }
};

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  workers_.reserve(static_cast<size_t>(num_threads_ - 1));
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

bool ThreadPool::in_parallel_region() {
  return t_parallel_depth > 0;
}

int64_t ThreadPool::run_chunks(Job& job) {
  DepthGuard guard;
  int64_t ran = 0;
  for (;;) {
    int64_t chunk = job.next.fetch_add(1, std::memory_order_relaxed);
    if (chunk >= job.num_chunks) break;
    int64_t start = job.begin + chunk * job.base_size + std::min(chunk, job.extra);
    int64_t size = job.base_size + (chunk < job.extra ? 1 : 0);
    (*job.fn)(start, start + size);
    ++ran;
  }
  return ran;
}

void ThreadPool::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (jobs_.empty() && !stop_) {
      // Poll a while without the lock: the next loop of a forward pass usually comes soon.
      lock.unlock();
      spin_until([this] { return queued_.load(std::memory_order_acquire) > 0; });
      lock.lock();
      ++sleeping_;
      work_cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
      --sleeping_;
    }
    if (jobs_.empty()) return;  // stop_ and nothing left
    Job* job = jobs_.front();
    if (job->exhausted()) {
      jobs_.pop_front();
      queued_.store(static_cast<int64_t>(jobs_.size()), std::memory_order_release);
      continue;
    }
    job->users.fetch_add(1, std::memory_order_relaxed);
    lock.unlock();
    int64_t ran = run_chunks(*job);
    lock.lock();
    if (!jobs_.empty() && jobs_.front() == job) {  // exhausted by now
      jobs_.pop_front();
      queued_.store(static_cast<int64_t>(jobs_.size()), std::memory_order_release);
    }
    // Both counters change only under the lock, which is held here, so `all_run` is final
    // unless the caller has yet to add its own chunks (it then sees the job done itself).
    const bool all_run =
        job->completed.fetch_add(ran, std::memory_order_acq_rel) + ran == job->num_chunks;
    const bool last = job->users.fetch_sub(1, std::memory_order_acq_rel) == 1;
    // `job` may be gone from here on: a spinning caller returns without the lock.
    if (all_run && last) done_cv_.notify_all();
  }
}

void ThreadPool::parallel_for(int64_t begin, int64_t end, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (end <= begin) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t n = end - begin;
  if (n <= grain || num_threads_ == 1 || t_parallel_depth > 0) {
    fn(begin, end);
    return;
  }

  Job job;
  job.fn = &fn;
  job.begin = begin;
  job.num_chunks = std::min<int64_t>(n / grain, num_threads_ * kChunksPerThread);
  job.base_size = n / job.num_chunks;
  job.extra = n % job.num_chunks;

  int64_t wake = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(&job);
    queued_.store(static_cast<int64_t>(jobs_.size()), std::memory_order_release);
    // Spinning workers see the job by themselves; only sleeping ones need a notify.
    wake = std::min<int64_t>(job.num_chunks - 1, sleeping_);
  }
  for (int64_t i = 0; i < wake; ++i) work_cv_.notify_one();

  int64_t ran = run_chunks(job);

  {
    std::lock_guard<std::mutex> lock(mutex_);
    job.completed.fetch_add(ran, std::memory_order_release);
    auto it = std::find(jobs_.begin(), jobs_.end(), &job);
    if (it != jobs_.end()) {
      jobs_.erase(it);
      queued_.store(static_cast<int64_t>(jobs_.size()), std::memory_order_release);
    }
  }
  // No worker can join the job now; wait for the ones inside it to finish their chunks.
  if (spin_until([&] { return job.done(); })) return;
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return job.done(); });
}

namespace {

std::atomic<int> requested_threads{0};
std::atomic<bool> pool_created{false};

}  // namespace

bool set_default_num_threads(int num_threads) {
  if (pool_created.load()) return false;
  requested_threads.store(std::max(1, num_threads));
  return true;
}

int default_num_threads() {
  if (const char* env = std::getenv("VLLM_CPU_THREADS"); env != nullptr && *env != '\0') {
    char* parse_end = nullptr;
    errno = 0;
    long value = std::strtol(env, &parse_end, 10);
    if (errno == 0 && *parse_end == '\0' && value >= 1 && value <= 4096) {
      return static_cast<int>(value);
    }
    VLLM_LOG_WARNING(
        "VLLM_CPU_THREADS='{}' is not a thread count in [1, 4096]; using the {} "
        "hardware threads instead",
        env, std::max(1u, std::thread::hardware_concurrency()));
  }
  if (const int requested = requested_threads.load(); requested > 0) return requested;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

ThreadPool& default_thread_pool() {
  // Leaked on purpose: workers stay parked until exit, and no static destructor can find
  // the pool already gone.
  static ThreadPool* pool = [] {
    pool_created.store(true);
    return new ThreadPool(default_num_threads());
  }();
  return *pool;
}

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  default_thread_pool().parallel_for(begin, end, grain, fn);
}

}  // namespace vllm
