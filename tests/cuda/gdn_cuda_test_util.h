// Helpers shared by the Gated DeltaNet CUDA tests and their timing mode: varlen batches with
// random distinct state slots (host form for the CPU ops, device form for the CUDA ops),
// device copies that abort on failure, row gathering for chunked-prefill schedules, and the
// tests' tolerances and fixture.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "backend/cpu/gdn.h"
#include "backend/cuda/gdn.cuh"
#include "backend/cuda/runtime.h"
#include "cuda_test_util.h"

namespace vllm::gdn_test {

constexpr float kNormEps = 1e-6f;
constexpr cudaStream_t kStream = nullptr;  // the legacy default stream: copies wait for it
constexpr double kF32Tolerance = 1e-5;
constexpr double kBf16Tolerance = 1e-2;
// The delta rule in F32: the kernel sums each column's dot products in a different order than
// the CPU loop (four row groups of partial sums, then shuffles), a few f32 ulps per token,
// and the recurrence carries that through up to 1024 tokens. The update
// S <- exp(g) S (I - beta k k^T) + ... does not amplify it (exp(g) <= 1, k unit length), so it
// grows at most like a sum of independent roundings: the kernel's summation order, run on
// the CPU, differs from the CPU op by 2.4e-7 at 1024 tokens and Dk = 128. The plain F32 bound
// of 1e-5 holds with a wide margin.
constexpr double kRuleF32Tolerance = 1e-5;

inline double tolerance(DType act) {
  return act == DType::kF32 ? kF32Tolerance : kBf16Tolerance;
}

inline constexpr DType kActs[] = {DType::kF32, DType::kBF16};

// Parity tests on the GPU: skipped (not failed) on a machine without one.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: CUDA parity tests skipped";
    Status status = cuda::init();
    ASSERT_TRUE(status.is_ok()) << status.to_string();
  }
  std::mt19937 rng_{20250301};
};

#define GDN_ASSERT_OK(expr)                              \
  do {                                                   \
    ::vllm::Status status_ = (expr);                     \
    ASSERT_TRUE(status_.is_ok()) << status_.to_string(); \
  } while (0)

// Requests' rows and state slots on the host.
struct Batch {
  std::vector<int32_t> loc{0};
  std::vector<int32_t> slots;
  int32_t max_len = 0;

  void add(int32_t len, int32_t slot) {
    loc.push_back(loc.back() + len);
    slots.push_back(slot);
    max_len = std::max(max_len, len);
  }
  cpu::GdnBatch cpu() const { return {loc, slots}; }
  int64_t tokens() const { return loc.back(); }
  int64_t size() const { return static_cast<int64_t>(slots.size()); }
};

// Requests of `lens` rows on distinct random slots among num_slots.
inline Batch make_batch(const std::vector<int32_t>& lens, int64_t num_slots, std::mt19937& rng) {
  VLLM_CHECK(static_cast<int64_t>(lens.size()) <= num_slots);
  std::vector<int32_t> slots(static_cast<size_t>(num_slots));
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  Batch b;
  for (size_t r = 0; r < lens.size(); ++r) b.add(lens[r], slots[r]);
  return b;
}

// A device copy of a CPU tensor; aborts with the error on failure (out of device memory).
inline Tensor dev(const Tensor& cpu) {
  return cuda::copy_to_device(cpu).value();
}

// A contiguous F32 host copy of a contiguous device tensor.
inline Tensor host_f32(const Tensor& gpu) {
  return cuda_test::to_f32(cuda::copy_to_host(gpu).value());
}

inline Tensor i32_tensor(const std::vector<int32_t>& values) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::kI32);
  if (!values.empty()) std::memcpy(t.data_ptr(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

// A batch on the device; holds the tensors the view points into.
struct DeviceBatch {
  Tensor loc;
  Tensor slots;
  cuda::GdnBatch view;
};

inline DeviceBatch upload(const Batch& b) {
  DeviceBatch d;
  d.loc = dev(i32_tensor(b.loc));
  d.slots = dev(i32_tensor(b.slots));
  d.view = cuda::GdnBatch{d.loc, d.slots, b.max_len};
  // The tests copy results to the host between calls on the same states, so nothing the next
  // call reads is still being written: the kernels' early loads run as in a model step.
  d.view.states_settled = true;
  return d;
}

// The delta rule's workspace for these arguments (undefined when it needs none), filled with
// 0xff bytes (NaN in BF16 and F32) so that a read of anything the kernels did not write shows.
inline Tensor rule_workspace(const Tensor& q, const Tensor& state, const cuda::GdnBatch& batch,
                             const cuda::GatedDeltaRuleParams& params) {
  const size_t bytes = cuda::gated_delta_rule_workspace_size(q, state, batch, params);
  if (bytes == 0) return Tensor();
  Tensor ws = Tensor::try_empty({static_cast<int64_t>(bytes)}, DType::kU8, Device::cuda()).value();
  VLLM_CHECK(cudaMemset(ws.data_ptr(), 0xff, bytes) == cudaSuccess);
  return ws;
}

// Rows [begin, end) of a 2-D CPU tensor.
struct RowRange {
  const Tensor* t;
  int64_t begin;
  int64_t end;
};

// The given row ranges stacked into one contiguous CPU tensor of the same dtype.
inline Tensor gather_rows(const std::vector<RowRange>& parts) {
  VLLM_CHECK(!parts.empty());
  const Tensor& first = *parts.front().t;
  int64_t rows = 0;
  for (const RowRange& p : parts) rows += p.end - p.begin;
  Tensor out = Tensor::empty({rows, first.size(1)}, first.dtype());
  const size_t row_bytes = static_cast<size_t>(first.size(1)) * first.element_size();
  auto* dst = static_cast<char*>(out.data_ptr());
  for (const RowRange& p : parts) {
    VLLM_CHECK(p.t->is_contiguous() && p.t->dtype() == first.dtype() &&
               p.t->size(1) == first.size(1));
    const auto* src = static_cast<const char*>(p.t->data_ptr());
    const size_t bytes = static_cast<size_t>(p.end - p.begin) * row_bytes;
    if (bytes > 0) std::memcpy(dst, src + static_cast<size_t>(p.begin) * row_bytes, bytes);
    dst += bytes;
  }
  return out;
}

}  // namespace vllm::gdn_test
