// linear() and gemv() (gemm.cuh): the op entries' checks, the dispatch by M, cuBLASLt for
// the larger batches, and the BlasContext that owns the handle, the workspace and the cache of
// matmul plans.
//
// Dispatch. M <= blas.gemv_max_rows() (kGemvCrossoverRows unless a test or timing sets it)
// runs the batched GEMV of gemv.cu, which reads each weight row once for all rows of x, and
// so do narrow products (N <= kGemvNarrowMaxN, M <= kGemvMaxRows); the rest goes to cuBLASLt. Both
// take the same operands (strided x and out, bias, F32 logits).
//
// Layout. cuBLASLt is column-major. Row-major out[M, N] = x[M, K] @ W[N, K]^T is, read
// column-major, D[N, M] = op(A)[N, K] * B[K, M] with A = W stored K x N (lda = K, op = T),
// B = x stored K x M (ldb = x's row stride, op = N) and D = out (ldd = out's row stride), so
// row-strided x and out (column slices of wider tensors) need no copy.
//
// Plan cache. A plan is everything cuBLASLt needs besides the data pointers: the matmul
// descriptor (compute type, transposes, epilogue), the three matrix layouts and the algorithm
// the heuristic picked. It is keyed by (M, N, K, ldx, ldo, dtypes, bias dtype, and the
// alignment of each pointer up to 16 bytes): the heuristic's choice depends on all of them,
// and cuBLASLt assumes 256-byte aligned pointers unless told otherwise, so the alignments
// are passed as preferences and must be part of the key. A step's GEMMs therefore query the
// heuristic only the first time a shape is seen (decode's batch-size ladder and the prefill
// token budgets repeat); the plans live in an LRU of kMaxPlans entries so a long run of
// distinct prefill sizes cannot grow it without bound. The bias pointer is set on the cached
// descriptor at each call (a host-side attribute write).
//
// Bias. Through cuBLASLt's BIAS epilogue (added in f32 before the single rounding of D).
// When the heuristic offers no algorithm for that epilogue with these dtypes (or the matmul
// then reports it unsupported), the plan is rebuilt without it and a small kernel adds the
// bias afterwards; that choice is cached with the plan. K = 0 writes the bias (or zeros),
// as cpu::linear does, without calling cuBLASLt.
//
// FP8. linear_fp8 (W8A16) reads the e4m3 weight in a GEMV (the batched GEMV's tensor-core
// kernel where it takes the weight, gemv_fp8.cu's otherwise) or dequantizes it for cuBLASLt;
// linear_fp8_w8a8 quantizes x per token group (fp8_quant.cu) and runs cuBLASLt's FP8 matmul
// with block scales: the weight's in BLK128x128_32F mode (its [N / 128, K / 128] row-major
// grid is that mode's layout for the transposed A operand, read with its row stride rounded up
// to a multiple of 4 scales: hence K a multiple of 512, where the two agree) and x's in
// VEC128_32F mode (M-major [K / 128, M], M a multiple of 4). Its plans are keyed with x_dtype
// F8_E4M3; the scale pointers are set on the cached descriptor at each call, as the bias pointer
// is.
//
// A BlasContext is used by one host thread and one stream at a time (its workspace and
// cache are unsynchronised), as the execution context that owns it guarantees.
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <list>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "backend/cuda/common.cuh"
#include "backend/cuda/fp8_quant.cuh"
#include "backend/cuda/gdn_batch.cuh"  // check_no_overlap
#include "backend/cuda/gemm.cuh"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/gemv_fp8.cuh"
#include "backend/cuda/runtime.h"

