// The small memory-bound ops of elementwise.cuh in llama.cpp's three levels: kernels,
// launchers (grid and access width), op entries (checks, then Status).
//
// Row ops work on [rows, cols] views whose rows may be strided (column slices of a fused
// projection). They run on a 2-D grid: x covers one row's vectors (one vector per thread),
// y walks the rows and loops past gridDim.y's 65535 limit. A thread moves 16 bytes per
// operand when every operand's rows start on a 16-byte boundary and the row width is a
// multiple of the vector width; otherwise the same kernel runs with one element per thread.
// Mixed-dtype ops (BF16 table -> F32 rows) size the vector by the wider type, so no access
// needs more than 16-byte alignment. Whole-tensor ops (convert, fill_uniform) use a
// grid-stride loop over int64 indices: stacked expert weights exceed 2^31 elements.
//
// Every value is widened to f32, computed, and rounded once on store. Indices the device
// cannot report (a token id outside the vocabulary, a row or slot outside the tensor) give a
// zero row or are skipped, as elementwise.cuh documents. Templates are instantiated per
// element type and access width only; index dtypes (I32/I64) are runtime branches.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/runtime.h"
#include "base/counter_rng.h"

namespace vllm::cuda {
namespace {
using detail::launch_pdl;
using detail::pdl_launch_next;
using detail::pdl_wait;

using detail::ceil_div;
using detail::from_float;
using detail::kMaxGridY;
using detail::kWarpSize;
using detail::Pack;
using detail::Rows;
using detail::to_float;

constexpr int kThreads = 256;         // threads per block of the row and flat kernels
constexpr int kFlatBlocksPerSm = 16;  // grid of the grid-stride kernels: several waves' worth

// ---- Device helpers -------------------------------------------------------------------

// Vector v (kVec elements) of the row at p, widened to f32.
template <typename T, int kVec>
__device__ __forceinline__ void load_vec(const T* p, int64_t v, float (&f)[kVec]) {
  const Pack<T, kVec> pk = reinterpret_cast<const Pack<T, kVec>*>(p)[v];
#pragma unroll
  for (int k = 0; k < kVec; ++k) f[k] = to_float(pk.v[k]);
}

template <typename T, int kVec>
__device__ __forceinline__ void store_vec(T* p, int64_t v, const float (&f)[kVec]) {
  Pack<T, kVec> pk;
#pragma unroll
  for (int k = 0; k < kVec; ++k) pk.v[k] = from_float<T>(f[k]);
  reinterpret_cast<Pack<T, kVec>*>(p)[v] = pk;
}

__device__ __forceinline__ float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

__device__ __forceinline__ int64_t load_index(const void* index, bool index64, int64_t i) {
  return index64 ? static_cast<const int64_t*>(index)[i]
                 : static_cast<int64_t>(static_cast<const int32_t*>(index)[i]);
}

// ---- Kernels --------------------------------------------------------------------------
// Row kernels: vector v = blockIdx.x * blockDim.x + threadIdx.x of rows blockIdx.y,
// blockIdx.y + gridDim.y, ...; `vecs` vectors per row.

// out[r, :] = src[index[r], :], zeros for an index outside [0, src_rows). Embedding (src =
// the table) and the logits row gather.
template <typename Out, typename In, int kVec>
__global__ void gather_rows_kernel(const In* src, int64_t src_stride, int64_t src_rows,
                                   const void* index, bool index64, Out* out, int64_t out_stride,
                                   int64_t rows, int64_t vecs) {
  pdl_wait();
  pdl_launch_next();
  const int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= vecs) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int64_t i = load_index(index, index64, r);
    float f[kVec];
    if (i >= 0 && i < src_rows) {
      load_vec<In, kVec>(src + i * src_stride, v, f);
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) f[k] = 0.0f;
    }
    store_vec<Out, kVec>(out + r * out_stride, v, f);
  }
}

template <typename T, int kVec>
__global__ void add_kernel(T* dst, int64_t dst_stride, const T* src, int64_t src_stride,
                           int64_t rows, int64_t vecs) {
  pdl_wait();
  pdl_launch_next();
  const int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= vecs) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    float d[kVec], s[kVec];
    load_vec<T, kVec>(dst + r * dst_stride, v, d);
    load_vec<T, kVec>(src + r * src_stride, v, s);
#pragma unroll
    for (int k = 0; k < kVec; ++k) d[k] += s[k];
    store_vec<T, kVec>(dst + r * dst_stride, v, d);
  }
}

