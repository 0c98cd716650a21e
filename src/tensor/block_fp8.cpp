#include "tensor/block_fp8.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "base/float_convert.h"
#include "base/thread_pool.h"

namespace vllm {
namespace {

inline float element(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(data)[i];
    case DType::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
    default:
      return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
  }
}

std::string index_string(int64_t flat, int64_t experts, int64_t rows, int64_t cols) {
  const int64_t k = flat % cols, n = flat / cols % rows, e = flat / (cols * rows);
  return experts > 1 ? fmt::format("[{}, {}, {}]", e, n, k) : fmt::format("[{}, {}]", n, k);
}

}  // namespace

Expected<LinearWeight> quantize_fp8_blocks(const Tensor& w, WeightBlock block,
                                           std::string_view name) {
  if (!w.defined() || !w.device().is_cpu() || !w.is_contiguous()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cannot quantize '{}' to FP8: it must be a contiguous CPU tensor", name);
  }
  if (w.dtype() != DType::kF32 && w.dtype() != DType::kBF16 && w.dtype() != DType::kF16) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cannot quantize '{}' to FP8: it is {}, expected F32, BF16 or F16", name,
                      dtype_name(w.dtype()));
  }
  if (w.ndim() != 2 && w.ndim() != 3) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cannot quantize '{}' {} to FP8: expected [N, K] or [E, N, K]", name,
                      shape_to_string(w.shape()));
  }
  if (block.n <= 0 || block.k <= 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cannot quantize '{}' to FP8 blocks of {}x{}: the block must be positive",
                      name, block.n, block.k);
  }
  const int64_t experts = w.ndim() == 3 ? w.size(0) : 1;
  const int64_t rows = w.size(-2), cols = w.size(-1);
  const Shape scale_shape = fp8_scale_shape(w.shape(), block);
  const int64_t row_blocks = scale_shape[scale_shape.size() - 2];
  const int64_t col_blocks = scale_shape[scale_shape.size() - 1];
  VLLM_ASSIGN_OR_RETURN(Tensor q, Tensor::try_empty(w.shape(), DType::kF8E4M3));
  VLLM_ASSIGN_OR_RETURN(Tensor s, Tensor::try_empty(scale_shape, DType::kF32));
  const void* src = w.numel() > 0 ? w.data_ptr() : nullptr;
  uint8_t* dst = w.numel() > 0 ? q.data<uint8_t>() : nullptr;
  float* scales = s.numel() > 0 ? s.data<float>() : nullptr;
  const DType dtype = w.dtype();
  // The first (lowest) flat index of a non-finite value, so the error does not depend on
  // which thread saw one first.
  std::atomic<int64_t> bad{std::numeric_limits<int64_t>::max()};

  // One task per block row of one expert: its col_blocks amaxes, then its values.
  parallel_for(0, experts * row_blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> amax(static_cast<size_t>(col_blocks)), inv(amax.size());
    for (int64_t task = begin; task < end; ++task) {
      const int64_t e = task / row_blocks, rb = task % row_blocks;
      const int64_t n0 = rb * block.n, n1 = std::min(rows, n0 + block.n);
      const int64_t base = e * rows * cols;
      std::fill(amax.begin(), amax.end(), 0.0f);
      for (int64_t n = n0; n < n1; ++n) {
        for (int64_t k = 0; k < cols; ++k) {
          const int64_t i = base + n * cols + k;
          const float x = element(src, dtype, i);
          if (!std::isfinite(x)) {
            int64_t seen = bad.load();
            while (i < seen && !bad.compare_exchange_weak(seen, i)) {
            }
            continue;
          }
          float& m = amax[static_cast<size_t>(k / block.k)];
          m = std::max(m, std::fabs(x));
        }
      }
      float* srow = scales + (e * row_blocks + rb) * col_blocks;
      for (int64_t cb = 0; cb < col_blocks; ++cb) {
        srow[cb] = fp8_block_scale_inv(amax[static_cast<size_t>(cb)]);
        inv[static_cast<size_t>(cb)] = 1.0f / srow[cb];
      }
      for (int64_t n = n0; n < n1; ++n) {
        for (int64_t k = 0; k < cols; ++k) {
          const int64_t i = base + n * cols + k;
          dst[i] = f32_to_fp8e4m3(element(src, dtype, i) * inv[static_cast<size_t>(k / block.k)]);
        }
      }
    }
  });
  if (const int64_t i = bad.load(); i != std::numeric_limits<int64_t>::max()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cannot quantize '{}' to FP8: element {} is {}, which has no e4m3 value",
                      name, index_string(i, experts, rows, cols), element(src, dtype, i));
  }
  return LinearWeight(std::move(q), std::move(s), block);
}