namespace vllm::cuda {
namespace {
using detail::launch_pdl;
using detail::pdl_launch_next;
using detail::pdl_wait;

using detail::from_float;
using detail::Rows;
using detail::to_float;

constexpr size_t kMaxPlans = 1024;
constexpr int64_t kIntMax = 0x7fffffff;

Status blas_status(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return Status::ok();
  const ErrorCode code = status == CUBLAS_STATUS_NOT_SUPPORTED  ? ErrorCode::kUnsupported
                         : status == CUBLAS_STATUS_ALLOC_FAILED ? ErrorCode::kResourceExhausted
                                                                : ErrorCode::kInternal;
  return make_error(code, "{}: {}", call, cublasLtGetStatusString(status));
}

#define VLLM_BLAS_RETURN_IF_ERROR(call) VLLM_RETURN_IF_ERROR(blas_status((call), #call))

// ---- Bias kernel (fallback epilogue, and K = 0) ----------------------------------------

// out[r, c] = (accumulate ? out[r, c] : 0) + (bias ? bias[c] : 0); one thread per column,
// rows on y (looping past 65535).
template <typename Out, typename Bias>
__global__ void bias_kernel(Out* out, int64_t ldo, const Bias* bias, int64_t rows, int64_t cols,
                            bool accumulate) {
  pdl_wait();
  pdl_launch_next();
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const float b = bias != nullptr ? to_float(bias[c]) : 0.0f;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    Out* o = out + r * ldo + c;
    *o = from_float<Out>((accumulate ? to_float(*o) : 0.0f) + b);
  }
}

template <typename Out>
Status launch_bias(Out* out, int64_t ldo, const void* bias, DType bias_dtype, int64_t rows,
                   int64_t cols, bool accumulate, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const dim3 grid(static_cast<unsigned>(detail::ceil_div(cols, kThreads)),
                  static_cast<unsigned>(std::min<int64_t>(rows, detail::kMaxGridY)));
  if (bias == nullptr || bias_dtype == DType::kF32) {
    launch_pdl(bias_kernel<Out, float>, grid, kThreads, 0, stream, out, ldo,
               static_cast<const float*>(bias), rows, cols, accumulate);
  } else {
    launch_pdl(bias_kernel<Out, __nv_bfloat16>, grid, kThreads, 0, stream, out, ldo,
               static_cast<const __nv_bfloat16*>(bias), rows, cols, accumulate);
  }
  return check_launch("bias_kernel");
}

Status add_bias(void* out, DType out_dtype, int64_t ldo, const void* bias, DType bias_dtype,
                int64_t rows, int64_t cols, bool accumulate, cudaStream_t stream) {
  if (out_dtype == DType::kF32) {
    return launch_bias(static_cast<float*>(out), ldo, bias, bias_dtype, rows, cols, accumulate,
                       stream);
  }
  return launch_bias(static_cast<__nv_bfloat16*>(out), ldo, bias, bias_dtype, rows, cols,
                     accumulate, stream);
}

// ---- Plans -------------------------------------------------------------------------------

struct PlanKey {
  int64_t m = 0, n = 0, k = 0, ldx = 0, ldo = 0;
  DType x_dtype = DType::kF32, out_dtype = DType::kF32;
  int bias_dtype = -1;  // -1: no bias
  uint32_t align_x = 0, align_w = 0, align_out = 0, align_bias = 0;
  bool operator==(const PlanKey&) const = default;
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& key) const {
    size_t h = 0;
    auto mix = [&h](uint64_t v) {
      h ^= std::hash<uint64_t>{}(v) + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    };
    mix(static_cast<uint64_t>(key.m));
    mix(static_cast<uint64_t>(key.n));
    mix(static_cast<uint64_t>(key.k));
    mix(static_cast<uint64_t>(key.ldx));
    mix(static_cast<uint64_t>(key.ldo));
    mix((static_cast<uint64_t>(key.x_dtype) << 16) | (static_cast<uint64_t>(key.out_dtype) << 8) |
        static_cast<uint64_t>(key.bias_dtype + 1));
    mix((static_cast<uint64_t>(key.align_x) << 24) | (static_cast<uint64_t>(key.align_w) << 16) |
        (static_cast<uint64_t>(key.align_out) << 8) | key.align_bias);
    return h;
  }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr;  // the weight
  cublasLtMatrixLayout_t b = nullptr;  // x
  cublasLtMatrixLayout_t d = nullptr;  // out (also C; beta = 0)
  cublasLtMatmulAlgo_t algo{};
  bool bias_epilogue = false;

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

// Least-recently-used map of plans.
class PlanCache {
 public:
  Plan* find(const PlanKey& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second.get();
  }

  Plan* insert(const PlanKey& key, std::unique_ptr<Plan> plan) {
    erase(key);
    order_.emplace_front(key, std::move(plan));
    index_[key] = order_.begin();
    while (order_.size() > kMaxPlans) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    return order_.front().second.get();
  }

  void erase(const PlanKey& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return;
    order_.erase(it->second);
    index_.erase(it);
  }

  size_t size() const { return order_.size(); }
  void clear() {
    index_.clear();
    order_.clear();
  }

 private:
  using Entry = std::pair<PlanKey, std::unique_ptr<Plan>>;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<PlanKey, std::list<Entry>::iterator, PlanKeyHash> index_;
};

cudaDataType_t cuda_type(DType dtype) {
  if (dtype == DType::kF8E4M3) return CUDA_R_8F_E4M3;
  return dtype == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
}

// The largest power of two up to 16 that divides the address (at least the element size).
uint32_t alignment(const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  uint32_t align = 16;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

template <typename T>
cublasStatus_t set_attr(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                        const T& value) {
  return cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value));
}

template <typename T>
cublasStatus_t set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                        const T& value) {
  return cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value));
}

class Preference {
 public:
  ~Preference() {
    if (pref_ != nullptr) cublasLtMatmulPreferenceDestroy(pref_);
  }
  cublasLtMatmulPreference_t* out() { return &pref_; }
  cublasLtMatmulPreference_t get() const { return pref_; }

 private:
  cublasLtMatmulPreference_t pref_ = nullptr;
};

}  // namespace

// ---- BlasContext -------------------------------------------------------------------------

struct BlasContext::Impl {
  Device device;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  PlanCache plans;
  int64_t gemv_max_rows = kGemvCrossoverRows;
  bool gemv_narrow = true;     // narrow outputs take the GEMV (kGemvNarrowMaxN)
  void* fp8_buffer = nullptr;  // linear_fp8's dequantized weight
  size_t fp8_buffer_bytes = 0;

  ~Impl() {
    plans.clear();
    DeviceGuard guard(device);
    if (fp8_buffer != nullptr) cudaFree(fp8_buffer);
    if (workspace != nullptr) cudaFree(workspace);
    if (handle != nullptr) cublasLtDestroy(handle);
  }