// x row = gate[inter] | up[inter].
template <typename T, int kVec>
__global__ void silu_and_mul_kernel(const T* x, int64_t x_stride, int64_t inter, T* out,
                                    int64_t out_stride, int64_t rows, int64_t vecs) {
  pdl_wait();
  pdl_launch_next();
  const int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= vecs) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    float g[kVec], u[kVec];
    load_vec<T, kVec>(x + r * x_stride, v, g);
    load_vec<T, kVec>(x + r * x_stride + inter, v, u);
#pragma unroll
    for (int k = 0; k < kVec; ++k) g[k] = g[k] / (1.0f + expf(-g[k])) * u[k];
    store_vec<T, kVec>(out + r * out_stride, v, g);
  }
}

// Per row and head h: query[h] = q_gate[2h], gate[h] = q_gate[2h + 1], each head_vecs
// vectors. A plain copy: no conversion.
template <typename T, int kVec>
__global__ void split_q_gate_kernel(const T* q_gate, int64_t q_gate_stride, T* query,
                                    int64_t query_stride, T* gate, int64_t gate_stride,
                                    int64_t head_vecs, int64_t rows, int64_t vecs) {
  pdl_wait();
  pdl_launch_next();
  using P = Pack<T, kVec>;
  const int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= vecs) return;
  const int64_t h = v / head_vecs;
  const int64_t j = v - h * head_vecs;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const P* src = reinterpret_cast<const P*>(q_gate + r * q_gate_stride);
    const P q = src[2 * h * head_vecs + j];
    const P g = src[(2 * h + 1) * head_vecs + j];
    reinterpret_cast<P*>(query + r * query_stride)[v] = q;
    reinterpret_cast<P*>(gate + r * gate_stride)[v] = g;
  }
}

template <typename T, int kVec>
__global__ void sigmoid_gate_mul_kernel(T* x, int64_t x_stride, const T* gate, int64_t gate_stride,
                                        int64_t rows, int64_t vecs) {
  pdl_wait();
  pdl_launch_next();
  const int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= vecs) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    float a[kVec], g[kVec];
    load_vec<T, kVec>(x + r * x_stride, v, a);
    load_vec<T, kVec>(gate + r * gate_stride, v, g);
#pragma unroll
    for (int k = 0; k < kVec; ++k) a[k] *= sigmoid(g[k]);
    store_vec<T, kVec>(x + r * x_stride, v, a);
  }
}

// out[r, :] += sigmoid(gate[r * gate_stride]) * x[r, :].
template <typename T, int kVec>
__global__ void add_sigmoid_gated_kernel(T* out, int64_t out_stride, const T* x, int64_t x_stride,
                                         const T* gate, int64_t gate_stride, int64_t rows,
                                         int64_t vecs) {
  pdl_wait();
  pdl_launch_next();
  const int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= vecs) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float s = sigmoid(to_float(gate[r * gate_stride]));
    float o[kVec], a[kVec];
    load_vec<T, kVec>(out + r * out_stride, v, o);
    load_vec<T, kVec>(x + r * x_stride, v, a);
#pragma unroll
    for (int k = 0; k < kVec; ++k) o[k] += s * a[k];
    store_vec<T, kVec>(out + r * out_stride, v, o);
  }
}

// Zeroes unit v of slot slots[i] for i = blockIdx.y, blockIdx.y + gridDim.y, ...; a slot
// outside [0, num_slots) is skipped. U: the access unit (16 bytes or one 2-byte element).
template <typename U>
__global__ void zero_slots_kernel(U* state, int64_t slot_units, int64_t num_slots,
                                  const void* slots, bool slots64, int64_t n) {
  pdl_wait();
  pdl_launch_next();
  const int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= slot_units) return;
  for (int64_t i = blockIdx.y; i < n; i += gridDim.y) {
    const int64_t s = load_index(slots, slots64, i);
    if (s < 0 || s >= num_slots) continue;
    state[s * slot_units + v] = U{};
  }
}

// Flat kernels: grid-stride over n_vecs vectors.
template <typename Dst, typename Src, int kVec>
__global__ void convert_kernel(const Src* src, Dst* dst, int64_t n_vecs) {
  pdl_wait();
  pdl_launch_next();
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < n_vecs;
       v += step) {
    float f[kVec];
    load_vec<Src, kVec>(src, v, f);
    store_vec<Dst, kVec>(dst, v, f);
  }
}

