// Helpers for the CUDA parity tests that move tensors: a fixture that skips without a GPU,
// uploads that report failure instead of aborting, downloads decoded to f32, a bitwise
// comparison, and operands that are column slices of wider device buffers.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>

#include "backend/cuda/runtime.h"
#include "cuda_test_util.h"
#include "tensor/tensor.h"

namespace vllm::cuda_test {

// Base fixture: every test is skipped (not failed) on a machine without a CUDA device.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: CUDA parity tests skipped";
    Status status = cuda::init();
    ASSERT_TRUE(status.is_ok()) << status.to_string();
  }
};

// A device copy of a CPU tensor; on failure, a test failure and an undefined tensor (which
// the op under test then refuses).
inline Tensor to_device(const Tensor& cpu) {
  auto gpu = cuda::copy_to_device(cpu);
  if (!gpu) {
    ADD_FAILURE() << "copy_to_device(" << cpu.to_string() << "): " << gpu.status().to_string();
    return Tensor();
  }
  return *gpu;
}

// A contiguous CPU copy of a contiguous CUDA tensor, in its own dtype (undefined on failure).
inline Tensor to_host(const Tensor& gpu) {
  auto cpu = cuda::copy_to_host(gpu);
  if (!cpu) {
    ADD_FAILURE() << "copy_to_host(" << gpu.to_string() << "): " << cpu.status().to_string();
    return Tensor();
  }
  return *cpu;
}

// The same, decoded to F32 (F32/BF16/F16 tensors).
inline Tensor to_host_f32(const Tensor& gpu) {
  Tensor cpu = to_host(gpu);
  return cpu.defined() ? to_f32(cpu) : cpu;
}

// Bitwise-equal F32 tensors of one shape, NaN equal to NaN: for ops that move values without
// arithmetic (copies, conversions, zeroing) and for elements an op must leave untouched.
inline ::testing::AssertionResult same_values(const Tensor& got, const Tensor& ref) {
  if (!got.defined() || got.shape() != ref.shape() || got.dtype() != DType::kF32 ||
      ref.dtype() != DType::kF32) {
    return ::testing::AssertionFailure()
           << "cannot compare " << got.to_string() << " with " << ref.to_string();
  }
  Tensor g = got.is_contiguous() ? got : got.clone();
  Tensor r = ref.is_contiguous() ? ref : ref.clone();
  const float* gp = g.data<float>();
  const float* rp = r.data<float>();
  int64_t mismatches = 0, first = -1;
  for (int64_t i = 0; i < g.numel(); ++i) {
    const bool equal =
        (std::isnan(gp[i]) && std::isnan(rp[i])) || std::memcmp(&gp[i], &rp[i], sizeof(float)) == 0;
    if (!equal && mismatches++ == 0) first = i;
  }
  if (mismatches > 0) {
    return ::testing::AssertionFailure()
           << mismatches << " of " << g.numel() << " elements differ (first at flat index " << first
           << ": " << gp[first] << ", expected " << rp[first] << ")";
  }
  return ::testing::AssertionSuccess();
}

// Where a [rows, cols] operand sits in its buffer: columns [offset, offset + cols) of
// [rows, cols + pad].
struct Layout {
  int64_t offset = 0;
  int64_t pad = 0;
  std::string name() const { return fmt::format("from column {} of {} extra", offset, pad); }
};
inline const Layout kContiguous{0, 0};
inline const Layout kAligned{8, 16};   // 16-byte aligned rows whenever cols * 2 bytes is
inline const Layout kUnaligned{1, 3};  // shifted by one element: the element-wise path

struct Operand {
  Tensor host;    // the whole buffer (CPU)
  Tensor device;  // the whole buffer (GPU)
  Tensor view;    // the [rows, cols] operand inside `device`
  Layout layout;
  int64_t cols = 0;

  // The operand's current values, decoded to F32 (input: as uploaded; output: downloaded).
  Tensor input_f32() const {
    return to_f32(host).slice(1, layout.offset, layout.offset + cols).clone();
  }
  Tensor result_f32() const {
    Tensor all = to_host_f32(device);
    return all.defined() ? all.slice(1, layout.offset, layout.offset + cols).clone() : all;
  }
  // The buffer's columns outside the operand still hold their initial values.
  ::testing::AssertionResult outside_untouched() const {
    Tensor now = to_host_f32(device);
    if (!now.defined()) return ::testing::AssertionFailure() << "download failed";
    Tensor before = to_f32(host);
    const int64_t width = cols + layout.pad;
    for (auto [begin, end] :
         {std::pair{int64_t{0}, layout.offset}, std::pair{layout.offset + cols, width}}) {
      if (begin == end) continue;
      auto r = same_values(now.slice(1, begin, end).clone(), before.slice(1, begin, end).clone());
      if (!r) return r << " (columns [" << begin << ", " << end << ") were written)";
    }
    return ::testing::AssertionSuccess();
  }
};

inline Operand make_operand(Tensor host, Layout layout, int64_t cols) {
  Operand o;
  o.host = std::move(host);
  o.device = to_device(o.host);
  o.layout = layout;
  o.cols = cols;
  if (o.device.defined()) o.view = o.device.slice(1, layout.offset, layout.offset + cols);
  return o;
}

inline Operand random_operand(int64_t rows, int64_t cols, DType dtype, Layout layout,
                              std::mt19937& rng, float mean = 0.0f, float stddev = 1.0f) {
  return make_operand(random_tensor({rows, cols + layout.pad}, dtype, rng, mean, stddev), layout,
                      cols);
}

inline Operand nan_operand(int64_t rows, int64_t cols, DType dtype, Layout layout) {
  return make_operand(fill_nan({rows, cols + layout.pad}, dtype), layout, cols);
}

}  // namespace vllm::cuda_test