  // A plan for `key`, with the BIAS epilogue when `bias_epilogue` (bias_ptr: this call's bias,
  // whose address the heuristic inspects). kUnsupported when the heuristic has no algorithm.
  // W8A8 plans (key.x_dtype F8_E4M3) take this call's scales, whose addresses the heuristic
  // may inspect as it does the bias's.
  Expected<std::unique_ptr<Plan>> make_plan(const PlanKey& key, const void* bias_ptr,
                                            bool bias_epilogue, const float* w_scales = nullptr,
                                            const float* x_scales = nullptr) const {
    auto plan = std::make_unique<Plan>();
    VLLM_BLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int32_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    VLLM_BLAS_RETURN_IF_ERROR(set_attr(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, trans_a));
    VLLM_BLAS_RETURN_IF_ERROR(set_attr(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, trans_b));
    if (bias_epilogue) {
      const uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      const int32_t bias_type = cuda_type(static_cast<DType>(key.bias_dtype));
      VLLM_BLAS_RETURN_IF_ERROR(set_attr(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue));
      VLLM_BLAS_RETURN_IF_ERROR(
          set_attr(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type));
      VLLM_BLAS_RETURN_IF_ERROR(set_attr(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_ptr));
    }
    if (key.x_dtype == DType::kF8E4M3) {
      // W8A8: one F32 scale per 128 x 128 block of the weight, per 128 values of a row of x.
      const int32_t w_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
      const int32_t x_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
      VLLM_BLAS_RETURN_IF_ERROR(set_attr(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, w_mode));
      VLLM_BLAS_RETURN_IF_ERROR(set_attr(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, x_mode));
      VLLM_BLAS_RETURN_IF_ERROR(
          set_attr(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, w_scales));
      VLLM_BLAS_RETURN_IF_ERROR(
          set_attr(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, x_scales));
    }
    const cudaDataType_t in_type = cuda_type(key.x_dtype);
    VLLM_BLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->a, in_type, key.k, key.n, key.k));
    VLLM_BLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->b, in_type, key.k, key.m, key.ldx));
    VLLM_BLAS_RETURN_IF_ERROR(
        cublasLtMatrixLayoutCreate(&plan->d, cuda_type(key.out_dtype), key.n, key.m, key.ldo));

    Preference pref;
    VLLM_BLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(pref.out()));
    const uint64_t workspace_limit = workspace_bytes;
    VLLM_BLAS_RETURN_IF_ERROR(
        set_pref(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace_limit));
    VLLM_BLAS_RETURN_IF_ERROR(
        set_pref(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_w));
    VLLM_BLAS_RETURN_IF_ERROR(
        set_pref(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_x));
    VLLM_BLAS_RETURN_IF_ERROR(
        set_pref(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_out));
    VLLM_BLAS_RETURN_IF_ERROR(
        set_pref(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_out));

    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        handle, plan->desc, plan->a, plan->b, plan->d, plan->d, pref.get(), 1, &result, &found);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
      return make_error(
          ErrorCode::kUnsupported,
          "cuBLASLt has no algorithm for [{}, {}] x [{}, {}]^T ({} -> {}{}): {}", key.m, key.k,
          key.n, key.k, dtype_name(key.x_dtype), dtype_name(key.out_dtype),
          bias_epilogue ? ", bias epilogue" : "",
          status != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusString(status) : "no result");
    }
    plan->algo = result.algo;
    plan->bias_epilogue = bias_epilogue;
    return Expected<std::unique_ptr<Plan>>(std::move(plan));
  }

  // The cached plan for `key`, made on first use: with the bias epilogue when there is a bias
  // and the heuristic supports it, else without.
  Expected<Plan*> plan_for(const PlanKey& key, const void* bias_ptr, bool allow_bias_epilogue) {
    if (Plan* plan = plans.find(key)) return plan;
    if (bias_ptr != nullptr && allow_bias_epilogue) {
      auto with_bias = make_plan(key, bias_ptr, /*bias_epilogue=*/true);
      if (with_bias.has_value()) return plans.insert(key, std::move(*with_bias));
    }
    VLLM_ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan,
                          make_plan(key, nullptr, /*bias_epilogue=*/false));
    return plans.insert(key, std::move(plan));
  }
};