template <typename T, int kVec>
__global__ void fill_uniform_kernel(T* out, int64_t n_vecs, uint64_t seed, float low, float high) {
  pdl_wait();
  pdl_launch_next();
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < n_vecs;
       v += step) {
    float f[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      f[k] = counter_uniform(seed, static_cast<uint64_t>(v * kVec + k), low, high);
    }
    store_vec<T, kVec>(out, v, f);
  }
}

// e4m3 bytes: each value rounded to nearest, saturated to the finite range (+-448).
__global__ void fill_uniform_e4m3_kernel(uint8_t* out, int64_t n, uint64_t seed, float low,
                                         float high) {
  pdl_wait();
  pdl_launch_next();
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const float v = counter_uniform(seed, static_cast<uint64_t>(i), low, high);
    out[i] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
  }
}

// ---- Launchers ------------------------------------------------------------------------

// Elements per 16-byte access of the wider of two element types.
template <typename A, typename B = A>
constexpr int vec_width() {
  return 16 / static_cast<int>(sizeof(A) > sizeof(B) ? sizeof(A) : sizeof(B));
}

struct RowLaunch {
  dim3 grid;
  dim3 block;
};

// One thread per vector of a row (rounded up to whole warps, at most kThreads per block);
// rows on y. vecs < 2^31 (checked by the op entries), so grid.x fits.
RowLaunch row_launch(int64_t rows, int64_t vecs) {
  const int64_t threads =
      std::min<int64_t>(kThreads, ceil_div(std::max<int64_t>(vecs, 1), kWarpSize) * kWarpSize);
  return {dim3(static_cast<unsigned>(ceil_div(vecs, threads)),
               static_cast<unsigned>(std::min<int64_t>(rows, kMaxGridY))),
          dim3(static_cast<unsigned>(threads))};
}

unsigned flat_blocks(int64_t n_vecs, const Device& device) {
  const int64_t cap = static_cast<int64_t>(multiprocessor_count(device.index)) * kFlatBlocksPerSm;
  return static_cast<unsigned>(std::clamp<int64_t>(ceil_div(n_vecs, kThreads), 1, cap));
}

// A value of the given element type, for generic lambdas that pick a kernel instantiation.
template <typename F>
Status with_act_type(DType dtype, F&& f) {
  if (dtype == DType::kF32) return f(float{});
  return f(__nv_bfloat16{});
}

template <typename F>
Status with_float_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32:
      return f(float{});
    case DType::kBF16:
      return f(__nv_bfloat16{});
    case DType::kF16:
      return f(__half{});
    default:
      return make_error(ErrorCode::kInternal, "unchecked float dtype {}", dtype_name(dtype));
  }
}

// ---- Op entry helpers -----------------------------------------------------------------

constexpr int64_t kMaxCols = 0x7fffffff;

// A 2-D activation operand (F32/BF16, on like's device) as a row view.
Expected<Rows> act_rows(std::string_view op, std::string_view arg, const Tensor& t,
                        const Tensor& like) {
  VLLM_RETURN_IF_ERROR(detail::check_same_device(op, arg, t, like));
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(op, arg, t, {DType::kF32, DType::kBF16}));
  if (t.ndim() != 2) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} is {}, expected a 2-D tensor", op, arg,
                      t.to_string());
  }
  VLLM_ASSIGN_OR_RETURN(Rows rows, detail::as_rows(op, arg, t));
  if (rows.cols > kMaxCols) {
    return make_error(ErrorCode::kUnsupported, "{}: {} has {} columns, more than this op supports",
                      op, arg, rows.cols);
  }
  return rows;
}

Status check_same_shape(std::string_view op, std::string_view arg, const Tensor& t,
                        std::string_view like_name, const Tensor& like) {
  if (t.shape() != like.shape()) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} is {}, expected the shape of {} {}", op,
                      arg, t.to_string(), like_name, shape_to_string(like.shape()));
  }
  return Status::ok();
}

// A 1-D contiguous index tensor on like's device, of one of `allowed`.
Status check_index(std::string_view op, std::string_view arg, const Tensor& t, const Tensor& like,
                   std::initializer_list<DType> allowed) {
  VLLM_RETURN_IF_ERROR(detail::check_same_device(op, arg, t, like));
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(op, arg, t, allowed));
  if (t.ndim() != 1) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} is {}, expected a 1-D tensor", op, arg,
                      t.to_string());
  }
  return detail::check_contiguous(op, arg, t);
}

