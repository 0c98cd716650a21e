// linear(): out = x @ weight^T (+ bias), torch.nn.Linear's layout.
//
// Work is split over output columns N across our thread pool; OpenBLAS is pinned to one
// thread so the two pools don't oversubscribe the cores. M <= 8 (decode) takes the direct
// kernel in linear_direct.cpp (or its AVX2 / AVX-512 variant, by cpu_isa.h). Larger M with
// BF16/F16 weights on an AVX-512 CPU runs that variant over 8-row tiles of x against blocks
// of 64 weight rows (1.25-1.6x the sgemm path below at M = 128 on one core; the AVX2
// variant is slower than sgemm there, so it is not used). Otherwise larger M calls sgemm
// per column block, decoding BF16/F16 weight blocks into per-thread f32 scratch first (F32
// weights: sgemm on them directly).
// Block-scaled FP8 weights (tensor/linear_weight.h) go the same two ways, dequantized to f32
// a tile or a block of rows at a time, with the portable direct kernel: the reference FP8
// linear, exactly x @ dequantize(w)^T up to f32 summation order.
#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "backend/cpu/common.h"
#include "backend/cpu/linear_kernels.h"
#include "backend/cpu/ops.h"
#include "base/thread_pool.h"

#if defined(OPENBLAS_VERSION)
// Exported by OpenBLAS's pthread build (it stops the worker threads); weak, so that other
// builds link without it.
extern "C" int blas_thread_shutdown_(void) __attribute__((weak));
#endif

namespace vllm::cpu {
namespace detail {
namespace {

// Weight rows decoded per sgemm call on the BF16/F16 path: as many as fill about 1 MiB of
// f32 scratch (an L2's worth), 16 to 256 rows. Fewer, larger calls pack x fewer times:
// Qwen3-0.6B's 128-token prefill ran ~4% faster on one core than with 64-row blocks.
constexpr int64_t kBlasScratchBytes = int64_t{1} << 20;

// Weight rows per block of the tiled path (M > kDirectMaxM, AVX-512, BF16/F16 weights):
// 64 rows of K <= 4096 are at most 512 KiB of BF16, within an L2.
constexpr int64_t kTiledBlockRows = 64;

int64_t blas_block_rows(int64_t K) {
  const int64_t rows = kBlasScratchBytes / (std::max<int64_t>(K, 1) * int64_t{sizeof(float)});
  return std::clamp<int64_t>(rows / 16 * 16, 16, 256);
}

void add_bias(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.bias == nullptr) return;
  for (int64_t m = 0; m < a.M; ++m) {
    float* o = a.out + m * a.ldo;
    for (int64_t n = n_begin; n < n_end; ++n) o[n] += load_f32(a.bias, a.bias_dtype, n);
  }
}

void sgemm_block(const LinearArgs& a, const float* w, int64_t n0, int64_t rows) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(a.M),
              static_cast<int>(rows), static_cast<int>(a.K), 1.0f, a.x, static_cast<int>(a.ldx), w,
              static_cast<int>(a.K), 0.0f, a.out + n0, static_cast<int>(a.ldo));
}

}  // namespace

void use_single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] {
#if defined(OPENBLAS_VERSION)
    openblas_set_num_threads(1);
    // OpenBLAS's pthread build starts its worker threads when it is loaded, and they spin on
    // sched_yield for a while before they sleep. On two cores that spin took one of our two
    // threads' cores for the first prefill (the demo model's ran at half speed or at full
    // speed depending on whether it came before the spin ended). With one thread they get
    // no work, so stop them; builds without the symbol (serial, OpenMP) have no such threads.
    if (blas_thread_shutdown_ != nullptr) blas_thread_shutdown_();
#endif
  });
}

void decode_weights(const void* src, DType dtype, int64_t count, float* dst, CpuIsa isa) {
  const auto* bits = static_cast<const uint16_t*>(src);
  switch (isa) {
    case CpuIsa::kAvx512:
      return decode_to_f32_avx512(bits, dtype, count, dst);
    case CpuIsa::kAvx2:
      return decode_to_f32_avx2(bits, dtype, count, dst);
    default:
      return decode_to_f32(src, dtype, count, dst);
  }
}

void linear_blas(const LinearArgs& a, int64_t n_begin, int64_t n_end, CpuIsa isa) {
  if (a.w_dtype == DType::kF32) {
    sgemm_block(a, static_cast<const float*>(a.w) + n_begin * a.K, n_begin, n_end - n_begin);
  } else {
    thread_local std::vector<float> scratch;
    const int64_t block = blas_block_rows(a.K);
    scratch.resize(static_cast<size_t>(block * a.K));
    const size_t row_bytes = static_cast<size_t>(a.K) * dtype_size(a.w_dtype);
    for (int64_t n0 = n_begin; n0 < n_end; n0 += block) {
      const int64_t rows = std::min(block, n_end - n0);
      if (a.w_dtype == DType::kF8E4M3) {
        for (int64_t r = 0; r < rows; ++r) {
          decode_fp8_row(a, n0 + r, 0, a.K, scratch.data() + r * a.K);
        }
      } else {
        const char* src = static_cast<const char*>(a.w) + static_cast<size_t>(n0) * row_bytes;
        decode_weights(src, a.w_dtype, rows * a.K, scratch.data(), isa);
      }
      sgemm_block(a, scratch.data(), n0, rows);
    }
  }
  add_bias(a, n_begin, n_end);
}

void set_weight_scales(const LinearWeight& w, LinearArgs* args) {
  if (!w.is_fp8()) return;
  args->w_scale = w.scale_inv.numel() > 0 ? w.scale_inv.data<float>() : nullptr;
  args->scale_cols = w.scale_inv.size(-1);
  args->block_n = w.block.n;
  args->block_k = w.block.k;
}