BlasContext::BlasContext(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BlasContext::~BlasContext() = default;

Expected<std::unique_ptr<BlasContext>> BlasContext::create(Device device, size_t workspace_bytes) {
  if (!device.is_cuda()) {
    return make_error(ErrorCode::kInvalidArgument, "BlasContext: {} is not a CUDA device",
                      device.to_string());
  }
  DeviceGuard guard(device);
  VLLM_RETURN_IF_ERROR(guard.status());
  auto impl = std::make_unique<Impl>();
  impl->device = device;
  // A tuning override for measurements: VLLM_CUDA_GEMV_MAX_ROWS=M sends products of up to M
  // rows (0 to kGemvMaxRows) to the GEMV instead of cuBLASLt.
  if (const char* env = std::getenv("VLLM_CUDA_GEMV_MAX_ROWS"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long rows = std::strtol(env, &end, 10);
    if (*end != '\0' || rows < 0 || rows > kGemvMaxRows) {
      return make_error(ErrorCode::kInvalidArgument,
                        "VLLM_CUDA_GEMV_MAX_ROWS={}: expected a row count from 0 to {}", env,
                        kGemvMaxRows);
    }
    impl->gemv_max_rows = rows;
  }
  VLLM_BLAS_RETURN_IF_ERROR(cublasLtCreate(&impl->handle));
  if (workspace_bytes > 0) {
    VLLM_RETURN_IF_ERROR(cuda_status(cudaMalloc(&impl->workspace, workspace_bytes), "cudaMalloc")
                             .with_context(fmt::format("the {}-byte cuBLASLt workspace on {}",
                                                       workspace_bytes, device.to_string())));
    impl->workspace_bytes = workspace_bytes;
  }
  return std::unique_ptr<BlasContext>(new BlasContext(std::move(impl)));
}

size_t BlasContext::cached_plans() const {
  return impl_->plans.size();
}

// ---- Op entries ----------------------------------------------------------------------------

namespace detail {

Expected<GemvProblem> gemv_problem(std::string_view op, const Tensor& x, const Tensor& weight,
                                   const Tensor& bias, Tensor& out) {
  VLLM_RETURN_IF_ERROR(check_cuda_tensor(op, "x", x, {DType::kF32, DType::kBF16}));
  if (x.ndim() != 2) {
    return make_error(ErrorCode::kInvalidArgument, "{}: x is {}, expected [M, K]", op,
                      x.to_string());
  }
  VLLM_RETURN_IF_ERROR(check_same_device(op, "weight", weight, x));
  VLLM_RETURN_IF_ERROR(check_same_dtype(op, "weight", weight, x));
  VLLM_RETURN_IF_ERROR(check_contiguous(op, "weight", weight));
  const int64_t M = x.size(0), K = x.size(1);
  if (weight.ndim() != 2 || weight.size(1) != K) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: weight is {}, expected [out_features, {}] (in_features = x's last dim)",
                      op, weight.to_string(), K);
  }
  const int64_t N = weight.size(0);
  if (bias.defined()) {
    VLLM_RETURN_IF_ERROR(check_same_device(op, "bias", bias, x));
    if (bias.dtype() != x.dtype() && bias.dtype() != DType::kF32) {
      return make_error(ErrorCode::kInvalidArgument, "{}: bias is {}, expected {} or F32", op,
                        bias.to_string(), dtype_name(x.dtype()));
    }
    if (bias.ndim() != 1 || bias.size(0) != N || !bias.is_contiguous()) {
      return make_error(ErrorCode::kInvalidArgument, "{}: bias is {}, expected a contiguous [{}]",
                        op, bias.to_string(), N);
    }
  }
  VLLM_RETURN_IF_ERROR(check_same_device(op, "out", out, x));
  if (out.dtype() != x.dtype() && !(x.dtype() == DType::kBF16 && out.dtype() == DType::kF32)) {
    return make_error(ErrorCode::kInvalidArgument, "{}: out is {}, expected {}{}", op,
                      out.to_string(), dtype_name(x.dtype()),
                      x.dtype() == DType::kBF16 ? " or F32" : "");
  }
  if (out.ndim() != 2 || out.size(0) != M || out.size(1) != N) {
    return make_error(ErrorCode::kInvalidArgument, "{}: out is {}, expected [{}, {}]", op,
                      out.to_string(), M, N);
  }
  VLLM_ASSIGN_OR_RETURN(Rows x_rows, as_rows(op, "x", x));
  VLLM_ASSIGN_OR_RETURN(Rows out_rows, as_rows(op, "out", out));
  if (M > kIntMax || N > kIntMax || K > kIntMax) {
    return make_error(ErrorCode::kUnsupported, "{}: [{}, {}] x [{}, {}]^T is too large", op, M, K,
                      N, K);
  }
  GemvProblem p;
  p.dtype = x.dtype();
  p.out_dtype = out.dtype();
  p.x = x_rows.data;
  p.ldx = x_rows.row_stride;
  p.weight = weight.data_ptr();
  p.bias = bias.defined() ? bias.data_ptr() : nullptr;
  p.bias_dtype = bias.defined() ? bias.dtype() : DType::kF32;
  p.out = out_rows.data;
  p.ldo = out_rows.row_stride;
  p.m = M;
  p.n = N;
  p.k = K;
  p.device = x.device().index;
  return p;
}

}  // namespace detail

Status BlasContext::set_gemv_max_rows(int64_t rows) {
  if (rows < 0 || rows > kGemvMaxRows) {
    return make_error(ErrorCode::kInvalidArgument,
                      "set_gemv_max_rows({}): the batched GEMV takes 0 to {} rows", rows,
                      kGemvMaxRows);
  }
  impl_->gemv_max_rows = rows;
  return Status::ok();
}

void BlasContext::set_gemv_narrow(bool on) {
  impl_->gemv_narrow = on;
}

int64_t BlasContext::gemv_max_rows() const {
  return impl_->gemv_max_rows;
}

namespace {

// linear(); `weight_written_before` says the weight is written by the kernel just before this
// product (the FP8 path's dequantization), which rules out the batched GEMV: it issues its
// first weight loads before pdl_wait, for weights no kernel writes (common.cuh).
Status linear_impl(BlasContext& blas, const Tensor& x, const Tensor& weight, const Tensor& bias,
                   Tensor& out, cudaStream_t stream, bool weight_written_before) {
  constexpr std::string_view kOp = "cuda::linear";
  BlasContext::Impl& impl = *blas.impl();
  VLLM_ASSIGN_OR_RETURN(detail::GemvProblem p, detail::gemv_problem(kOp, x, weight, bias, out));
  if (x.device() != impl.device) {
    return make_error(ErrorCode::kInvalidArgument, "{}: x is {}, but the BlasContext is on {}", kOp,
                      x.to_string(), impl.device.to_string());
  }
  const int64_t M = p.m, N = p.n, K = p.k;
  if (M == 0 || N == 0) return Status::ok();

  DeviceGuard guard(impl.device);
  VLLM_RETURN_IF_ERROR(guard.status());
  if (K == 0) {  // the empty sum: out = bias (or zeros)
    return add_bias(p.out, p.out_dtype, p.ldo, p.bias, p.bias_dtype, M, N, /*accumulate=*/false,
                    stream);
  }
  if (!weight_written_before && (M <= impl.gemv_max_rows ||
                                 (impl.gemv_narrow && M <= kGemvMaxRows && N <= kGemvNarrowMaxN))) {
    return detail::launch_gemv(p, stream);
  }

  PlanKey key;
  key.m = M;
  key.n = N;
  key.k = K;
  key.ldx = p.ldx;
  key.ldo = p.ldo;
  key.x_dtype = p.dtype;
  key.out_dtype = p.out_dtype;
  key.bias_dtype = p.bias != nullptr ? static_cast<int>(p.bias_dtype) : -1;
  key.align_x = alignment(p.x);
  key.align_w = alignment(p.weight);
  key.align_out = alignment(p.out);
  key.align_bias = p.bias != nullptr ? alignment(p.bias) : 0;

  const float alpha = 1.0f, beta = 0.0f;
  for (int attempt = 0;; ++attempt) {
    VLLM_ASSIGN_OR_RETURN(Plan * plan,
                          impl.plan_for(key, p.bias, /*allow_bias_epilogue=*/attempt == 0));
    if (plan->bias_epilogue) {
      VLLM_BLAS_RETURN_IF_ERROR(set_attr(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias));
    }
    const cublasStatus_t status = cublasLtMatmul(
        impl.handle, plan->desc, &alpha, p.weight, plan->a, p.x, plan->b, &beta, p.out, plan->d,
        p.out, plan->d, &plan->algo, impl.workspace, impl.workspace_bytes, stream);
    if (status == CUBLAS_STATUS_NOT_SUPPORTED && plan->bias_epilogue && attempt == 0) {
      impl.plans.erase(key);  // the epilogue was offered but not run: plan without it
      continue;
    }
    VLLM_RETURN_IF_ERROR(
        blas_status(status, "cublasLtMatmul")
            .with_context(fmt::format("{}: [{}, {}] x [{}, {}]^T", kOp, M, K, N, K)));
    if (p.bias != nullptr && !plan->bias_epilogue) {
      return add_bias(p.out, p.out_dtype, p.ldo, p.bias, p.bias_dtype, M, N, /*accumulate=*/true,
                      stream);
    }
    return Status::ok();
  }
}

}  // namespace

Status linear(BlasContext& blas, const Tensor& x, const Tensor& weight, const Tensor& bias,
              Tensor& out, cudaStream_t stream) {
  return linear_impl(blas, x, weight, bias, out, stream, /*weight_written_before=*/false);
}

Status gemv(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
            cudaStream_t stream) {
  constexpr std::string_view kOp = "cuda::gemv";
  VLLM_ASSIGN_OR_RETURN(detail::GemvProblem p, detail::gemv_problem(kOp, x, weight, bias, out));
  if (p.m > kGemvMaxRows) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: x has {} rows; the batched GEMV holds at most {} (cuda::linear takes "
                      "larger batches to cuBLASLt)",
                      kOp, p.m, kGemvMaxRows);
  }
  if (p.m == 0 || p.n == 0) return Status::ok();
  DeviceGuard guard(x.device());
  VLLM_RETURN_IF_ERROR(guard.status());
  if (p.k == 0) {
    return add_bias(p.out, p.out_dtype, p.ldo, p.bias, p.bias_dtype, p.m, p.n,
                    /*accumulate=*/false, stream);
  }
  return detail::launch_gemv(p, stream);
}