// The shared launch of gather_rows_kernel: src [src_rows, cols] rows picked by index.
template <typename Out, typename In>
Status launch_gather(const Rows& src, const void* index, bool index64, const Rows& out,
                     cudaStream_t stream) {
  constexpr int kVec = vec_width<Out, In>();
  // Row starts aligned to a whole pack of each type; cols % kVec keeps every pack inside.
  const bool vec = out.cols % kVec == 0 &&
                   detail::rows_aligned(src, sizeof(In), sizeof(In) * kVec) &&
                   detail::rows_aligned(out, sizeof(Out), sizeof(Out) * kVec);
  const auto* s = static_cast<const In*>(src.data);
  auto* o = static_cast<Out*>(out.data);
  if (vec) {
    const RowLaunch l = row_launch(out.rows, out.cols / kVec);
    launch_pdl(gather_rows_kernel<Out, In, kVec>, l.grid, l.block, 0, stream, s, src.row_stride,
               src.rows, index, index64, o, out.row_stride, out.rows, out.cols / kVec);
  } else {
    const RowLaunch l = row_launch(out.rows, out.cols);
    launch_pdl(gather_rows_kernel<Out, In, 1>, l.grid, l.block, 0, stream, s, src.row_stride,
               src.rows, index, index64, o, out.row_stride, out.rows, out.cols);
  }
  return check_launch("gather_rows_kernel");
}

template <typename Out>
Status launch_gather_from(DType in_dtype, const Rows& src, const void* index, bool index64,
                          const Rows& out, cudaStream_t stream) {
  if (in_dtype == DType::kF32) return launch_gather<Out, float>(src, index, index64, out, stream);
  return launch_gather<Out, __nv_bfloat16>(src, index, index64, out, stream);
}

Status launch_gather_any(DType out_dtype, DType in_dtype, const Rows& src, const void* index,
                         bool index64, const Rows& out, cudaStream_t stream) {
  if (out_dtype == DType::kF32) {
    return launch_gather_from<float>(in_dtype, src, index, index64, out, stream);
  }
  return launch_gather_from<__nv_bfloat16>(in_dtype, src, index, index64, out, stream);
}

}  // namespace

// ---- Op entries -----------------------------------------------------------------------

Status embedding(const Tensor& token_ids, const Tensor& table, Tensor& out, cudaStream_t stream) {
  constexpr std::string_view kOp = "cuda::embedding";
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, "table", table, {DType::kF32, DType::kBF16}));
  if (table.ndim() != 2) {
    return make_error(ErrorCode::kInvalidArgument, "{}: table is {}, expected [vocab, hidden]", kOp,
                      table.to_string());
  }
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "table", table));
  VLLM_RETURN_IF_ERROR(check_index(kOp, "token_ids", token_ids, table, {DType::kI32, DType::kI64}));
  VLLM_ASSIGN_OR_RETURN(Rows out_rows, act_rows(kOp, "out", out, table));
  const int64_t tokens = token_ids.size(0), hidden = table.size(1);
  if (out.size(0) != tokens || out.size(1) != hidden) {
    return make_error(ErrorCode::kInvalidArgument, "{}: out is {}, expected [{}, {}]", kOp,
                      out.to_string(), tokens, hidden);
  }
  if (hidden > kMaxCols) {
    return make_error(ErrorCode::kUnsupported, "{}: hidden size {} is too large", kOp, hidden);
  }
  if (tokens == 0 || hidden == 0) return Status::ok();
  DeviceGuard guard(table.device());
  VLLM_RETURN_IF_ERROR(guard.status());
  Rows table_rows{table.data_ptr(), table.size(0), hidden, hidden};
  return launch_gather_any(out.dtype(), table.dtype(), table_rows, token_ids.data_ptr(),
                           token_ids.dtype() == DType::kI64, out_rows, stream);
}

