// The execution context every op receives, passed explicitly (never a global): the device
// activations live on, their dtype, the stream ops are queued on, the per-step workspace
// that intermediates come from, and the CUDA GEMM handle.
//
// A DeviceRuntime owns these for one device: the model holds one from load time and lends
// its context to the model runner and sampler, so everything of one engine queues on one
// stream. On the CPU the stream and GEMM handle are null and activations are F32 (the
// reference backend); on CUDA activations are BF16 (or F32 with --dtype float32).
#pragma once

#include <memory>

#include "base/status.h"
#include "ops/workspace.h"
#include "tensor/tensor.h"

namespace vllm {

namespace cpu {
class WeightArena;
}  // namespace cpu
namespace parallel {
class Communicator;
}  // namespace parallel

struct ExecContext {
  Device device = Device::cpu();
  DType act_dtype = DType::kF32;   // activations and the KV cache
  void* stream = nullptr;          // cudaStream_t on CUDA
  Workspace* workspace = nullptr;  // per-step scratch; null: plain allocations
  void* blas = nullptr;            // cuda::BlasContext* on CUDA
  // CPU: huge-page memory that load-time weights are copied into and built in
  // (cpu/weight_memory.h); null: weights stay where the loader put them.
  cpu::WeightArena* weight_arena = nullptr;
  // Tensor parallelism: the collectives of this rank's group (ops::all_reduce, all_gather),
  // which the layers also shard their weights by; null: a single rank.
  parallel::Communicator* comm = nullptr;

  // A scratch tensor on `device`: from the workspace when there is one (valid until the
  // workspace is reset at the next step), else a fresh allocation.
  Expected<Tensor> alloc(const Shape& shape, DType dtype) const;
  // An activation-dtype scratch tensor.
  Expected<Tensor> act(const Shape& shape) const { return alloc(shape, act_dtype); }
  bool is_cuda() const { return device.is_cuda(); }
  int tp_rank() const;
  int tp_size() const;
};

// Device resources of one engine: stream, GEMM handle and workspace.
class DeviceRuntime {
 public:
  // CPU: F32 activations, a host workspace. CUDA: initialises the device, creates a
  // non-blocking stream and a cuBLASLt context; act_dtype BF16 or F32. A CUDA device in a
  // build without CUDA, or without a usable GPU, is kUnsupported saying so.
  static Expected<std::unique_ptr<DeviceRuntime>> create(Device device, DType act_dtype);
  ~DeviceRuntime();
  DeviceRuntime(const DeviceRuntime&) = delete;
  DeviceRuntime& operator=(const DeviceRuntime&) = delete;

  const ExecContext& context() const { return context_; }
  Workspace& workspace() { return *workspace_; }
  // Waits for all work queued on the stream (no-op on the CPU).
  Status synchronize() const;
  // Makes this runtime one rank of a tensor-parallel group (before a model is loaded on it).
  void set_communicator(std::shared_ptr<parallel::Communicator> comm);

 private:
  DeviceRuntime() = default;
  ExecContext context_;
  std::unique_ptr<Workspace> workspace_;
  std::shared_ptr<void> blas_;  // owns the cuda::BlasContext
  std::shared_ptr<cpu::WeightArena> weight_arena_;
  std::shared_ptr<parallel::Communicator> comm_;
};

// True when this build has the CUDA backend and a CUDA device is usable.
bool cuda_available();

// Free and total bytes of a CUDA device (cudaMemGetInfo); zeros for other devices or when
// unreadable.
struct DeviceMemory {
  size_t free_bytes = 0, total_bytes = 0;
};
DeviceMemory device_memory(Device device);

}  // namespace vllm