namespace {

// An FP8 weight's checks against a 2-D x: a well-formed contiguous F8_E4M3 [N, K] with its
// scales on x's device. Returns a tensor of x's dtype and the weight's shape that borrows the
// e4m3 bytes, for linear()'s output, bias and layout checks (gemv_problem).
Expected<Tensor> fp8_shape_only(std::string_view op, const Tensor& x, const LinearWeight& weight) {
  if (!weight.is_fp8()) {
    return make_error(ErrorCode::kInvalidArgument, "{}: weight is {}, expected F8_E4M3", op,
                      weight.to_string());
  }
  VLLM_RETURN_IF_ERROR(check_linear_weight(op, weight));
  VLLM_RETURN_IF_ERROR(detail::check_same_device(op, "weight", weight.weight, x));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(op, "weight", weight.weight));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(op, "weight scales", weight.scale_inv));
  const int64_t K = x.size(1);
  if (weight.ndim() != 2 || weight.size(1) != K) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: weight is {}, expected [out_features, {}] (in_features = x's last dim)",
                      op, weight.to_string(), K);
  }
  return Tensor::borrow(const_cast<void*>(weight.weight.data_ptr()), {weight.size(0), K}, x.dtype(),
                        x.device(), nullptr);
}

// A checked FP8 weight's scales into a GEMV problem.
void set_fp8_scales(detail::GemvProblem& p, const LinearWeight& weight) {
  p.scales = weight.scale_inv.data<float>();
  p.scale_cols = weight.scale_inv.size(1);
  p.block_n = weight.block.n;
  p.block_k = weight.block.k;
}

}  // namespace

