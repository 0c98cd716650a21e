// CUDA errors as Status, the cudaMalloc-backed DeviceAllocator and host<->device copies.
// See runtime.h for the contract; everything here is host code.
#include "backend/cuda/runtime.h"

#include <cublasLt.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include "base/logging.h"

namespace vllm::cuda {
namespace {

class CudaAllocator final : public DeviceAllocator {
 public:
  Expected<void*> allocate(size_t nbytes, int device_index) override {
    DeviceGuard guard(Device::cuda(device_index));
    VLLM_RETURN_IF_ERROR(guard.status());
    void* ptr = nullptr;
    // A zero-byte tensor still gets a distinct, freeable pointer.
    cudaError_t error = cudaMalloc(&ptr, nbytes == 0 ? 1 : nbytes);
    if (error != cudaSuccess) {
      return cuda_status(error, "cudaMalloc")
          .with_context(fmt::format("allocating {} bytes on cuda:{}", nbytes, device_index));
    }
    return ptr;
  }

  void deallocate(void* ptr, int device_index) override {
    DeviceGuard guard(Device::cuda(device_index));
    cudaError_t error = cudaFree(ptr);
    if (error != cudaSuccess && error != cudaErrorCudartUnloading) {
      VLLM_LOG_ERROR("cudaFree on cuda:{} failed: {}", device_index, cudaGetErrorString(error));
    }
  }
};

Status check_contiguous(const Tensor& t, const char* what) {
  if (!t.defined()) {
    return make_error(ErrorCode::kInvalidArgument, "{}: the tensor is undefined", what);
  }
  if (!t.is_contiguous()) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} is not contiguous", what, t.to_string());
  }
  return Status::ok();
}

}  // namespace

Status cuda_status(cudaError_t error, const char* call) {
  if (error == cudaSuccess) return Status::ok();
  // A failed runtime call (cudaMalloc out of memory, say) is also the thread's "last error":
  // it is reported here, so clear it, or the next check_launch would report it again as a
  // failed kernel launch. (Sticky errors stay whatever this does.)
  (void)cudaGetLastError();
  ErrorCode code = ErrorCode::kInternal;
  if (error == cudaErrorMemoryAllocation) code = ErrorCode::kResourceExhausted;
  if (error == cudaErrorNoDevice || error == cudaErrorInsufficientDriver ||
      error == cudaErrorNoKernelImageForDevice) {
    code = ErrorCode::kUnsupported;
  }
  return make_error(code, "{}: {} ({})", call, cudaGetErrorString(error), cudaGetErrorName(error));
}

Status check_launch(const char* kernel_name) {
  cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess) return Status::ok();
  return cuda_status(error, "kernel launch").with_context(kernel_name);
}

bool pdl_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("VLLM_CUDA_PDL");
    return value == nullptr || std::string_view(value) != "0";
  }();
  return enabled;
}

bool pdl_early_loads() {
  static const bool enabled = [] {
    const char* value = std::getenv("VLLM_CUDA_PDL_EARLY_LOADS");
    return value == nullptr || std::string_view(value) != "0";
  }();
  return enabled;
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // so a later check_launch does not report this error
    return 0;
  }
  return count;
}

int multiprocessor_count(int device_index) {
  constexpr int kMaxDevices = 64;
  static std::array<std::atomic<int>, kMaxDevices> cache{};  // 0: not read yet
  const bool cacheable = device_index >= 0 && device_index < kMaxDevices;
  if (cacheable) {
    int known = cache[static_cast<size_t>(device_index)].load(std::memory_order_relaxed);
    if (known > 0) return known;
  }
  int count = 0;
  if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device_index) != cudaSuccess ||
      count <= 0) {
    (void)cudaGetLastError();
    return 1;
  }
  if (cacheable) cache[static_cast<size_t>(device_index)].store(count, std::memory_order_relaxed);
  return count;
}

bool runs_sm90a(int device_index) {
  constexpr int kMaxDevices = 64;
  // 0: not read yet, 1: no, 2: yes.
  static std::array<std::atomic<int>, kMaxDevices> cache{};
  const bool cacheable = device_index >= 0 && device_index < kMaxDevices;
  if (cacheable) {
    const int known = cache[static_cast<size_t>(device_index)].load(std::memory_order_relaxed);
    if (known != 0) return known == 2;
  }
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_index) !=
          cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_index) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  const bool yes = major == 9 && minor == 0;
  if (cacheable)
    cache[static_cast<size_t>(device_index)].store(yes ? 2 : 1, std::memory_order_relaxed);
  return yes;
}

