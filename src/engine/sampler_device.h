// The sampler's path for logits that live on a GPU. Internal to the engine: Sampler
// (sampler.h) owns one and calls it from sample(); sampler_cuda.cpp implements it in builds
// with VLLM_CUDA (the functions below exist only there, and sampler.cpp calls them only
// under VLLM_WITH_CUDA).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "engine/sampler.h"
#include "tensor/tensor.h"

namespace vllm {

class DeviceRowSampler {
 public:
  virtual ~DeviceRowSampler() = default;
  virtual Device device() const = 0;
  // Same contract as Sampler::sample, with the step's draws already taken (one per row).
  virtual std::vector<SampleResult> sample(const Tensor& logits,
                                           std::span<const SamplingRequestState> requests,
                                           std::span<const double> draws) = 0;
};

// A sampler for logits on `device` (a CUDA device), queued on `stream` (a cudaStream_t;
// nullptr: the legacy default stream).
std::unique_ptr<DeviceRowSampler> make_device_row_sampler(Device device, void* stream);

// A CPU copy of GPU logits F32 [rows, vocab] (rows may be strided).
Tensor logits_to_host(const Tensor& logits);

}  // namespace vllm