bool add_rms_norm_linear_fits(const Tensor& x, const LinearWeight& weight) {
  if (!x.defined() || !weight.defined() || !x.device().is_cuda() || x.ndim() != 2 ||
      weight.ndim() != 2 || x.dtype() != DType::kBF16) {
    return false;
  }
  const bool fp8 = weight.is_fp8();
  if (fp8) {  // the tensor-core GEMV's FP8 conditions (gemv_fp8_fits) that x does not decide
    if (!weight.scale_inv.defined() ||
        !detail::gemv_fp8_blocks_fit(weight.block.n, weight.block.k) ||
        !detail::is_aligned(weight.weight.data_ptr(), 16)) {
      return false;
    }
  } else if (weight.dtype() != DType::kBF16) {
    return false;
  }
  return detail::gemv_norm_fits(x.size(0), weight.size(0), x.size(1),
                                multiprocessor_count(x.device().index), fp8);
}

Status add_rms_norm_linear(const Tensor& x, const Tensor& residual, const Tensor& norm_weight,
                           float eps, bool unit_offset, const LinearWeight& weight,
                           Tensor& residual_out, Tensor& normed, Tensor& out, cudaStream_t stream) {
  constexpr std::string_view kOp = "cuda::add_rms_norm_linear";
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, "x", x, {DType::kBF16}));
  if (x.ndim() != 2) {
    return make_error(ErrorCode::kInvalidArgument, "{}: x is {}, expected [M, K]", kOp,
                      x.to_string());
  }
  Tensor w = weight.weight;
  if (weight.is_fp8()) {
    VLLM_ASSIGN_OR_RETURN(w, fp8_shape_only(kOp, x, weight));
  }
  VLLM_ASSIGN_OR_RETURN(detail::GemvProblem p, detail::gemv_problem(kOp, x, w, Tensor(), out));
  if (weight.is_fp8()) set_fp8_scales(p, weight);
  const int64_t M = p.m, K = p.k;
  for (auto [name, t] : {std::pair<std::string_view, const Tensor*>{"residual", &residual},
                         {"residual_out", &residual_out}}) {
    VLLM_RETURN_IF_ERROR(detail::check_same_device(kOp, name, *t, x));
    VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, name, *t, {DType::kF32}));
    if (t->shape() != x.shape()) {
      return make_error(ErrorCode::kInvalidArgument, "{}: {} is {}, expected [{}, {}]", kOp, name,
                        t->to_string(), M, K);
    }
  }
  const bool store_normed = normed.defined();
  if (store_normed) {
    VLLM_RETURN_IF_ERROR(detail::check_same_device(kOp, "normed", normed, x));
    VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, "normed", normed, {DType::kBF16}));
    if (normed.shape() != x.shape()) {
      return make_error(ErrorCode::kInvalidArgument, "{}: normed is {}, expected [{}, {}]", kOp,
                        normed.to_string(), M, K);
    }
  }
  VLLM_RETURN_IF_ERROR(detail::check_same_device(kOp, "norm_weight", norm_weight, x));
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, "norm_weight", norm_weight, {DType::kBF16}));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "norm_weight", norm_weight));
  if (norm_weight.ndim() != 1 || norm_weight.size(0) != K) {
    return make_error(ErrorCode::kInvalidArgument, "{}: norm_weight is {}, expected [{}]", kOp,
                      norm_weight.to_string(), K);
  }
  if (M == 0 || p.n == 0) return Status::ok();
  VLLM_ASSIGN_OR_RETURN(detail::Rows x_rows, detail::as_rows(kOp, "x", x));
  VLLM_ASSIGN_OR_RETURN(detail::Rows res, detail::as_rows(kOp, "residual", residual));
  VLLM_ASSIGN_OR_RETURN(detail::Rows res_out, detail::as_rows(kOp, "residual_out", residual_out));
  detail::Rows nrm{};
  if (store_normed) {
    VLLM_ASSIGN_OR_RETURN(nrm, detail::as_rows(kOp, "normed", normed));
  }
  // Every block reads x and residual whole, and block 0 writes residual_out and normed.
  for (auto [name, rows, size] : {std::tuple<std::string_view, const detail::Rows*, size_t>{
                                      "residual_out", &res_out, sizeof(float)},
                                  {"normed", &nrm, sizeof(uint16_t)}}) {
    if (rows->data == nullptr) continue;  // normed not stored
    VLLM_RETURN_IF_ERROR(
        detail::check_no_overlap(kOp, name, *rows, size, "x", x_rows, sizeof(uint16_t)));
    VLLM_RETURN_IF_ERROR(
        detail::check_no_overlap(kOp, name, *rows, size, "residual", res, sizeof(float)));
  }
  if (store_normed) {
    VLLM_RETURN_IF_ERROR(detail::check_no_overlap(kOp, "residual_out", res_out, sizeof(float),
                                                  "normed", nrm, sizeof(uint16_t)));
  }
  if (!add_rms_norm_linear_fits(x, weight)) {
    return make_error(ErrorCode::kUnsupported,
                      "{}: [{}, {}] x [{}, {}]^T is not a size the fused GEMV takes "
                      "(add_rms_norm_linear_fits)",
                      kOp, M, K, p.n, K);
  }
  detail::GemvNormProblem np;
  np.residual = static_cast<const float*>(res.data);
  np.ld_residual = res.row_stride;
  np.residual_out = static_cast<float*>(res_out.data);
  np.ld_residual_out = res_out.row_stride;
  np.weight = norm_weight.data_ptr();
  np.normed = nrm.data;
  np.ld_normed = nrm.row_stride;
  np.eps = eps;
  np.unit_offset = unit_offset;
  DeviceGuard guard(x.device());
  VLLM_RETURN_IF_ERROR(guard.status());
  return detail::launch_gemv_norm(p, np, stream);
}

