// Data movement ops of the op layer: copies between and within devices, dtype conversion,
// zeroing and random fills (ops.h).
#include <cstring>

#include "base/float_convert.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

#if VLLM_WITH_CUDA
#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/runtime.h"
#endif

namespace vllm::ops {
namespace detail {

Status unsupported(std::string_view op, const Tensor& out) {
  return make_error(ErrorCode::kUnsupported, "{}: unsupported on {} (output {})", op,
                    out.device().to_string(), out.to_string());
}

Expected<Tensor> contiguous(const ExecContext& ctx, const Tensor& t) {
  if (t.is_contiguous()) return t;
  VLLM_ASSIGN_OR_RETURN(Tensor out, ctx.alloc(t.shape(), t.dtype()));
  VLLM_RETURN_IF_ERROR(copy(ctx, t, out));
  return out;
}

}  // namespace detail

namespace {

// A tensor as a 2-D byte matrix: `rows` rows of `row_bytes`, `pitch` bytes apart.
struct Matrix {
  char* data;
  int64_t rows, row_bytes, pitch;
};

Expected<Matrix> as_matrix(const Tensor& t, std::string_view arg) {
  Matrix m{t.numel() == 0 ? nullptr : static_cast<char*>(t.data_ptr()), 1,
           static_cast<int64_t>(t.nbytes()), static_cast<int64_t>(t.nbytes())};
  if (t.is_contiguous()) return m;
  if (t.ndim() == 2 && t.stride(1) == 1) {
    const auto es = static_cast<int64_t>(t.element_size());
    return Matrix{m.data, t.size(0), t.size(1) * es, t.stride(0) * es};
  }
  return make_error(ErrorCode::kInvalidArgument,
                    "copy: {} {} must be contiguous or 2-D with unit column stride", arg,
                    t.to_string());
}

}  // namespace

Status copy(const ExecContext& ctx, const Tensor& src, Tensor& dst) {
  if (src.dtype() != dst.dtype() || src.shape() != dst.shape()) {
    return make_error(ErrorCode::kInvalidArgument, "copy: {} into {}: dtype and shape must match",
                      src.to_string(), dst.to_string());
  }
  if (src.numel() == 0) return Status::ok();
  VLLM_ASSIGN_OR_RETURN(Matrix s, as_matrix(src, "src"));
  VLLM_ASSIGN_OR_RETURN(Matrix d, as_matrix(dst, "dst"));
  // One of them may be contiguous while the other is strided: describe both as rows of the
  // strided one's row length.
  if (s.rows != d.rows) {
    const Matrix& strided = s.rows > 1 ? s : d;
    Matrix& flat = s.rows > 1 ? d : s;
    flat.rows = strided.rows;
    flat.row_bytes = strided.row_bytes;
    flat.pitch = strided.row_bytes;
  }
  if (src.device().is_cpu() && dst.device().is_cpu()) {
    for (int64_t r = 0; r < s.rows; ++r) {
      std::memcpy(d.data + r * d.pitch, s.data + r * s.pitch, static_cast<size_t>(s.row_bytes));
    }
    return Status::ok();
  }
#if VLLM_WITH_CUDA
  cudaMemcpyKind kind = cudaMemcpyDefault;
  VLLM_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(d.data, static_cast<size_t>(d.pitch), s.data,
                                              static_cast<size_t>(s.pitch),
                                              static_cast<size_t>(s.row_bytes),
                                              static_cast<size_t>(s.rows), kind,
                                              detail::stream(ctx)));
  if (dst.device().is_cpu()) {
    VLLM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(detail::stream(ctx)));
  }
  return Status::ok();
#else
  return detail::unsupported("copy", src.device().is_cpu() ? dst : src);
#endif
}

Expected<Tensor> to_device(const ExecContext& ctx, const Tensor& host) {
  VLLM_ASSIGN_OR_RETURN(Tensor out, ctx.alloc(host.shape(), host.dtype()));
  VLLM_RETURN_IF_ERROR(copy(ctx, host, out));
  return out;
}

Expected<Tensor> upload(const ExecContext& ctx, const Tensor& host) {
  if (ctx.device.is_cpu()) return host;
  VLLM_ASSIGN_OR_RETURN(Tensor out, Tensor::try_empty(host.shape(), host.dtype(), ctx.device));
  VLLM_RETURN_IF_ERROR(copy(ctx, host, out));
  return out;
}

Expected<Tensor> to_host(const ExecContext& ctx, const Tensor& t) {
  VLLM_ASSIGN_OR_RETURN(Tensor out, Tensor::try_empty(t.shape(), t.dtype()));
  VLLM_RETURN_IF_ERROR(copy(ctx, t, out));
  return out;
}

Status convert(const ExecContext& ctx, const Tensor& src, Tensor& dst) {
  if (src.numel() != dst.numel() || !src.is_contiguous() || !dst.is_contiguous() ||
      src.device() != dst.device()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "convert: {} into {}: same element count, contiguous, one device",
                      src.to_string(), dst.to_string());
  }
  if (dst.device().is_cpu()) {
    const int64_t n = src.numel();
    auto load = [&](int64_t i) -> float {
      switch (src.dtype()) {
        case DType::kF32:
          return src.data<float>()[i];
        case DType::kBF16:
          return bf16_to_f32(src.data<uint16_t>()[i]);
        default:
          return f16_to_f32(src.data<uint16_t>()[i]);
      }
    };
    for (DType d : {src.dtype(), dst.dtype()}) {
      if (d != DType::kF32 && d != DType::kBF16 && d != DType::kF16) {
        return make_error(ErrorCode::kInvalidArgument, "convert: dtype {} (F32/BF16/F16 only)",
                          dtype_name(d));
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      const float v = load(i);
      if (dst.dtype() == DType::kF32) {
        dst.data<float>()[i] = v;
      } else {
        dst.data<uint16_t>()[i] = dst.dtype() == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
      }
    }
    return Status::ok();
  }
#if VLLM_WITH_CUDA
  if (dst.device().is_cuda()) return cuda::convert(src, dst, detail::stream(ctx));
#endif
  return detail::unsupported("convert", dst);
}

Status zero(const ExecContext& ctx, Tensor& t) {
  if (!t.is_contiguous()) {
    return make_error(ErrorCode::kInvalidArgument, "zero: {} must be contiguous", t.to_string());
  }
  if (t.numel() == 0) return Status::ok();
  if (t.device().is_cpu()) {
    std::memset(t.data_ptr(), 0, t.nbytes());
    return Status::ok();
  }
#if VLLM_WITH_CUDA
  if (t.device().is_cuda()) {
    VLLM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(t.data_ptr(), 0, t.nbytes(), detail::stream(ctx)));
    return Status::ok();
  }
#endif
  return detail::unsupported("zero", t);
}

Status fill_uniform(const ExecContext& ctx, Tensor& t, float low, float high, uint64_t seed) {
#if VLLM_WITH_CUDA
  if (t.device().is_cuda()) return cuda::fill_uniform(t, low, high, seed, detail::stream(ctx));
#endif
  return detail::unsupported("fill_uniform", t);
}

}  // namespace vllm::ops