Status init() {
  static std::once_flag once;
  static Status result;
  std::call_once(once, [] {
    int count = 0;
    cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess || count == 0) {
      (void)cudaGetLastError();
      result = make_error(ErrorCode::kUnsupported,
                          "no usable CUDA device ({}); check that an NVIDIA GPU and driver are "
                          "present (nvidia-smi) and that CUDA_VISIBLE_DEVICES does not hide it",
                          error != cudaSuccess ? cudaGetErrorString(error) : "0 devices found");
      return;
    }
    static CudaAllocator allocator;
    register_device_allocator(DeviceType::kCUDA, &allocator);
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
      VLLM_LOG_INFO("CUDA: {} device(s); cuda:0 is {} (sm_{}{}, {} SMs, {:.1f} GiB); cuBLASLt {}",
                    count, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                    static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0),
                    cublasLtGetVersion());
    }
  });
  return result;
}

DeviceGuard::DeviceGuard(Device device) {
  if (!device.is_cuda()) {
    status_ = make_error(ErrorCode::kInvalidArgument, "DeviceGuard: {} is not a CUDA device",
                         device.to_string());
    return;
  }
  int current = 0;
  status_ = cuda_status(cudaGetDevice(&current), "cudaGetDevice");
  if (!status_.is_ok()) return;
  if (current == device.index) return;
  status_ = cuda_status(cudaSetDevice(device.index), "cudaSetDevice");
  if (status_.is_ok()) previous_ = current;
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

Expected<Tensor> copy_to_device(const Tensor& cpu, Device device) {
  if (!cpu.defined() || !cpu.device().is_cpu()) {
    return make_error(ErrorCode::kInvalidArgument, "copy_to_device: source {} is not a CPU tensor",
                      cpu.to_string());
  }
  if (!device.is_cuda()) {
    return make_error(ErrorCode::kInvalidArgument, "copy_to_device: target {} is not CUDA",
                      device.to_string());
  }
  Tensor source = cpu.is_contiguous() ? cpu : cpu.clone();
  VLLM_ASSIGN_OR_RETURN(Tensor gpu, Tensor::try_empty(source.shape(), source.dtype(), device));
  VLLM_RETURN_IF_ERROR(copy_into_device(source, gpu));
  return gpu;
}

Status copy_into_device(const Tensor& cpu, Tensor& gpu) {
  VLLM_RETURN_IF_ERROR(check_contiguous(cpu, "copy_into_device source"));
  VLLM_RETURN_IF_ERROR(check_contiguous(gpu, "copy_into_device target"));
  if (!cpu.device().is_cpu() || !gpu.device().is_cuda()) {
    return make_error(ErrorCode::kInvalidArgument, "copy_into_device: {} -> {} is not CPU -> CUDA",
                      cpu.to_string(), gpu.to_string());
  }
  if (cpu.dtype() != gpu.dtype() || cpu.numel() != gpu.numel()) {
    return make_error(ErrorCode::kInvalidArgument, "copy_into_device: {} does not fit {}",
                      cpu.to_string(), gpu.to_string());
  }
  if (cpu.nbytes() == 0) return Status::ok();
  VLLM_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(gpu.data_ptr(), cpu.data_ptr(), cpu.nbytes(), cudaMemcpyHostToDevice));
  return Status::ok();
}

Expected<Tensor> copy_to_host(const Tensor& gpu) {
  VLLM_RETURN_IF_ERROR(check_contiguous(gpu, "copy_to_host source"));
  if (!gpu.device().is_cuda()) {
    return make_error(ErrorCode::kInvalidArgument, "copy_to_host: source {} is not a CUDA tensor",
                      gpu.to_string());
  }
  VLLM_ASSIGN_OR_RETURN(Tensor cpu, Tensor::try_empty(gpu.shape(), gpu.dtype(), Device::cpu()));
  if (gpu.nbytes() == 0) return cpu;
  VLLM_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(cpu.data_ptr(), gpu.data_ptr(), gpu.nbytes(), cudaMemcpyDeviceToHost));
  return cpu;
}

}  // namespace vllm::cuda
