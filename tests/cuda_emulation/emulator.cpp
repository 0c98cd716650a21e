// The CPU emulation of CUDA blocks (emulator.h): one OS thread per CUDA thread, barriers
// that detect threads which never arrive.
#include "emulator.h"

#include <algorithm>
#include <array>
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
        words(threads),
        predicates(threads) {
    for (unsigned w = 0; w < threads / kWarpSize; ++w) {
      warps.push_back(std::make_unique<Barrier>(kWarpSize, "warp shuffle"));
    }
  }
  Barrier sync;
  Barrier start;
  Barrier end;
  std::vector<std::unique_ptr<Barrier>> warps;
  std::vector<float> values;                    // shuffle exchange, one per thread
  std::vector<std::array<uint32_t, 16>> words;  // warp_exchange, one row per thread
  std::vector<int> predicates;                  // __syncthreads_or
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

void syncwarp() {
  const unsigned tid = t_state.thread_idx.x;
  t_block->warps[tid / kWarpSize]->wait();
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

void warp_exchange(const uint32_t* words, int count, uint32_t (*all)[16]) {
  Block& block = *t_block;
  const unsigned tid = t_state.thread_idx.x;
  const unsigned warp = tid / kWarpSize;
  std::copy_n(words, count, block.words[tid].begin());
  block.warps[warp]->wait();
  for (unsigned lane = 0; lane < kWarpSize; ++lane) {
    std::copy_n(block.words[warp * kWarpSize + lane].begin(), count, all[lane]);
  }
  block.warps[warp]->wait();
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

namespace vllm::cuda::detail {

// mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32 from the PTX ISA's fragment tables (see
// src/backend/cuda/mma.cuh): every lane gathers the warp's A and B fragments and computes
// its own four accumulators.
void emulated_mma_m16n8k16_bf16(float* c, const uint32_t* a, const uint32_t* b) {
  const uint32_t mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  uint32_t all[32][16];
  emu::warp_exchange(mine, 6, all);
  auto bf16 = [](uint32_t word, int high) {
    return __uint_as_float(high != 0 ? word & 0xffff0000u : word << 16);
  };
  // A[row][k]: lane (row % 8) * 4 + (k % 8) / 2, register (row >= 8) + 2 * (k >= 8).
  auto a_at = [&](int row, int k) {
    const int lane = (row % 8) * 4 + (k % 8) / 2;
    const int reg = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
    return bf16(all[lane][reg], k & 1);
  };
  // B[k][col]: lane col * 4 + (k % 8) / 2, register 4 + (k >= 8).
  auto b_at = [&](int k, int col) {
    const int lane = col * 4 + (k % 8) / 2;
    return bf16(all[lane][4 + (k >= 8 ? 1 : 0)], k & 1);
  };
  const unsigned lane = emu::state().thread_idx.x % 32;
  const int g = static_cast<int>(lane / 4);
  const int t = static_cast<int>(lane % 4);
  for (int i = 0; i < 4; ++i) {
    const int row = i < 2 ? g : g + 8;
    const int col = 2 * t + (i & 1);
    float sum = c[i];
    for (int k = 0; k < 16; ++k) sum += a_at(row, k) * b_at(k, col);
    c[i] = sum;
  }
}

}  // namespace vllm::cuda::detail