namespace {

// The checks linear_fp8 and linear_fp8_w8a8 share: x on the context's device, a well-formed
// contiguous FP8 weight [N, K] (fp8_shape_only), then linear()'s output, bias and layout checks
// on a float weight of the same shape (`shape_only`, which borrows the e4m3 bytes).
struct Fp8Operands {
  detail::GemvProblem p;
  Tensor shape_only;
};

Expected<Fp8Operands> fp8_operands(std::string_view op, const BlasContext::Impl& impl,
                                   const Tensor& x, const LinearWeight& weight, const Tensor& bias,
                                   Tensor& out) {
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(op, "x", x, {DType::kF32, DType::kBF16}));
  if (x.ndim() != 2) {
    return make_error(ErrorCode::kInvalidArgument, "{}: x is {}, expected [M, K]", op,
                      x.to_string());
  }
  if (x.device() != impl.device) {
    return make_error(ErrorCode::kInvalidArgument, "{}: x is {}, but the BlasContext is on {}", op,
                      x.to_string(), impl.device.to_string());
  }
  Fp8Operands o;
  VLLM_ASSIGN_OR_RETURN(o.shape_only, fp8_shape_only(op, x, weight));
  VLLM_ASSIGN_OR_RETURN(o.p, detail::gemv_problem(op, x, o.shape_only, bias, out));
  return o;
}

}  // namespace

Status linear_fp8(BlasContext& blas, const Tensor& x, const LinearWeight& weight,
                  const Tensor& bias, Tensor& out, cudaStream_t stream) {
  constexpr std::string_view kOp = "cuda::linear (FP8 weight)";
  BlasContext::Impl& impl = *blas.impl();
  VLLM_ASSIGN_OR_RETURN(Fp8Operands ops, fp8_operands(kOp, impl, x, weight, bias, out));
  const detail::GemvProblem& p = ops.p;
  const int64_t M = p.m, N = p.n, K = p.k;
  if (M == 0 || N == 0 || K == 0) return linear(blas, x, ops.shape_only, bias, out, stream);

  DeviceGuard guard(impl.device);
  VLLM_RETURN_IF_ERROR(guard.status());
  detail::Fp8Matrix w;
  w.data = static_cast<const uint8_t*>(weight.weight.data_ptr());
  w.scales = weight.scale_inv.data<float>();
  w.n = N;
  w.k = K;
  w.scale_cols = weight.scale_inv.size(1);
  w.block_n = weight.block.n;
  w.block_k = weight.block.k;
  if (M <= detail::kFp8GemvMaxRows) {
    // The tensor-core GEMV where it takes the weight (BF16 x, 16-byte rows, blocks of 16-row
    // multiples by power-of-two columns), the FP8 GEMV's CUDA-core kernel otherwise.
    detail::GemvProblem tc = p;
    set_fp8_scales(tc, weight);
    if (detail::gemv_fp8_fits(tc)) return detail::launch_gemv(tc, stream);
    detail::Fp8GemvProblem g;
    g.x_dtype = p.dtype;
    g.out_dtype = p.out_dtype;
    g.x = p.x;
    g.ldx = p.ldx;
    g.w = w;
    g.bias = p.bias;
    g.bias_dtype = p.bias_dtype;
    g.out = p.out;
    g.ldo = p.ldo;
    g.m = M;
    return detail::launch_fp8_gemv(g, stream);
  }
  const size_t bytes = static_cast<size_t>(N * K) * dtype_size(x.dtype());
  if (bytes > impl.fp8_buffer_bytes) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    VLLM_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capture));
    if (capture != cudaStreamCaptureStatusNone) {
      return make_error(ErrorCode::kInternal,
                        "{}: [{}, {}] x [{}, {}]^T needs a {}-byte dequantization buffer (the "
                        "context has {}) while the stream is captured into a CUDA graph",
                        kOp, M, K, N, K, bytes, impl.fp8_buffer_bytes);
    }
    if (impl.fp8_buffer != nullptr) {
      VLLM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));  // the old buffer's last reader
      VLLM_CUDA_RETURN_IF_ERROR(cudaFree(impl.fp8_buffer));
      impl.fp8_buffer = nullptr;
      impl.fp8_buffer_bytes = 0;
    }
    VLLM_RETURN_IF_ERROR(cuda_status(cudaMalloc(&impl.fp8_buffer, bytes), "cudaMalloc")
                             .with_context(fmt::format("{}: the {}-byte dequantization buffer of "
                                                       "an FP8 weight [{}, {}]",
                                                       kOp, bytes, N, K)));
    impl.fp8_buffer_bytes = bytes;
  }
  VLLM_RETURN_IF_ERROR(detail::launch_fp8_dequantize(w, x.dtype(), impl.fp8_buffer, stream));
  const Tensor dense = Tensor::borrow(impl.fp8_buffer, {N, K}, x.dtype(), x.device(), nullptr);
  return linear_impl(blas, x, dense, bias, out, stream, /*weight_written_before=*/true);
}

bool linear_fp8_w8a8_fits(const Tensor& x, const LinearWeight& weight) {
  if (!x.defined() || !weight.is_fp8() || !x.device().is_cuda() || x.ndim() != 2 ||
      weight.ndim() != 2 || (x.dtype() != DType::kBF16 && x.dtype() != DType::kF32)) {
    return false;
  }
  const int64_t N = weight.size(0), K = weight.size(1);
  return weight.block == WeightBlock{detail::kFp8ActivationGroup, detail::kFp8ActivationGroup} &&
         x.size(1) == K && K > 0 && K % kFp8W8A8KMultiple == 0 && N > 0 &&
         N % detail::kFp8ActivationGroup == 0 && runs_sm90a(x.device().index);
}