Status gather_rows(const Tensor& x, const Tensor& rows, Tensor& out, cudaStream_t stream) {
  constexpr std::string_view kOp = "cuda::gather_rows";
  VLLM_ASSIGN_OR_RETURN(Rows x_rows, act_rows(kOp, "x", x, x));
  VLLM_RETURN_IF_ERROR(check_index(kOp, "rows", rows, x, {DType::kI64}));
  VLLM_ASSIGN_OR_RETURN(Rows out_rows, act_rows(kOp, "out", out, x));
  if (out.dtype() != x.dtype() && out.dtype() != DType::kF32) {
    return make_error(ErrorCode::kInvalidArgument, "{}: out is {}, expected {} or F32", kOp,
                      out.to_string(), dtype_name(x.dtype()));
  }
  if (out.size(0) != rows.size(0) || out.size(1) != x.size(1)) {
    return make_error(ErrorCode::kInvalidArgument, "{}: out is {}, expected [{}, {}]", kOp,
                      out.to_string(), rows.size(0), x.size(1));
  }
  if (out_rows.rows == 0 || out_rows.cols == 0) return Status::ok();
  DeviceGuard guard(x.device());
  VLLM_RETURN_IF_ERROR(guard.status());
  return launch_gather_any(out.dtype(), x.dtype(), x_rows, rows.data_ptr(), /*index64=*/true,
                           out_rows, stream);
}

Status add_inplace(Tensor& dst, const Tensor& src, cudaStream_t stream) {
  constexpr std::string_view kOp = "cuda::add_inplace";
  VLLM_ASSIGN_OR_RETURN(Rows d, act_rows(kOp, "dst", dst, dst));
  VLLM_ASSIGN_OR_RETURN(Rows s, act_rows(kOp, "src", src, dst));
  VLLM_RETURN_IF_ERROR(detail::check_same_dtype(kOp, "src", src, dst));
  VLLM_RETURN_IF_ERROR(check_same_shape(kOp, "src", src, "dst", dst));
  if (d.rows == 0 || d.cols == 0) return Status::ok();
  DeviceGuard guard(dst.device());
  VLLM_RETURN_IF_ERROR(guard.status());
  return with_act_type(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = vec_width<T>();
    auto* dp = static_cast<T*>(d.data);
    const auto* sp = static_cast<const T*>(s.data);
    const bool vec = d.cols % kVec == 0 && detail::rows_aligned(d, sizeof(T), 16) &&
                     detail::rows_aligned(s, sizeof(T), 16);
    if (vec) {
      const RowLaunch l = row_launch(d.rows, d.cols / kVec);
      launch_pdl(add_kernel<T, kVec>, l.grid, l.block, 0, stream, dp, d.row_stride, sp,
                 s.row_stride, d.rows, d.cols / kVec);
    } else {
      const RowLaunch l = row_launch(d.rows, d.cols);
      launch_pdl(add_kernel<T, 1>, l.grid, l.block, 0, stream, dp, d.row_stride, sp, s.row_stride,
                 d.rows, d.cols);
    }
    return check_launch("add_kernel");
  });
}

Status silu_and_mul(const Tensor& x, Tensor& out, cudaStream_t stream) {
  constexpr std::string_view kOp = "cuda::silu_and_mul";
  VLLM_ASSIGN_OR_RETURN(Rows xr, act_rows(kOp, "x", x, x));
  VLLM_ASSIGN_OR_RETURN(Rows o, act_rows(kOp, "out", out, x));
  VLLM_RETURN_IF_ERROR(detail::check_same_dtype(kOp, "out", out, x));
  if (xr.cols % 2 != 0 || o.rows != xr.rows || o.cols != xr.cols / 2) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: x {} and out {} must be [T, 2 * I] (gate | up) and [T, I]", kOp,
                      x.to_string(), out.to_string());
  }
  const int64_t inter = o.cols;
  if (o.rows == 0 || inter == 0) return Status::ok();
  DeviceGuard guard(x.device());
  VLLM_RETURN_IF_ERROR(guard.status());
  return with_act_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = vec_width<T>();
    const auto* xp = static_cast<const T*>(xr.data);
    auto* op = static_cast<T*>(o.data);
    // inter % kVec == 0 puts the up half on the same 16-byte grid as the gate half.
    const bool vec = inter % kVec == 0 && detail::rows_aligned(xr, sizeof(T), 16) &&
                     detail::rows_aligned(o, sizeof(T), 16);
    if (vec) {
      const RowLaunch l = row_launch(o.rows, inter / kVec);
      launch_pdl(silu_and_mul_kernel<T, kVec>, l.grid, l.block, 0, stream, xp, xr.row_stride, inter,
                 op, o.row_stride, o.rows, inter / kVec);
    } else {
      const RowLaunch l = row_launch(o.rows, inter);
      launch_pdl(silu_and_mul_kernel<T, 1>, l.grid, l.block, 0, stream, xp, xr.row_stride, inter,
                 op, o.row_stride, o.rows, inter);
    }
    return check_launch("silu_and_mul_kernel");
  });
}

