// How each step's inputs travel from rank 0 to the other ranks of a tensor-parallel group,
// as vLLM's scheduler output does through its shared-memory message queue: one writer,
// every other rank a reader, messages delivered whole and in order.
//
// ShmStepChannel: a byte ring in the group's shared memory (shm_group.h) -- ranks on one
// host. A message streams through the ring, so it may be larger than the ring; the writer
// waits while the slowest reader has not made room. TcpStepChannel: the same messages as
// frames over each worker's rendezvous connection, the fallback for ranks on other hosts.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "parallel/shm_group.h"
#include "parallel/socket.h"

namespace vllm::parallel {

class StepChannel {
 public:
  virtual ~StepChannel() = default;
  // Rank 0: queues `message` for every other rank; returns once it is in the channel.
  virtual Status publish(std::string_view message) = 0;
  // Other ranks: the next message rank 0 published (waits for it).
  virtual Expected<std::string> receive() = 0;
};

class ShmStepChannel final : public StepChannel {
 public:
  explicit ShmStepChannel(std::shared_ptr<ShmGroup> group) : group_(std::move(group)) {}
  Status publish(std::string_view message) override;
  Expected<std::string> receive() override;

 private:
  Status write(const char* data, size_t bytes);
  Status read(char* data, size_t bytes);
  uint64_t min_consumed() const;

  std::shared_ptr<ShmGroup> group_;
};

// Largest message a TCP step channel accepts (a step of a large batch is a few MiB).
inline constexpr size_t kMaxStepMessageBytes = size_t{1} << 30;

class TcpStepChannel final : public StepChannel {
 public:
  // Rank 0: one connection per worker (owned elsewhere, outliving the channel). Workers: the
  // connection to rank 0. `check` ends a receive early (the group was aborted).
  TcpStepChannel(std::vector<Socket*> peers, WaitCheck check)
      : peers_(std::move(peers)), check_(std::move(check)) {}
  Status publish(std::string_view message) override;
  Expected<std::string> receive() override;

 private:
  std::vector<Socket*> peers_;
  WaitCheck check_;
};

}  // namespace vllm::parallel
