// ThreadPool: every index runs exactly once, chunks respect the grain, nested and concurrent
// calls finish, and the pool really uses more than one thread.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "base/thread_pool.h"

namespace vllm {
namespace test_thread_pool {
namespace {

// Runs parallel_for over [begin, end) and checks each index was visited exactly once and
// that no chunk is smaller than the grain (unless the whole range is).
void expect_exact_cover(ThreadPool& pool, int64_t begin, int64_t end, int64_t grain) {
  const int64_t n = end > begin ? end - begin : 0;
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::atomic<int64_t> min_chunk{INT64_MAX};
  std::atomic<int> calls{0};
  pool.parallel_for(begin, end, grain, [&](int64_t b, int64_t e) {
    ASSERT_LE(begin, b);
    ASSERT_LT(b, e);
    ASSERT_LE(e, end);
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i - begin)].fetch_add(1);
    int64_t size = e - b;
    int64_t seen = min_chunk.load();
    while (size < seen && !min_chunk.compare_exchange_weak(seen, size)) {
    }
    calls.fetch_add(1);
  });
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1)
        << "index " << begin + i << " of [" << begin << ", " << end << ") grain " << grain;
  }
  if (n == 0) {
    EXPECT_EQ(calls.load(), 0);
  } else {
    EXPECT_GE(min_chunk.load(), std::min(n, std::max<int64_t>(grain, 1)));
  }
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 2, 7, 33, 129, 1000, 4097}) {
      for (int64_t grain : {-3, 0, 1, 2, 5, 64, 1000, 5000}) {
        expect_exact_cover(pool, 0, n, grain);
        expect_exact_cover(pool, -17, -17 + n, grain);  // offsets and negative indices
      }
    }
  }
}

TEST(ThreadPool, EmptyAndReversedRangesDoNothing) {
  ThreadPool pool(4);
  int calls = 0;
  pool.parallel_for(5, 5, 1, [&](int64_t, int64_t) { ++calls; });
  pool.parallel_for(9, 2, 1, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ThreadPool, SmallRangeRunsInlineOnCaller) {
  ThreadPool pool(4);
  std::thread::id caller = std::this_thread::get_id();
  std::vector<std::thread::id> ran_on;
  pool.parallel_for(0, 10, 10, [&](int64_t b, int64_t e) {
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 10);
    ran_on.push_back(std::this_thread::get_id());
  });
  ASSERT_EQ(ran_on.size(), 1u);
  EXPECT_EQ(ran_on[0], caller);
}

TEST(ThreadPool, UsesSeveralThreads) {
  ThreadPool pool(4);
  std::mutex mutex;
  std::set<std::thread::id> ids;
  // Chunks that wait for each other until two threads have shown up prove real parallelism
  // (a bounded wait keeps a failure from hanging the suite).
  std::atomic<int> started{0};
  pool.parallel_for(0, 16, 1, [&](int64_t, int64_t) {
    started.fetch_add(1);
    for (int spin = 0; spin < 2000 && started.load() < 2; ++spin) {
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    std::lock_guard<std::mutex> lock(mutex);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_GE(ids.size(), 2u);
}

TEST(ThreadPool, NestedCallsRunInlineWithoutDeadlock) {
  ThreadPool pool(4);
  constexpr int64_t kOuter = 64, kInner = 50;
  std::vector<std::atomic<int>> hits(kOuter * kInner);
  std::atomic<int> nested_in_region{0};
  pool.parallel_for(0, kOuter, 1, [&](int64_t b, int64_t e) {
    EXPECT_TRUE(ThreadPool::in_parallel_region());
    for (int64_t i = b; i < e; ++i) {
      std::thread::id outer_thread = std::this_thread::get_id();
      pool.parallel_for(0, kInner, 1, [&](int64_t ib, int64_t ie) {
        // Inline: the whole inner range on the same thread, in one call.
        EXPECT_EQ(std::this_thread::get_id(), outer_thread);
        EXPECT_EQ(ib, 0);
        EXPECT_EQ(ie, kInner);
        nested_in_region.fetch_add(1);
        for (int64_t j = ib; j < ie; ++j) hits[static_cast<size_t>(i * kInner + j)].fetch_add(1);
      });
    }
  });
  EXPECT_FALSE(ThreadPool::in_parallel_region());
  EXPECT_EQ(nested_in_region.load(), kOuter);
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(ThreadPool, ConcurrentCallersFromSeveralThreads) {
  ThreadPool pool(3);
  constexpr int kCallers = 6;
  constexpr int kRounds = 40;
  std::vector<std::thread> callers;
  std::atomic<int> failures{0};
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int round = 0; round < kRounds; ++round) {
        int64_t n = 1 + (c * 131 + round * 17) % 900;
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallel_for(0, n, 1 + round % 7, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
        });
        for (auto& h : hits) {
          if (h.load() != 1) failures.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ThreadPool, DestroyRightAfterUseAndUnused) {
  for (int i = 0; i < 20; ++i) {
    ThreadPool unused(3);
    ThreadPool pool(3);
    std::atomic<int64_t> sum{0};
    pool.parallel_for(0, 100, 1, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) sum.fetch_add(k);
    });
    EXPECT_EQ(sum.load(), 4950);
  }
}

TEST(ThreadPool, DefaultPoolIsSharedAndUsable) {
  ThreadPool& a = default_thread_pool();
  ThreadPool& b = default_thread_pool();
  EXPECT_EQ(&a, &b);
  EXPECT_GE(a.num_threads(), 1);
  std::atomic<int64_t> count{0};
  parallel_for(0, 1000, 10, [&](int64_t b2, int64_t e) { count.fetch_add(e - b2); });
  EXPECT_EQ(count.load(), 1000);
}

TEST(ThreadPool, DefaultThreadCountFromEnvironment) {
  const char* saved = std::getenv("VLLM_CPU_THREADS");
  std::string saved_value = saved ? saved : "";
  setenv("VLLM_CPU_THREADS", "3", 1);
  EXPECT_EQ(default_num_threads(), 3);
  setenv("VLLM_CPU_THREADS", "0", 1);  // invalid: falls back to the hardware count
  int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_EQ(default_num_threads(), hw);
  setenv("VLLM_CPU_THREADS", "4x", 1);
  EXPECT_EQ(default_num_threads(), hw);
  unsetenv("VLLM_CPU_THREADS");
  EXPECT_EQ(default_num_threads(), hw);
  if (saved) setenv("VLLM_CPU_THREADS", saved_value.c_str(), 1);
}

}  // namespace
}  // namespace test_thread_pool
}  // namespace vllm