Status split_q_gate(const Tensor& q_gate, int64_t head_dim, Tensor& query, Tensor& gate,
                    cudaStream_t stream) {
  constexpr std::string_view kOp = "cuda::split_q_gate";
  VLLM_ASSIGN_OR_RETURN(Rows src, act_rows(kOp, "q_gate", q_gate, q_gate));
  VLLM_ASSIGN_OR_RETURN(Rows q, act_rows(kOp, "query", query, q_gate));
  VLLM_ASSIGN_OR_RETURN(Rows g, act_rows(kOp, "gate", gate, q_gate));
  VLLM_RETURN_IF_ERROR(detail::check_same_dtype(kOp, "query", query, q_gate));
  VLLM_RETURN_IF_ERROR(detail::check_same_dtype(kOp, "gate", gate, q_gate));
  if (head_dim <= 0 || src.cols % (2 * head_dim) != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: q_gate {} does not split into heads of 2 * head_dim ({}) values", kOp,
                      q_gate.to_string(), head_dim);
  }
  const int64_t width = src.cols / 2;
  if (q.rows != src.rows || q.cols != width || g.rows != src.rows || g.cols != width) {
    return make_error(ErrorCode::kInvalidArgument, "{}: query {} and gate {} must be [{}, {}]", kOp,
                      query.to_string(), gate.to_string(), src.rows, width);
  }
  if (src.rows == 0 || width == 0) return Status::ok();
  DeviceGuard guard(q_gate.device());
  VLLM_RETURN_IF_ERROR(guard.status());
  return with_act_type(q_gate.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = vec_width<T>();
    const auto* sp = static_cast<const T*>(src.data);
    auto* qp = static_cast<T*>(q.data);
    auto* gp = static_cast<T*>(g.data);
    const bool vec = head_dim % kVec == 0 && detail::rows_aligned(src, sizeof(T), 16) &&
                     detail::rows_aligned(q, sizeof(T), 16) &&
                     detail::rows_aligned(g, sizeof(T), 16);
    if (vec) {
      const RowLaunch l = row_launch(src.rows, width / kVec);
      launch_pdl(split_q_gate_kernel<T, kVec>, l.grid, l.block, 0, stream, sp, src.row_stride, qp,
                 q.row_stride, gp, g.row_stride, head_dim / kVec, src.rows, width / kVec);
    } else {
      const RowLaunch l = row_launch(src.rows, width);
      launch_pdl(split_q_gate_kernel<T, 1>, l.grid, l.block, 0, stream, sp, src.row_stride, qp,
                 q.row_stride, gp, g.row_stride, head_dim, src.rows, width);
    }
    return check_launch("split_q_gate_kernel");
  });
}

Status sigmoid_gate_mul(Tensor& x, const Tensor& gate, cudaStream_t stream) {
  constexpr std::string_view kOp = "cuda::sigmoid_gate_mul";
  VLLM_ASSIGN_OR_RETURN(Rows xr, act_rows(kOp, "x", x, x));
  VLLM_ASSIGN_OR_RETURN(Rows g, act_rows(kOp, "gate", gate, x));
  VLLM_RETURN_IF_ERROR(detail::check_same_dtype(kOp, "gate", gate, x));
  VLLM_RETURN_IF_ERROR(check_same_shape(kOp, "gate", gate, "x", x));
  if (xr.rows == 0 || xr.cols == 0) return Status::ok();
  DeviceGuard guard(x.device());
  VLLM_RETURN_IF_ERROR(guard.status());
  return with_act_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = vec_width<T>();
    auto* xp = static_cast<T*>(xr.data);
    const auto* gp = static_cast<const T*>(g.data);
    const bool vec = xr.cols % kVec == 0 && detail::rows_aligned(xr, sizeof(T), 16) &&
                     detail::rows_aligned(g, sizeof(T), 16);
    if (vec) {
      const RowLaunch l = row_launch(xr.rows, xr.cols / kVec);
      launch_pdl(sigmoid_gate_mul_kernel<T, kVec>, l.grid, l.block, 0, stream, xp, xr.row_stride,
                 gp, g.row_stride, xr.rows, xr.cols / kVec);
    } else {
      const RowLaunch l = row_launch(xr.rows, xr.cols);
      launch_pdl(sigmoid_gate_mul_kernel<T, 1>, l.grid, l.block, 0, stream, xp, xr.row_stride, gp,
                 g.row_stride, xr.rows, xr.cols);
    }
    return check_launch("sigmoid_gate_mul_kernel");
  });
}