bool use_fp8_w8a8(const Tensor& x, const LinearWeight& weight) {
  return x.defined() && x.ndim() == 2 && x.size(0) >= kFp8W8A8MinRows &&
         linear_fp8_w8a8_fits(x, weight);
}

Status linear_fp8_w8a8(BlasContext& blas, const Tensor& x, const LinearWeight& weight,
                       const Tensor& bias, Tensor& x_q, Tensor& x_scales, Tensor& out_pad,
                       Tensor& out, cudaStream_t stream) {
  constexpr std::string_view kOp = "cuda::linear_fp8_w8a8";
  BlasContext::Impl& impl = *blas.impl();
  VLLM_ASSIGN_OR_RETURN(Fp8Operands ops, fp8_operands(kOp, impl, x, weight, bias, out));
  if (!linear_fp8_w8a8_fits(x, weight)) {
    return make_error(ErrorCode::kUnsupported,
                      "{}: x {} and weight {} are not a W8A8 product (a block-scaled FP8 weight "
                      "in 128x128 blocks, K a multiple of 512 and N of 128, on compute capability "
                      "9.0; linear_fp8 takes the others)",
                      kOp, x.to_string(), weight.to_string());
  }
  const detail::GemvProblem& p = ops.p;
  const int64_t M = p.m, K = p.k, N = p.n;
  const int64_t M_pad = fp8_w8a8_rows(M);
  const int64_t groups = K / detail::kFp8ActivationGroup;
  for (auto [name, t, dtype, shape] : {std::tuple<std::string_view, const Tensor*, DType, Shape>{
                                           "x_q", &x_q, DType::kF8E4M3, {M_pad, K}},
                                       {"x_scales", &x_scales, DType::kF32, {groups, M_pad}},
                                       {"out_pad", &out_pad, out.dtype(), {M_pad, N}}}) {
    if (name == "out_pad" && M_pad == M) continue;
    VLLM_RETURN_IF_ERROR(detail::check_same_device(kOp, name, *t, x));
    if (t->dtype() != dtype || t->shape() != shape || !t->is_contiguous()) {
      return make_error(ErrorCode::kInvalidArgument, "{}: {} is {}, expected a contiguous {}{}",
                        kOp, name, t->to_string(), dtype_name(dtype), shape_to_string(shape));
    }
  }
  if (M == 0) return Status::ok();
  DeviceGuard guard(impl.device);
  VLLM_RETURN_IF_ERROR(guard.status());

  detail::Fp8QuantizeProblem qp;
  qp.x_dtype = x.dtype();
  qp.x = p.x;
  qp.ldx = p.ldx;
  qp.q = static_cast<uint8_t*>(x_q.data_ptr());
  qp.scales = x_scales.data<float>();
  qp.m = M;
  qp.m_pad = M_pad;
  qp.k = K;
  VLLM_RETURN_IF_ERROR(detail::launch_fp8_quantize_token_groups(qp, stream));

  // The product's rows: out itself, or out_pad when padding rows need somewhere to go.
  const bool padded = M_pad != M;
  void* d = padded ? out_pad.data_ptr() : p.out;
  const int64_t ldd = padded ? N : p.ldo;
  PlanKey key;
  key.m = M_pad;
  key.n = N;
  key.k = K;
  key.ldx = K;
  key.ldo = ldd;
  key.x_dtype = DType::kF8E4M3;
  key.out_dtype = p.out_dtype;
  key.align_x = alignment(qp.q);
  key.align_w = alignment(weight.weight.data_ptr());
  key.align_out = alignment(d);
  const float* w_scales = weight.scale_inv.data<float>();
  Plan* plan = impl.plans.find(key);
  if (plan == nullptr) {
    VLLM_ASSIGN_OR_RETURN(
        std::unique_ptr<Plan> made,
        impl.make_plan(key, nullptr, /*bias_epilogue=*/false, w_scales, qp.scales));
    plan = impl.plans.insert(key, std::move(made));
  }
  VLLM_BLAS_RETURN_IF_ERROR(set_attr(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, w_scales));
  VLLM_BLAS_RETURN_IF_ERROR(set_attr(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                     static_cast<const float*>(qp.scales)));
  const float alpha = 1.0f, beta = 0.0f;
  VLLM_RETURN_IF_ERROR(
      blas_status(cublasLtMatmul(impl.handle, plan->desc, &alpha, weight.weight.data_ptr(), plan->a,
                                 qp.q, plan->b, &beta, d, plan->d, d, plan->d, &plan->algo,
                                 impl.workspace, impl.workspace_bytes, stream),
                  "cublasLtMatmul")
          .with_context(fmt::format("{}: [{}, {}] x fp8[{}, {}]^T", kOp, M_pad, K, N, K)));
  if (padded) {
    const size_t esize = dtype_size(p.out_dtype);
    VLLM_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(p.out, p.ldo * esize, d, N * esize, N * esize, M,
                                                cudaMemcpyDeviceToDevice, stream));
  }
  if (p.bias != nullptr) {
    return add_bias(p.out, p.out_dtype, p.ldo, p.bias, p.bias_dtype, M, N, /*accumulate=*/true,
                    stream);
  }
  return Status::ok();
}

}  // namespace vllm::cuda
