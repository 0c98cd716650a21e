// DeviceGraph and HostStaging (graph.h) on the CUDA runtime API.
#include "ops/graph.h"

#include <utility>

#if VLLM_WITH_CUDA
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include "backend/cuda/runtime.h"
#endif

namespace vllm {

#if VLLM_WITH_CUDA
namespace {

cudaStream_t stream_of(const ExecContext& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

Status require_cuda(const ExecContext& ctx, const char* what) {
  if (!ctx.device.is_cuda() || ctx.stream == nullptr) {
    return make_error(ErrorCode::kUnsupported, "{} needs a CUDA device, not {}", what,
                      ctx.device.to_string());
  }
  return Status::ok();
}

}  // namespace

Expected<DeviceGraph> DeviceGraph::capture(const ExecContext& ctx,
                                           const std::function<Status()>& work) {
  VLLM_RETURN_IF_ERROR(require_cuda(ctx, "CUDA graph capture"));
  cuda::DeviceGuard guard(ctx.device);
  VLLM_RETURN_IF_ERROR(guard.status());
  cudaStream_t stream = stream_of(ctx);
  // Thread-local: another thread's CUDA calls (the server's, say) neither join nor break it.
  VLLM_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const Status worked = work();
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (!worked.is_ok() || ended != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();  // a broken capture leaves a sticky-free error: clear it
    if (!worked.is_ok()) return worked.with_context("while capturing a CUDA graph");
    return make_error(ErrorCode::kInternal,
                      "CUDA graph capture failed: {} (the step did something a graph cannot "
                      "hold, such as a host synchronisation or an allocation)",
                      cudaGetErrorString(ended));
  }
  size_t nodes = 0;
  cudaGraphGetNodes(graph, nullptr, &nodes);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (made != cudaSuccess) {
    cudaGetLastError();
    return make_error(ErrorCode::kInternal, "cudaGraphInstantiate failed: {}",
                      cudaGetErrorString(made));
  }
  DeviceGraph g;
  g.exec_ = std::shared_ptr<void>(exec, [](void* e) {
    cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(e));
  });
  g.num_nodes_ = nodes;
  return g;
}

Status DeviceGraph::replay(const ExecContext& ctx) const {
  if (!exec_) return make_error(ErrorCode::kInternal, "replay of an empty DeviceGraph");
  VLLM_CUDA_RETURN_IF_ERROR(
      cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_.get()), stream_of(ctx)));
  return Status::ok();
}

Expected<HostStaging> HostStaging::create(const ExecContext& ctx, size_t bytes) {
  VLLM_RETURN_IF_ERROR(require_cuda(ctx, "page-locked staging"));
  cuda::DeviceGuard guard(ctx.device);
  VLLM_RETURN_IF_ERROR(guard.status());
  HostStaging s;
  s.bytes_ = bytes;
  void* host = nullptr;
  VLLM_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&host, bytes > 0 ? bytes : 1, cudaHostAllocDefault));
  s.host_ = std::shared_ptr<void>(host, [](void* p) { cudaFreeHost(p); });
  cudaEvent_t event = nullptr;
  VLLM_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  s.copied_ = std::shared_ptr<void>(event, [](void* e) {
    cudaEventDestroy(static_cast<cudaEvent_t>(e));
  });
  VLLM_ASSIGN_OR_RETURN(s.device_, Tensor::try_empty({static_cast<int64_t>(bytes > 0 ? bytes : 1)},
                                                     DType::kU8, ctx.device));
  return s;
}

Status HostStaging::wait_writable() const {
  VLLM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(static_cast<cudaEvent_t>(copied_.get())));
  return Status::ok();
}

Status HostStaging::upload(const ExecContext& ctx, size_t bytes) {
  if (bytes > bytes_) {
    return make_error(ErrorCode::kInternal, "staging upload of {} bytes into {}", bytes, bytes_);
  }
  if (bytes == 0) return Status::ok();
  VLLM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device_.data_ptr(), host_.get(), bytes,
                                            cudaMemcpyHostToDevice, stream_of(ctx)));
  VLLM_CUDA_RETURN_IF_ERROR(
      cudaEventRecord(static_cast<cudaEvent_t>(copied_.get()), stream_of(ctx)));
  return Status::ok();
}

void device_profiler_start() { cudaProfilerStart(); }
void device_profiler_stop() { cudaProfilerStop(); }

#else  // !VLLM_WITH_CUDA

void device_profiler_start() {}
void device_profiler_stop() {}

Expected<DeviceGraph> DeviceGraph::capture(const ExecContext&, const std::function<Status()>&) {
  return make_error(ErrorCode::kUnsupported, "CUDA graphs need a build with the CUDA backend");
}
Status DeviceGraph::replay(const ExecContext&) const {
  return make_error(ErrorCode::kUnsupported, "CUDA graphs need a build with the CUDA backend");
}
Expected<HostStaging> HostStaging::create(const ExecContext&, size_t) {
  return make_error(ErrorCode::kUnsupported, "page-locked staging needs the CUDA backend");
}
Status HostStaging::wait_writable() const { return Status::ok(); }
Status HostStaging::upload(const ExecContext&, size_t) {
  return make_error(ErrorCode::kUnsupported, "page-locked staging needs the CUDA backend");
}

#endif

}  // namespace vllm