Status add_sigmoid_gated(Tensor& out, const Tensor& x, const Tensor& gate, cudaStream_t stream) {
  constexpr std::string_view kOp = "cuda::add_sigmoid_gated";
  VLLM_ASSIGN_OR_RETURN(Rows o, act_rows(kOp, "out", out, out));
  VLLM_ASSIGN_OR_RETURN(Rows xr, act_rows(kOp, "x", x, out));
  VLLM_RETURN_IF_ERROR(detail::check_same_dtype(kOp, "x", x, out));
  VLLM_RETURN_IF_ERROR(check_same_shape(kOp, "x", x, "out", out));
  VLLM_RETURN_IF_ERROR(detail::check_same_device(kOp, "gate", gate, out));
  VLLM_RETURN_IF_ERROR(detail::check_same_dtype(kOp, "gate", gate, out));
  const bool gate_ok = (gate.ndim() == 1 && gate.size(0) == o.rows) ||
                       (gate.ndim() == 2 && gate.size(0) == o.rows && gate.size(1) == 1);
  if (!gate_ok) {
    return make_error(ErrorCode::kInvalidArgument, "{}: gate is {}, expected [{}, 1] or [{}]", kOp,
                      gate.to_string(), o.rows, o.rows);
  }
  if (o.rows == 0 || o.cols == 0) return Status::ok();
  const int64_t gate_stride = gate.stride(0);
  DeviceGuard guard(out.device());
  VLLM_RETURN_IF_ERROR(guard.status());
  return with_act_type(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = vec_width<T>();
    auto* op = static_cast<T*>(o.data);
    const auto* xp = static_cast<const T*>(xr.data);
    const auto* gp = static_cast<const T*>(gate.data_ptr());
    const bool vec = o.cols % kVec == 0 && detail::rows_aligned(o, sizeof(T), 16) &&
                     detail::rows_aligned(xr, sizeof(T), 16);
    if (vec) {
      const RowLaunch l = row_launch(o.rows, o.cols / kVec);
      launch_pdl(add_sigmoid_gated_kernel<T, kVec>, l.grid, l.block, 0, stream, op, o.row_stride,
                 xp, xr.row_stride, gp, gate_stride, o.rows, o.cols / kVec);
    } else {
      const RowLaunch l = row_launch(o.rows, o.cols);
      launch_pdl(add_sigmoid_gated_kernel<T, 1>, l.grid, l.block, 0, stream, op, o.row_stride, xp,
                 xr.row_stride, gp, gate_stride, o.rows, o.cols);
    }
    return check_launch("add_sigmoid_gated_kernel");
  });
}

Status zero_slots(Tensor& state, const Tensor& slots, cudaStream_t stream) {
  constexpr std::string_view kOp = "cuda::zero_slots";
  VLLM_RETURN_IF_ERROR(
      detail::check_cuda_tensor(kOp, "state", state, {DType::kF32, DType::kBF16, DType::kF16}));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "state", state));
  if (state.ndim() < 1) {
    return make_error(ErrorCode::kInvalidArgument, "{}: state is {}, expected [num_slots, ...]",
                      kOp, state.to_string());
  }
  VLLM_RETURN_IF_ERROR(check_index(kOp, "slots", slots, state, {DType::kI32, DType::kI64}));
  const int64_t num_slots = state.size(0), n = slots.size(0);
  if (num_slots == 0 || n == 0 || state.numel() == 0) return Status::ok();
  const int64_t slot_bytes = state.numel() / num_slots * static_cast<int64_t>(state.element_size());
  const bool wide = slot_bytes % 16 == 0 && detail::is_aligned(state.data_ptr(), 16);
  const int64_t unit_bytes = wide ? 16 : 2;  // every allowed dtype is a whole number of 2 bytes
  const int64_t slot_units = slot_bytes / unit_bytes;
  if (slot_units > kMaxCols) {
    return make_error(ErrorCode::kUnsupported, "{}: slots of {} bytes are too large", kOp,
                      slot_bytes);
  }
  DeviceGuard guard(state.device());
  VLLM_RETURN_IF_ERROR(guard.status());
  const RowLaunch l = row_launch(n, slot_units);
  const bool slots64 = slots.dtype() == DType::kI64;
  if (wide) {
    launch_pdl(zero_slots_kernel<uint4>, l.grid, l.block, 0, stream,
               static_cast<uint4*>(state.data_ptr()), slot_units, num_slots, slots.data_ptr(),
               slots64, n);
  } else {
    launch_pdl(zero_slots_kernel<uint16_t>, l.grid, l.block, 0, stream,
               static_cast<uint16_t*>(state.data_ptr()), slot_units, num_slots, slots.data_ptr(),
               slots64, n);
  }
  return check_launch("zero_slots_kernel");
}

