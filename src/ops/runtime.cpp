// DeviceRuntime and ExecContext::alloc (exec_context.h).
#include <utility>

#include "backend/cpu/ops.h"
#include "backend/cpu/weight_memory.h"
#include "base/logging.h"
#include "ops/exec_context.h"
#include "parallel/communicator.h"

#if VLLM_WITH_CUDA
#include <cuda_runtime_api.h>

#include "backend/cuda/gemm.cuh"
#include "backend/cuda/runtime.h"
#endif

namespace vllm {

Expected<Tensor> ExecContext::alloc(const Shape& shape, DType dtype) const {
  if (workspace != nullptr) return workspace->allocate(shape, dtype);
  return Tensor::try_empty(shape, dtype, device);
}

int ExecContext::tp_rank() const {
  return comm != nullptr ? comm->rank() : 0;
}
int ExecContext::tp_size() const {
  return comm != nullptr ? comm->world_size() : 1;
}

void DeviceRuntime::set_communicator(std::shared_ptr<parallel::Communicator> comm) {
  comm_ = std::move(comm);
  context_.comm = comm_.get();
}

bool cuda_available() {
#if VLLM_WITH_CUDA
  return cuda::device_count() > 0;
#else
  return false;
#endif
}

DeviceMemory device_memory(Device device) {
  DeviceMemory m;
#if VLLM_WITH_CUDA
  if (device.is_cuda() && device.index < cuda::device_count()) {
    cuda::DeviceGuard guard(device);
    if (!guard.status().is_ok() || cudaMemGetInfo(&m.free_bytes, &m.total_bytes) != cudaSuccess) {
      cudaGetLastError();
      return DeviceMemory{};
    }
  }
#endif
  return m;
}

Expected<std::unique_ptr<DeviceRuntime>> DeviceRuntime::create(Device device, DType act_dtype) {
  std::unique_ptr<DeviceRuntime> rt(new DeviceRuntime());
  rt->context_.device = device;
  rt->context_.act_dtype = act_dtype;
  if (device.is_cpu()) {
    if (act_dtype != DType::kF32) {
      return make_error(ErrorCode::kUnsupported,
                        "the CPU backend computes in float32; --dtype {} is for CUDA devices",
                        dtype_name(act_dtype));
    }
    cpu::pin_blas_to_one_thread();
    if (cpu::weights_in_huge_pages()) {
      rt->weight_arena_ = std::make_shared<cpu::WeightArena>();
      rt->context_.weight_arena = rt->weight_arena_.get();
    }
  } else if (device.is_cuda()) {
#if VLLM_WITH_CUDA
    if (act_dtype != DType::kBF16 && act_dtype != DType::kF32) {
      return make_error(ErrorCode::kUnsupported, "CUDA activations are bfloat16 or float32, not {}",
                        dtype_name(act_dtype));
    }
    VLLM_RETURN_IF_ERROR(cuda::init());
    if (device.index >= cuda::device_count()) {
      return make_error(ErrorCode::kInvalidArgument, "{} does not exist ({} CUDA devices)",
                        device.to_string(), cuda::device_count());
    }
    cuda::DeviceGuard guard(device);
    VLLM_RETURN_IF_ERROR(guard.status());
    cudaStream_t stream = nullptr;
    VLLM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    rt->context_.stream = stream;
    VLLM_ASSIGN_OR_RETURN(auto blas, cuda::BlasContext::create(device));
    rt->context_.blas = blas.get();
    rt->blas_ = std::shared_ptr<cuda::BlasContext>(std::move(blas));
#else
    return make_error(ErrorCode::kUnsupported,
                      "this build has no CUDA backend (configure with -DVLLM_CUDA=ON); use "
                      "--device cpu");
#endif
  } else {
    return make_error(ErrorCode::kUnsupported, "cannot run a model on device {}",
                      device.to_string());
  }
  rt->workspace_ = std::make_unique<Workspace>(device);
  rt->context_.workspace = rt->workspace_.get();
  return rt;
}

DeviceRuntime::~DeviceRuntime() {
#if VLLM_WITH_CUDA
  if (context_.stream != nullptr) {
    cudaStreamSynchronize(static_cast<cudaStream_t>(context_.stream));
    blas_.reset();
    workspace_.reset();
    cudaStreamDestroy(static_cast<cudaStream_t>(context_.stream));
  }
#endif
}

Status DeviceRuntime::synchronize() const {
#if VLLM_WITH_CUDA
  if (context_.stream != nullptr) {
    VLLM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(static_cast<cudaStream_t>(context_.stream)));
  }
#endif
  return Status::ok();
}

}  // namespace vllm
