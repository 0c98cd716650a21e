// The CUDA backend's runtime glue: CUDA errors as Status, device memory for Tensor, and the
// explicit host<->device copies.
//
// Nothing here runs at static-initialisation time: a program that may use the GPU calls
// vllm::cuda::init() once, which checks that a device is there and registers the cudaMalloc
// allocator, so Tensor::empty(..., Device::cuda()) works afterwards. Copies are synchronous
// (cudaMemcpy); they are for loading weights and for tests, not for the per-step path.
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "tensor/tensor.h"

namespace vllm::cuda {

// ---- Errors ---------------------------------------------------------------------------
// An ok Status for cudaSuccess, otherwise kInternal (kResourceExhausted for out-of-memory,
// kUnsupported for a missing device or driver) naming the call and CUDA's error string:
// "cudaMalloc(&ptr, nbytes): out of memory (cudaErrorMemoryAllocation)".
Status cuda_status(cudaError_t error, const char* call);

// Returns the Status from the enclosing function when the CUDA call fails.
#define VLLM_CUDA_RETURN_IF_ERROR(call) \
  VLLM_RETURN_IF_ERROR(::vllm::cuda::cuda_status((call), #call))

// After a kernel launch: a launch error (bad configuration, no kernel image for this GPU)
// as a Status naming the kernel.
Status check_launch(const char* kernel_name);

// Whether kernels are launched with programmatic dependent launch (common.cuh launch_pdl):
// on unless the environment sets VLLM_CUDA_PDL=0 (read once).
bool pdl_enabled();

// Whether kernels that may (the GDN conv and delta rule at decode) issue their loads of data no
// recent kernel wrote -- states of an earlier step, the step's host-copied batch arrays --
// before pdl_wait: on unless the environment sets VLLM_CUDA_PDL_EARLY_LOADS=0, a switch for
// measurements (read once).
bool pdl_early_loads();

// ---- Setup ----------------------------------------------------------------------------
// Checks that at least one CUDA device is usable and registers the device allocator for
// DeviceType::kCUDA. Safe to call again (later calls return the first call's result).
// No device or no driver: kUnsupported saying so.
Status init();

// Number of usable CUDA devices; 0 when there is no device or no driver (never fails).
int device_count();

// Streaming multiprocessors of cuda:`device_index`, read once and cached (1 if unreadable).
int multiprocessor_count(int device_index);

// Whether cuda:`device_index` runs the sm_90a machine code of the sm90a/ kernels (Hopper's
// wgmma): compute capability 9.0 exactly. Read once and cached; false if unreadable.
bool runs_sm90a(int device_index);

// Makes `device` current for the lifetime of the guard, then restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(Device device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  // The cudaSetDevice result: not ok if the device does not exist.
  const Status& status() const { return status_; }

 private:
  int previous_ = -1;
  Status status_;
};

// ---- Copies ---------------------------------------------------------------------------
// A new contiguous tensor on `device` holding `cpu`'s elements (a non-contiguous CPU tensor
// is made contiguous first). Needs init().
Expected<Tensor> copy_to_device(const Tensor& cpu, Device device = Device::cuda());
// A new contiguous CPU tensor holding a CUDA tensor's elements. The source must be
// contiguous. Synchronous: waits for work queued before it on the legacy default stream.
Expected<Tensor> copy_to_host(const Tensor& gpu);
// Copies a contiguous CPU tensor into an existing CUDA tensor of the same dtype and element
// count (a poisoned output buffer, a persistent input buffer).
Status copy_into_device(const Tensor& cpu, Tensor& gpu);

}  // namespace vllm::cuda
