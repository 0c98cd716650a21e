// What replaying a step needs from the device, behind the op layer so that model and engine
// code stay free of CUDA headers:
//   - DeviceGraph: device work recorded once from a callback (CUDA stream capture) and
//     replayed with one launch; every kernel reads its inputs from the same addresses it
//     was captured with, so inputs change by writing those buffers, not by re-recording.
//   - HostStaging: page-locked host memory that one asynchronous copy per step moves to a
//     persistent device buffer (the step's inputs), and the event that says when the host
//     side may be written again.
// Both exist on CUDA only; elsewhere creating one is kUnsupported.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "base/status.h"
#include "ops/exec_context.h"
#include "tensor/tensor.h"

namespace vllm {

class DeviceGraph {
 public:
  DeviceGraph() = default;
  // Records what `work` queues on ctx's stream (the calling thread's CUDA calls only) and
  // instantiates it. Fails, naming the reason, when `work` fails or does something a
  // capture cannot hold (a host synchronisation, a device allocation, a legacy-stream
  // call); the stream is usable afterwards either way.
  static Expected<DeviceGraph> capture(const ExecContext& ctx,
                                       const std::function<Status()>& work);
  // Queues the recorded work on ctx's stream.
  Status replay(const ExecContext& ctx) const;
  bool defined() const { return exec_ != nullptr; }
  // Kernel and memory nodes recorded.
  size_t num_nodes() const { return num_nodes_; }

 private:
  std::shared_ptr<void> exec_;  // cudaGraphExec_t
  size_t num_nodes_ = 0;
};

class HostStaging {
 public:
  // `bytes` of page-locked host memory and as many on ctx.device.
  static Expected<HostStaging> create(const ExecContext& ctx, size_t bytes);
  // Host memory to fill; wait_writable() first when a copy may still be reading it.
  void* host() const { return host_.get(); }
  // The device buffer (U8 [bytes]).
  const Tensor& device() const { return device_; }
  size_t bytes() const { return bytes_; }
  // Waits until the last upload() has read the host memory.
  Status wait_writable() const;
  // Queues host()[0, bytes) -> device()[0, bytes) on ctx's stream.
  Status upload(const ExecContext& ctx, size_t bytes);

 private:
  std::shared_ptr<void> host_;
  std::shared_ptr<void> copied_;  // cudaEvent_t recorded after the last upload
  Tensor device_;
  size_t bytes_ = 0;
};

// Brackets the device work of a region for an external profiler started with profiling off
// (Nsight Compute's --profile-from-start off): cudaProfilerStart / cudaProfilerStop. No-ops
// without CUDA.
void device_profiler_start();
void device_profiler_stop();

}  // namespace vllm
