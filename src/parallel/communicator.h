// The collectives tensor parallelism needs, as NCCL names and shapes them: one communicator
// per rank of a group of `world_size` ranks, each call made by every rank in the same order.
//
// Implementations: ShmCommunicator (shm_communicator.h), ranks that are processes on one host
// reducing through POSIX shared memory (as vLLM's CPU backend does); an NCCL one for CUDA
// devices belongs beside it. The step inputs rank 0 sends each step travel apart, through a
// StepChannel (step_channel.h), as vLLM's scheduler output does through its message queue.
//
// Every rank of a call must pass tensors of the same shape and dtype. A call returns an error
// (never hangs) once the group has been aborted: a rank died or failed, and abort() said why.
#pragma once

#include <string>

#include "base/status.h"
#include "ops/exec_context.h"
#include "tensor/tensor.h"

namespace vllm::parallel {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // x = the sum over the ranks of their x, in place: F32 or BF16 (summed in f32, rounded once),
  // contiguous, on ctx.device. Every rank gets the same bits.
  virtual Status all_reduce(const ExecContext& ctx, Tensor& x) = 0;
  // out [world_size, ...x's shape] = every rank's x, in rank order (x contiguous, out
  // contiguous, one dtype).
  virtual Status all_gather(const ExecContext& ctx, const Tensor& x, Tensor& out) = 0;
  // Returns once every rank has called it.
  virtual Status barrier() = 0;

  // Makes every collective in progress or to come fail with `reason`, on every rank that
  // can be reached (thread-safe; the first reason given is kept).
  virtual void abort(const std::string& reason) = 0;
  // Ok, or the reason the group was aborted.
  virtual Status health() const = 0;
};

}  // namespace vllm::parallel
