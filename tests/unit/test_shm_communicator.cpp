// The shared-memory group of ranks on one host (parallel/shm_group.h): its collectives and
// the step ring, with each rank a thread of this process that maps the segment on its own
// (the same code as separate processes; the multi-process path runs in the tensor-parallel
// model and engine tests). Results are checked exactly: every rank must get the bits of the
// sum taken in rank order.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/float_convert.h"
#include "parallel/shm_communicator.h"
#include "parallel/shm_group.h"
#include "parallel/step_channel.h"

namespace vllm::parallel {
namespace test_shm_communicator {
namespace {

std::string fresh_name() {
  static std::atomic<int> counter{0};
  return "/vllm-tp-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

// world_size groups, rank 0 created and the others opened; the name is unlinked at once.
std::vector<std::shared_ptr<ShmGroup>> make_group(int world, size_t slot_bytes = 4096,
                                                  size_t ring_bytes = 4096) {
  const std::string name = fresh_name();
  ShmGroupOptions options;
  options.world_size = world;
  options.slot_bytes = slot_bytes;
  options.ring_bytes = ring_bytes;
  std::vector<std::shared_ptr<ShmGroup>> ranks;
  auto created = ShmGroup::create(name, options);
  EXPECT_TRUE(created.has_value()) << created.status().to_string();
  if (!created) return {};
  ranks.push_back(*created);
  for (int r = 1; r < world; ++r) {
    auto opened = ShmGroup::open(name, r);
    EXPECT_TRUE(opened.has_value()) << opened.status().to_string();
    if (!opened) return {};
    ranks.push_back(*opened);
  }
  ranks[0]->unlink();
  return ranks;
}

// Runs fn(rank) on one thread per rank.
void on_every_rank(int world, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(fn, r);
  for (std::thread& t : threads) t.join();
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(ShmCommunicator, AllReduceIsTheRankOrderSumOnEveryRank) {
  for (int world : {2, 3, 4}) {
    // 1000 floats through 4 KiB slots: one chunk; 10000: three chunks, both phases reused.
    for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{10000}}) {
      auto ranks = make_group(world);
      ASSERT_EQ(static_cast<int>(ranks.size()), world);
      std::vector<std::vector<float>> inputs, outputs(static_cast<size_t>(world));
      for (int r = 0; r < world; ++r)
        inputs.push_back(random_floats(static_cast<size_t>(n), r + 7));
      on_every_rank(world, [&](int r) {
        ShmCommunicator comm(ranks[static_cast<size_t>(r)]);
        Tensor x = Tensor::empty({n}, DType::kF32);
        std::copy(inputs[r].begin(), inputs[r].end(), x.data<float>());
        ExecContext ctx;
        for (int repeat = 0; repeat < 3; ++repeat) {
          Tensor y = Tensor::empty({n}, DType::kF32);
          std::copy(inputs[r].begin(), inputs[r].end(), y.data<float>());
          ASSERT_TRUE(comm.all_reduce(ctx, y).is_ok());
          if (repeat == 2) outputs[r].assign(y.data<float>(), y.data<float>() + n);
        }
      });
      for (int64_t i = 0; i < n; ++i) {
        float sum = inputs[0][i];
        for (int r = 1; r < world; ++r) sum += inputs[r][i];
        for (int r = 0; r < world; ++r) {
          ASSERT_EQ(outputs[r][i], sum) << "world " << world << " rank " << r << " element " << i;
        }
      }
    }
  }
}

TEST(ShmCommunicator, AllReduceBf16SumsInF32AndRoundsOnce) {
  const int world = 2;
  auto ranks = make_group(world, 256);
  const int64_t n = 300;  // 600 bytes: three chunks of 256-byte slots
  std::vector<std::vector<uint16_t>> outputs(world);
  on_every_rank(world, [&](int r) {
    ShmCommunicator comm(ranks[static_cast<size_t>(r)]);
    Tensor x = Tensor::empty({n}, DType::kBF16);
    for (int64_t i = 0; i < n; ++i) x.data<uint16_t>()[i] = f32_to_bf16(1.0f + i + r * 0.00390625f);
    ExecContext ctx;
    ASSERT_TRUE(comm.all_reduce(ctx, x).is_ok());
    outputs[r].assign(x.data<uint16_t>(), x.data<uint16_t>() + n);
  });
  for (int64_t i = 0; i < n; ++i) {
    const float a = bf16_to_f32(f32_to_bf16(1.0f + i)),
                b = bf16_to_f32(f32_to_bf16(1.0f + i + 0.00390625f));
    EXPECT_EQ(outputs[0][i], f32_to_bf16(a + b)) << i;
    EXPECT_EQ(outputs[1][i], outputs[0][i]) << i;
  }
}

TEST(ShmCommunicator, AllGatherStacksTheRanksInOrder) {
  const int world = 3;
  auto ranks = make_group(world, 64);
  const int64_t rows = 5, cols = 7;  // 140 bytes per rank: three 64-byte chunks
  std::vector<Tensor> outs(world);
  on_every_rank(world, [&](int r) {
    ShmCommunicator comm(ranks[static_cast<size_t>(r)]);
    Tensor x = Tensor::empty({rows, cols}, DType::kF32);
    for (int64_t i = 0; i < rows * cols; ++i) x.data<float>()[i] = static_cast<float>(r * 1000 + i);
    Tensor out = Tensor::empty({world, rows, cols}, DType::kF32);
    ExecContext ctx;
    ASSERT_TRUE(comm.all_gather(ctx, x, out).is_ok());
    Tensor wrong = Tensor::empty({rows, cols}, DType::kF32);
    EXPECT_FALSE(comm.all_gather(ctx, x, wrong).is_ok());  // checked before any rank waits
    outs[r] = out;
  });
  for (int r = 0; r < world; ++r) {
    for (int src = 0; src < world; ++src) {
      for (int64_t i = 0; i < rows * cols; ++i) {
        ASSERT_EQ(outs[r].data<float>()[src * rows * cols + i], src * 1000 + i);
      }
    }
  }
}

TEST(ShmCommunicator, AbortWakesEveryWaiterWithTheReason) {
  const int world = 3;
  auto ranks = make_group(world);
  std::atomic<int> failed{0};
  std::vector<std::thread> waiters;
  // Ranks 1 and 2 wait in a barrier rank 0 never enters; rank 0 aborts instead.
  for (int r = 1; r < world; ++r) {
    waiters.emplace_back([&, r] {
      Status s = ranks[static_cast<size_t>(r)]->barrier();
      EXPECT_FALSE(s.is_ok());
      EXPECT_NE(s.message().find("rank 7 died"), std::string::npos) << s.message();
      ++failed;
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ranks[0]->abort("rank 7 died");
  ranks[0]->abort("a second reason is not kept");
  for (std::thread& t : waiters) t.join();
  EXPECT_EQ(failed.load(), world - 1);
  ShmCommunicator comm(ranks[0]);
  Tensor x = Tensor::zeros({4}, DType::kF32);
  ExecContext ctx;
  Status after = comm.all_reduce(ctx, x);
  EXPECT_FALSE(after.is_ok());
  EXPECT_NE(after.message().find("rank 7 died"), std::string::npos);
  EXPECT_EQ(comm.health().message(), after.message());
}

TEST(ShmCommunicator, RefusesWhatItCannotReduce) {
  auto ranks = make_group(2);
  ShmCommunicator comm(ranks[0]);
  ExecContext ctx;
  Tensor ints = Tensor::zeros({4}, DType::kI32);
  EXPECT_FALSE(comm.all_reduce(ctx, ints).is_ok());
  Tensor strided = Tensor::zeros({4, 4}, DType::kF32).slice(1, 0, 2);
  EXPECT_FALSE(comm.all_reduce(ctx, strided).is_ok());
}

TEST(ShmGroup, OpenChecksTheNameAndTheRank) {
  EXPECT_FALSE(ShmGroup::open("/vllm-tp-test-does-not-exist", 1).has_value());
  const std::string name = fresh_name();
  ShmGroupOptions options;
  options.world_size = 2;
  auto created = ShmGroup::create(name, options);
  ASSERT_TRUE(created.has_value());
  EXPECT_FALSE(ShmGroup::create(name, options).has_value());  // the name is taken
  EXPECT_FALSE(ShmGroup::open(name, 2).has_value());          // outside the group
  EXPECT_FALSE(ShmGroup::open(name, 0).has_value());          // rank 0 created it
  auto one = ShmGroup::open(name, 1);
  ASSERT_TRUE(one.has_value());
  EXPECT_FALSE(ShmGroup::open(name, 1).has_value());  // rank 1 has joined already
  options.world_size = 0;
  EXPECT_FALSE(ShmGroup::create(fresh_name(), options).has_value());
}

TEST(ShmStepChannel, MessagesLargerThanTheRingArriveWholeAndInOrder) {
  const int world = 4;
  auto ranks = make_group(world, 4096, 64);  // a 64-byte ring
  std::vector<std::string> sent;
  std::mt19937 rng(3);
  for (size_t size : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{10000}}) {
    std::string m(size, '\0');
    for (char& c : m) c = static_cast<char>(rng());
    sent.push_back(m);
  }
  std::vector<std::vector<std::string>> received(world);
  on_every_rank(world, [&](int r) {
    ShmStepChannel channel(ranks[static_cast<size_t>(r)]);
    if (r == 0) {
      for (const std::string& m : sent) ASSERT_TRUE(channel.publish(m).is_ok());
      return;
    }
    for (size_t i = 0; i < sent.size(); ++i) {
      auto m = channel.receive();
      ASSERT_TRUE(m.has_value()) << m.status().to_string();
      received[r].push_back(*m);
    }
  });
  for (int r = 1; r < world; ++r) EXPECT_EQ(received[r], sent) << "rank " << r;
}

TEST(ShmStepChannel, AbortEndsAWaitingReceive) {
  auto ranks = make_group(2);
  std::thread reader([&] {
    ShmStepChannel channel(ranks[1]);
    auto m = channel.receive();
    EXPECT_FALSE(m.has_value());
    EXPECT_NE(m.status().message().find("gone"), std::string::npos);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  ranks[0]->abort("rank 0 is gone");
  reader.join();
  ShmStepChannel worker_side(ranks[1]);
  EXPECT_FALSE(worker_side.publish("x").is_ok());  // only rank 0 publishes
}

}  // namespace
}  // namespace test_shm_communicator
}  // namespace vllm::parallel