void run_linear(const LinearArgs& args) {
  const int64_t M = args.M, N = args.N, K = args.K;
  if (M == 0 || N == 0) return;
  if (K == 0) {  // empty sum: out = bias (or 0)
    for (int64_t m = 0; m < M; ++m) {
      float* o = args.out + m * args.ldo;
      for (int64_t n = 0; n < N; ++n) {
        o[n] = args.bias ? load_f32(args.bias, args.bias_dtype, n) : 0.0f;
      }
    }
    return;
  }
  // FP8 weights have portable kernels only (the reference).
  const CpuIsa isa = args.w_dtype == DType::kF8E4M3 ? CpuIsa::kPortable : active_isa();
  if (M <= kDirectMaxM) {
    // ~64K multiply-adds per chunk at least, in whole 4-row tiles.
    int64_t grain = std::max<int64_t>(4, (65536 / (M * K) + 3) / 4 * 4);
    auto kernel = isa == CpuIsa::kAvx512 ? linear_direct_avx512
                  : isa == CpuIsa::kAvx2 ? linear_direct_avx2
                                         : linear_direct;
    LinearArgs a = args;
    if (isa == CpuIsa::kAvx512 && a.w_dtype == DType::kBF16 && K >= 32 && M <= 4) {
      // Reordered once here rather than in every chunk; reused by this thread across calls.
      // (At M > 4 the widening is amortised over enough FMAs that pairing does not pay.)
      thread_local std::vector<float> pairs;
      pairs.resize(static_cast<size_t>(M * (K / 32 * 32)));
      pair_columns_avx512(a, pairs.data());
      a.x_pairs = pairs.data();
    }
    parallel_for(0, N, grain, [&](int64_t b, int64_t e) { kernel(a, b, e); });
  } else if (isa == CpuIsa::kAvx512 &&
             (args.w_dtype == DType::kBF16 || args.w_dtype == DType::kF16)) {
    // Blocks of weight rows, each dotted with the activations 8 rows at a time by the direct
    // kernel: the block stays in L2 across the row tiles, and is widened in registers rather
    // than into scratch for an sgemm (whose prebuilt kernel may also be older than the CPU).
    parallel_for(0, N, kTiledBlockRows, [&](int64_t b, int64_t e) {
      for (int64_t n0 = b; n0 < e; n0 += kTiledBlockRows) {
        const int64_t n1 = std::min(e, n0 + kTiledBlockRows);
        for (int64_t m0 = 0; m0 < M; m0 += kDirectMaxM) {
          LinearArgs a = args;
          a.x = args.x + m0 * args.ldx;
          a.out = args.out + m0 * args.ldo;
          a.M = std::min(kDirectMaxM, M - m0);
          linear_direct_avx512(a, n0, n1);
        }
      }
    });
  } else {
    use_single_threaded_blas();
    parallel_for(0, N, 64, [&](int64_t b, int64_t e) { linear_blas(args, b, e, isa); });
  }
}

}  // namespace detail

void pin_blas_to_one_thread() {
  detail::use_single_threaded_blas();
}

Status linear(const Tensor& x, const LinearWeight& w, const Tensor& bias, Tensor& out) {
  constexpr std::string_view kOp = "linear";
  const Tensor& weight = w.weight;
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "x", x, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_linear_weight(kOp, "weight", w));
  VLLM_RETURN_IF_ERROR(detail::check_ndim(kOp, "weight", weight, 2));
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  if (weight.size(1) != K) {
    return make_error(ErrorCode::kInvalidArgument,
                      "linear: weight has shape {}, expected [out_features, {}] (in_features = "
                      "the last dim of x {})",
                      shape_to_string(weight.shape()), K, shape_to_string(x.shape()));
  }
  if (bias.defined()) {
    VLLM_RETURN_IF_ERROR(detail::check_weight(kOp, "bias", bias));
    VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "bias", bias, {N}, "([out_features])"));
  }
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "out", out, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(
      detail::check_shape(kOp, "out", out, {M, N}, "([x.size(0), weight.size(0)])"));
  VLLM_ASSIGN_OR_RETURN(detail::Rows x_rows, detail::as_rows(kOp, "x", x));
  VLLM_ASSIGN_OR_RETURN(detail::Rows out_rows, detail::as_rows(kOp, "out", out));
  constexpr int64_t kIntMax = 0x7fffffff;  // BLAS takes int sizes
  if (M > kIntMax || N > kIntMax || K > kIntMax || x_rows.row_stride > kIntMax ||
      out_rows.row_stride > kIntMax) {
    return make_error(ErrorCode::kOutOfRange,
                      "linear: x {} / weight {} is too large for 32-bit BLAS sizes",
                      shape_to_string(x.shape()), shape_to_string(weight.shape()));
  }
  if (M == 0 || N == 0) return Status::ok();

  detail::LinearArgs args;
  args.x = x_rows.row<float>(0);
  args.ldx = M == 1 ? std::max<int64_t>(K, 1) : x_rows.row_stride;  // one row: any stride
  args.w = K > 0 ? weight.data_ptr() : nullptr;
  args.w_dtype = weight.dtype();
  detail::set_weight_scales(w, &args);
  args.bias = bias.defined() ? bias.data_ptr() : nullptr;
  args.bias_dtype = bias.defined() ? bias.dtype() : DType::kF32;
  args.out = out_rows.row<float>(0);
  args.ldo = M == 1 ? N : out_rows.row_stride;
  args.M = M;
  args.N = N;
  args.K = K;

  detail::run_linear(args);
  return Status::ok();
}

}  // namespace vllm::cpu