Expected<Tensor> dequantize_fp8_blocks(const LinearWeight& w) {
  VLLM_RETURN_IF_ERROR(check_linear_weight("dequantize_fp8_blocks: weight", w));
  if (!w.weight.device().is_cpu()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "dequantize_fp8_blocks: the weight is on {}, expected the CPU",
                      w.weight.device().to_string());
  }
  const Tensor src = w.weight.is_contiguous() ? w.weight : w.weight.clone();
  VLLM_ASSIGN_OR_RETURN(Tensor out, Tensor::try_empty(src.shape(), DType::kF32));
  const int64_t total = src.numel();
  if (total == 0) return out;
  float* dst = out.data<float>();
  if (!w.is_fp8()) {
    for (int64_t i = 0; i < total; ++i) dst[i] = element(src.data_ptr(), src.dtype(), i);
    return out;
  }
  const Tensor scales = w.scale_inv.is_contiguous() ? w.scale_inv : w.scale_inv.clone();
  const int64_t rows = src.size(-2), cols = src.size(-1);
  const int64_t row_blocks = scales.size(-2), col_blocks = scales.size(-1);
  const uint8_t* q = src.data<uint8_t>();
  const float* s = scales.data<float>();
  for (int64_t i = 0; i < total; ++i) {
    const int64_t k = i % cols, n = i / cols % rows, e = i / (cols * rows);
    const float scale = s[(e * row_blocks + n / w.block.n) * col_blocks + k / w.block.k];
    dst[i] = fp8e4m3_to_f32(q[i]) * scale;
  }
  return out;
}

Expected<Fp8TokenGroups> quantize_fp8_token_groups(const Tensor& x, int64_t group,
                                                   std::string_view name) {
  if (!x.defined() || !x.device().is_cpu() || x.ndim() != 2 ||
      (x.dtype() != DType::kF32 && x.dtype() != DType::kBF16)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cannot quantize '{}' to FP8 token groups: expected a CPU F32 or BF16 "
                      "[M, K] tensor, got {}",
                      name, x.defined() ? x.to_string() : std::string("an undefined tensor"));
  }
  if (group <= 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cannot quantize '{}' to FP8 token groups of {}: the group must be positive",
                      name, group);
  }
  const int64_t rows = x.size(0), cols = x.size(1);
  if (cols > 1 && x.stride(1) != 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cannot quantize '{}' {} to FP8 token groups: its rows must be contiguous",
                      name, x.to_string());
  }
  const int64_t groups = (cols + group - 1) / group;
  Fp8TokenGroups out;
  out.group = group;
  VLLM_ASSIGN_OR_RETURN(out.q, Tensor::try_empty({rows, cols}, DType::kF8E4M3));
  VLLM_ASSIGN_OR_RETURN(out.scales, Tensor::try_empty({rows, groups}, DType::kF32));
  if (rows == 0 || cols == 0) return out;
  const int64_t ld = x.stride(0);
  uint8_t* q = out.q.data<uint8_t>();
  float* s = out.scales.data<float>();
  for (int64_t m = 0; m < rows; ++m) {
    const void* row = static_cast<const char*>(x.data_ptr()) + m * ld * dtype_size(x.dtype());
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t k0 = g * group, k1 = std::min(cols, k0 + group);
      float amax = 0.0f;
      for (int64_t k = k0; k < k1; ++k) {
        const float v = element(row, x.dtype(), k);
        if (!std::isfinite(v)) {
          return make_error(ErrorCode::kInvalidArgument,
                            "cannot quantize '{}' to FP8 token groups: element [{}, {}] is {}, "
                            "which has no e4m3 value",
                            name, m, k, v);
        }
        amax = std::max(amax, std::fabs(v));
      }
      const float scale = std::max(amax, kFp8ActivationMinAmax) / kFp8E4M3Max;
      s[m * groups + g] = scale;
      for (int64_t k = k0; k < k1; ++k) {
        float v = element(row, x.dtype(), k) / scale;
        v = std::min(std::max(v, -kFp8E4M3Max), kFp8E4M3Max);
        q[m * cols + k] = f32_to_fp8e4m3(v);
      }
    }
  }
  return out;
}

Expected<Tensor> dequantize_fp8_token_groups(const Fp8TokenGroups& a) {
  if (!a.q.defined() || a.q.dtype() != DType::kF8E4M3 || a.q.ndim() != 2 ||
      !a.q.device().is_cpu() || !a.q.is_contiguous() || a.group <= 0 || !a.scales.defined() ||
      a.scales.dtype() != DType::kF32 || !a.scales.is_contiguous() ||
      a.scales.shape() != Shape{a.q.size(0), (a.q.size(1) + a.group - 1) / a.group}) {
    return make_error(ErrorCode::kInvalidArgument,
                      "dequantize_fp8_token_groups: expected contiguous CPU F8_E4M3 [M, K] values "
                      "with F32 [M, ceil(K / group)] scales");
  }
  const int64_t rows = a.q.size(0), cols = a.q.size(1), groups = a.scales.size(1);
  VLLM_ASSIGN_OR_RETURN(Tensor out, Tensor::try_empty({rows, cols}, DType::kF32));
  if (rows == 0 || cols == 0) return out;
  const uint8_t* q = a.q.data<uint8_t>();
  const float* s = a.scales.data<float>();
  float* dst = out.data<float>();
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t k = 0; k < cols; ++k) {
      dst[m * cols + k] = fp8e4m3_to_f32(q[m * cols + k]) * s[m * groups + k / a.group];
    }
  }
  return out;
}

}  // namespace vllm
