// The CPU emulation of CUDA blocks (emulator.h): one OS thread per CUDA thread, barriers
// that detect threads which never arrive.
#include "emulator.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace vllm::emu {
namespace {

// Long enough for a loaded machine, short enough for CI to fail rather than hang.
constexpr auto kDeadlockTimeout = std::chrono::seconds(120);
constexpr unsigned kWarpSize = 32;

class Barrier {
 public:
  Barrier(unsigned count, const char* what) : count_(count), what_(what) {}

  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t generation = generation_;
    if (++waiting_ == count_) {
      waiting_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    if (!cv_.wait_for(lock, kDeadlockTimeout, [&] { return generation_ != generation; })) {
      std::fprintf(stderr,
                   "emulated %s: %u of %u threads waited %lld s for the others (a barrier or "
                   "shuffle that not every thread reaches)\n",
                   what_, waiting_, count_,
                   static_cast<long long>(
                       std::chrono::duration_cast<std::chrono::seconds>(kDeadlockTimeout).count()));
      std::abort();
    }
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  unsigned count_;
  unsigned waiting_ = 0;
  uint64_t generation_ = 0;
  const char* what_;
};

struct Block {
  explicit Block(unsigned threads)
      : sync(threads, "__syncthreads"),
        start(threads, "block start"),
        end(threads, "block end (some threads are still inside a barrier)"),
        values(threads),
        predicates(threads) {
    for (unsigned w = 0; w < threads / kWarpSize; ++w) {
      warps.push_back(std::make_unique<Barrier>(kWarpSize, "warp shuffle"));
    }
  }
  Barrier sync;
  Barrier start;
  Barrier end;
  std::vector<std::unique_ptr<Barrier>> warps;
  std::vector<float> values;    // shuffle exchange, one per thread
  std::vector<int> predicates;  // __syncthreads_or
};

thread_local ThreadState t_state;
thread_local Block* t_block = nullptr;

}  // namespace

ThreadState& state() {
  return t_state;
}

void syncthreads() {
  t_block->sync.wait();
}

int syncthreads_or(int predicate) {
  Block& block = *t_block;
  block.predicates[t_state.thread_idx.x] = predicate;
  block.sync.wait();
  int any = 0;
  for (int p : block.predicates) any |= p != 0 ? 1 : 0;
  block.sync.wait();  // everyone has read before the next call overwrites
  return any;
}

float shfl_xor(float value, int lane_mask) {
  Block& block = *t_block;
  const unsigned tid = t_state.thread_idx.x;
  const unsigned warp = tid / kWarpSize;
  const unsigned lane = tid % kWarpSize;
  block.values[tid] = value;
  block.warps[warp]->wait();
  const float result =
      block.values[warp * kWarpSize + ((lane ^ static_cast<unsigned>(lane_mask)) % kWarpSize)];
  block.warps[warp]->wait();
  return result;
}

void launch(dim3 grid, unsigned threads, unsigned char* shared, size_t shared_bytes,
            const std::function<void()>& kernel) {
  if (threads == 0 || threads % kWarpSize != 0) {
    std::fprintf(stderr, "emulated launch: %u threads per block is not a multiple of 32\n",
                 threads);
    std::abort();
  }
  Block block(threads);
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      t_block = &block;
      for (unsigned z = 0; z < grid.z; ++z) {
        for (unsigned y = 0; y < grid.y; ++y) {
          for (unsigned x = 0; x < grid.x; ++x) {
            if (t == 0 && shared_bytes > 0) std::memset(shared, 0xff, shared_bytes);
            block.start.wait();
            t_state.thread_idx = uint3{t, 0, 0};
            t_state.block_idx = uint3{x, y, z};
            t_state.block_dim = dim3(threads, 1, 1);
            t_state.grid_dim = grid;
            kernel();
            block.end.wait();
          }
        }
      }
      t_block = nullptr;
    });
  }
  for (std::thread& thread : pool) thread.join();
}

}  // namespace vllm::emu
