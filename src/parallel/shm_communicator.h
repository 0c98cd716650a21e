// The collectives of ranks that are processes on one host, through the group's shared
// memory (shm_group.h), for CPU tensors -- vLLM's CPU backend reduces the same way.
//
// all_reduce: each rank copies its tensor (a chunk of at most slot_bytes at a time) into its
// own buffer, the ranks meet at a barrier, and every rank sums all buffers in rank order into
// its tensor. Every rank thus performs the same additions in the same order and gets the same
// bits, which keeps the replicated parts of the model (norms, the residual stream, the MoE
// router) identical across ranks. Buffers come in two phases used alternately, so one barrier
// per chunk suffices: a rank can only write a phase again after the next barrier, which every
// rank reaches only once it has finished reading that phase.
#pragma once

#include <memory>

#include "parallel/communicator.h"
#include "parallel/shm_group.h"

namespace vllm::parallel {

class ShmCommunicator final : public Communicator {
 public:
  explicit ShmCommunicator(std::shared_ptr<ShmGroup> group) : group_(std::move(group)) {}

  int rank() const override { return group_->rank(); }
  int world_size() const override { return group_->world_size(); }
  Status all_reduce(const ExecContext& ctx, Tensor& x) override;
  Status all_gather(const ExecContext& ctx, const Tensor& x, Tensor& out) override;
  Status barrier() override { return group_->barrier(); }
  void abort(const std::string& reason) override { group_->abort(reason); }
  Status health() const override { return group_->health(); }

  ShmGroup& group() { return *group_; }

 private:
  // The phase the next chunk uses (every rank counts chunks the same way).
  int next_phase() { return static_cast<int>(chunks_++ & 1); }

  std::shared_ptr<ShmGroup> group_;
  uint64_t chunks_ = 0;
};

}  // namespace vllm::parallel