Status convert(const Tensor& src, Tensor& dst, cudaStream_t stream) {
  constexpr std::string_view kOp = "cuda::convert";
  VLLM_RETURN_IF_ERROR(
      detail::check_cuda_tensor(kOp, "src", src, {DType::kF32, DType::kBF16, DType::kF16}));
  VLLM_RETURN_IF_ERROR(detail::check_same_device(kOp, "dst", dst, src));
  VLLM_RETURN_IF_ERROR(
      detail::check_cuda_tensor(kOp, "dst", dst, {DType::kF32, DType::kBF16, DType::kF16}));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "src", src));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "dst", dst));
  if (src.numel() != dst.numel()) {
    return make_error(ErrorCode::kInvalidArgument, "{}: dst {} does not hold src {}'s {} elements",
                      kOp, dst.to_string(), src.to_string(), src.numel());
  }
  const int64_t n = src.numel();
  if (n == 0) return Status::ok();
  DeviceGuard guard(src.device());
  VLLM_RETURN_IF_ERROR(guard.status());
  if (src.dtype() == dst.dtype()) {
    VLLM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), src.nbytes(),
                                              cudaMemcpyDeviceToDevice, stream));
    return Status::ok();
  }
  return with_float_type(src.dtype(), [&](auto src_tag) {
    using S = decltype(src_tag);
    return with_float_type(dst.dtype(), [&](auto dst_tag) -> Status {
      using D = decltype(dst_tag);
      if constexpr (std::is_same_v<S, D>) {
        return make_error(ErrorCode::kInternal, "convert between equal dtypes");
      } else {
        constexpr int kVec = vec_width<S, D>();
        const auto* sp = static_cast<const S*>(src.data_ptr());
        auto* dp = static_cast<D*>(dst.data_ptr());
        const bool vec = n % kVec == 0 && detail::is_aligned(sp, sizeof(S) * kVec) &&
                         detail::is_aligned(dp, sizeof(D) * kVec);
        const int64_t n_vecs = vec ? n / kVec : n;
        const unsigned blocks = flat_blocks(n_vecs, src.device());
        if (vec) {
          launch_pdl(convert_kernel<D, S, kVec>, blocks, kThreads, 0, stream, sp, dp, n_vecs);
        } else {
          launch_pdl(convert_kernel<D, S, 1>, blocks, kThreads, 0, stream, sp, dp, n_vecs);
        }
        return check_launch("convert_kernel");
      }
    });
  });
}

Status fill_uniform(Tensor& t, float low, float high, uint64_t seed, cudaStream_t stream) {
  constexpr std::string_view kOp = "cuda::fill_uniform";
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(
      kOp, "t", t, {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3}));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "t", t));
  if (!(low <= high)) {
    return make_error(ErrorCode::kInvalidArgument, "{}: the range [{}, {}) is empty", kOp, low,
                      high);
  }
  const int64_t n = t.numel();
  if (n == 0) return Status::ok();
  DeviceGuard guard(t.device());
  VLLM_RETURN_IF_ERROR(guard.status());
  if (t.dtype() == DType::kF8E4M3) {
    launch_pdl(fill_uniform_e4m3_kernel, flat_blocks(n, t.device()), kThreads, 0, stream,
               static_cast<uint8_t*>(t.data_ptr()), n, seed, low, high);
    return check_launch("fill_uniform_e4m3_kernel");
  }
  return with_float_type(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = vec_width<T>();
    auto* p = static_cast<T*>(t.data_ptr());
    const bool vec = n % kVec == 0 && detail::is_aligned(p, 16);
    const int64_t n_vecs = vec ? n / kVec : n;
    const unsigned blocks = flat_blocks(n_vecs, t.device());
    if (vec) {
      launch_pdl(fill_uniform_kernel<T, kVec>, blocks, kThreads, 0, stream, p, n_vecs, seed, low,
                 high);
    } else {
      launch_pdl(fill_uniform_kernel<T, 1>, blocks, kThreads, 0, stream, p, n_vecs, seed, low,
                 high);
    }
    return check_launch("fill_uniform_kernel");
  });
}

}  // namespace vllm::cuda
