// The paged-attention op entry: checks every argument on the host before any CUDA call,
// plans the key split (attention_plan.h) and launches the kernels for the tensor's dtype and
// head dim: the small-query kernel (always: decode rows, and NaN for requests that break the
// bounds; for BF16 attention_decode_mma.cuh on tensor cores unless
// params.decode_tensor_cores is off, attention_tiled.cuh otherwise), the split combine (when
// keys were split) and the prefill kernel (when some
// request has more than kSmallRows query rows; for BF16 sm90a/attention_wgmma.cu on
// compute capability 9.0 devices at head dims 128 and 256 (BF16 or FP8 cache),
// attention_mma.cuh elsewhere, unless params.tensor_cores is off; attention_tiled.cuh
// otherwise). Every kernel
// is instantiated for a cache of the query's dtype and for an FP8 one (C = KvFp8).
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/attention_plan.h"
#include "backend/cuda/attention_wgmma.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/kv_fp8.cuh"
#include "backend/cuda/runtime.h"

namespace vllm::cuda {
namespace {

using detail::AttentionArgs;

constexpr const char* kOp = "cuda::paged_attention";
constexpr int64_t kMaxGridYZ = 65535;
constexpr float kLog2e = 1.4426950408889634f;

bool is_power_of_two(int64_t v) {
  return v > 0 && (v & (v - 1)) == 0;
}

int log2_of(int64_t v) {
  int n = 0;
  while ((int64_t{1} << n) < v) ++n;
  return n;
}

Status check_index_vector(const Tensor& t, const char* name, int64_t expected_len, Device device) {
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, name, t, {DType::kI32}));
  if (t.ndim() != 1 || !t.is_contiguous() || (expected_len >= 0 && t.size(0) != expected_len)) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} must be a contiguous I32 [{}], got {}",
                      kOp, name, expected_len, t.to_string());
  }
  if (t.device() != device) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} {} is not on query's device", kOp, name,
                      t.to_string());
  }
  return Status::ok();
}

// Rows of query / out, with the 16-byte alignment the kernels' vector accesses need.
Expected<detail::Rows> activation_rows(const Tensor& t, const char* name, int64_t head_dim,
                                       bool aligned) {
  if (t.ndim() == 3 && (t.size(2) != head_dim || !t.is_contiguous())) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: {} {} must be [T, Hq * {}] or contiguous [T, Hq, {}]", kOp, name,
                      t.to_string(), head_dim, head_dim);
  }
  if (t.ndim() != 2 && t.ndim() != 3) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} {} must be [T, Hq * {}]", kOp, name,
                      t.to_string(), head_dim);
  }
  VLLM_ASSIGN_OR_RETURN(detail::Rows rows, detail::as_rows(kOp, name, t));
  const int64_t elem = static_cast<int64_t>(t.element_size());
  if (aligned && (!detail::is_aligned(rows.data, 16) || (rows.row_stride * elem) % 16 != 0)) {
    return make_error(ErrorCode::kUnsupported,
                      "{}: {} {} rows must start at 16-byte aligned addresses (row stride {} "
                      "elements)",
                      kOp, name, t.to_string(), rows.row_stride);
  }
  return rows;
}

template <typename T, int D, typename C>
Status run(const AttentionArgs& args, int num_requests, bool need_large, cudaStream_t stream) {
  if (Status s = detail::launch_attention_small<T, D, C>(args, num_requests, stream); !s.is_ok()) {
    return s;
  }
  if (args.num_splits > 1) {
    if (Status s = detail::launch_attention_combine<T, D>(args, num_requests, stream); !s.is_ok()) {
      return s;
    }
  }
  if (!need_large) return Status::ok();
  return detail::launch_attention_large<T, D, C>(args, num_requests, stream);
}

template <typename T, typename C>
Status run_head_dim(int64_t head_dim, const AttentionArgs& args, int num_requests, bool need_large,
                    cudaStream_t stream) {
  switch (head_dim) {
    case 64:
      return run<T, 64, C>(args, num_requests, need_large, stream);
    case 128:
      return run<T, 128, C>(args, num_requests, need_large, stream);
    case 256:
      return run<T, 256, C>(args, num_requests, need_large, stream);
    default:
      return make_error(ErrorCode::kInternal, "{}: unchecked head_dim {}", kOp, head_dim);
  }
}

}  // namespace

size_t paged_attention_workspace_size(int64_t num_requests, int64_t num_kv_heads, int64_t head_dim,
                                      int64_t max_seq_len) {
  if (num_requests <= 0 || num_kv_heads <= 0 || head_dim <= 0) return 0;
  const detail::SplitPlan plan = detail::plan_splits(num_requests, num_kv_heads, max_seq_len);
  return detail::split_workspace_floats(num_requests, num_kv_heads, head_dim, plan) * sizeof(float);
}

size_t paged_attention_max_workspace_size(int64_t head_dim) {
  // A split plan keeps R * Hk * num_splits below 2 * kTargetSplitBlocks (attention_plan.h).
  const int64_t slots = int64_t{2} * detail::kTargetSplitBlocks * detail::kSmallRows;
  return static_cast<size_t>(slots * (head_dim + 2)) * sizeof(float);
}

Status paged_attention(const Tensor& query, const Tensor& kv_cache, const Tensor& block_tables,
                       const PagedAttentionParams& params, Tensor& workspace, Tensor& out,
                       cudaStream_t stream) {
  // ---- Tensors, dtypes and shapes (no CUDA call before all of them pass) ----
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, "query", query, {DType::kF32, DType::kBF16}));
  const Device device = query.device();
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, "kv_cache", kv_cache));
  const bool fp8 = kv_cache.dtype() == DType::kF8E4M3;
  if (!fp8) VLLM_RETURN_IF_ERROR(detail::check_same_dtype(kOp, "kv_cache", kv_cache, query));
  if (fp8) VLLM_RETURN_IF_ERROR(check_kv_cache_scales(params.kv_scales));
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, "out", out));
  VLLM_RETURN_IF_ERROR(detail::check_same_dtype(kOp, "out", out, query));
  if (kv_cache.ndim() != 5 || kv_cache.size(1) != 2 || !kv_cache.is_contiguous()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: kv_cache must be a contiguous [num_blocks, 2, block_size, kv_heads, "
                      "head_dim] tensor, got {}",
                      kOp, kv_cache.to_string());
  }
  const int64_t num_blocks = kv_cache.size(0);
  const int64_t block_size = kv_cache.size(2);
  const int64_t kv_heads = kv_cache.size(3);
  const int64_t head_dim = kv_cache.size(4);
  // 64, 128 and 256 take the tiled kernels; other sizes up to 256 a slow generic one.
  const bool tiled = head_dim == 64 || head_dim == 128 || head_dim == 256;
  if (head_dim <= 0 || head_dim > 256) {
    return make_error(ErrorCode::kUnsupported,
                      "{}: head_dim {} is not supported (at most 256), kv_cache {}", kOp, head_dim,
                      kv_cache.to_string());
  }
  if (!is_power_of_two(block_size)) {
    return make_error(ErrorCode::kUnsupported,
                      "{}: block_size {} is not a power of two, kv_cache {}", kOp, block_size,
                      kv_cache.to_string());
  }
  if (kv_heads <= 0 || kv_heads > kMaxGridYZ || num_blocks > std::numeric_limits<int32_t>::max()) {
    return make_error(ErrorCode::kUnsupported, "{}: kv_cache {} has {} kv heads and {} blocks", kOp,
                      kv_cache.to_string(), kv_heads, num_blocks);
  }
  if (tiled && !detail::is_aligned(kv_cache.data_ptr(), 16)) {
    return make_error(ErrorCode::kUnsupported, "{}: kv_cache {} must start 16-byte aligned", kOp,
                      kv_cache.to_string());
  }
  VLLM_ASSIGN_OR_RETURN(detail::Rows q_rows, activation_rows(query, "query", head_dim, tiled));
  VLLM_ASSIGN_OR_RETURN(detail::Rows out_rows, activation_rows(out, "out", head_dim, tiled));
  if (q_rows.cols % head_dim != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: query {} rows of {} are not whole heads of head_dim {}", kOp,
                      query.to_string(), q_rows.cols, head_dim);
  }
  const int64_t q_heads = q_rows.cols / head_dim;
  if (q_heads % kv_heads != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: query heads {} are not a multiple of kv heads {}", kOp, q_heads,
                      kv_heads);
  }
  const int64_t tokens = q_rows.rows;
  if (out_rows.rows != tokens || out_rows.cols != q_rows.cols) {
    return make_error(ErrorCode::kInvalidArgument, "{}: out {} must have query's shape {}", kOp,
                      out.to_string(), shape_to_string(query.shape()));
  }
  if (tokens * (q_heads / kv_heads) > std::numeric_limits<int32_t>::max()) {
    return make_error(ErrorCode::kUnsupported,
                      "{}: {} query tokens x {} query heads per kv head exceed 2^31 - 1", kOp,
                      tokens, q_heads / kv_heads);
  }
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, "block_tables", block_tables, {DType::kI32}));
  VLLM_RETURN_IF_ERROR(
      check_index_vector(params.seq_lens, "seq_lens", /*expected_len=*/-1, device));
  const int64_t num_requests = params.seq_lens.size(0);
  VLLM_RETURN_IF_ERROR(
      check_index_vector(params.query_start_loc, "query_start_loc", num_requests + 1, device));
  if (block_tables.ndim() != 2 || !block_tables.is_contiguous() ||
      block_tables.size(0) < num_requests) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: block_tables must be a contiguous I32 [R >= {}, max_blocks], got {}",
                      kOp, num_requests, block_tables.to_string());
  }
  if (num_requests > kMaxGridYZ) {
    return make_error(ErrorCode::kUnsupported, "{}: {} requests exceed the {} a launch covers", kOp,
                      num_requests, kMaxGridYZ);
  }
  const int64_t max_blocks = block_tables.size(1);
  if (params.max_query_len < 0 || params.max_query_len > tokens || params.max_seq_len < 0 ||
      params.max_seq_len > max_blocks * block_size) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: max_query_len {} must be in [0, {} tokens] and max_seq_len {} in [0, "
                      "{}] (block_tables has {} blocks of {} per request)",
                      kOp, params.max_query_len, tokens, params.max_seq_len,
                      max_blocks * block_size, max_blocks, block_size);
  }
  if (!std::isfinite(params.scale)) {
    return make_error(ErrorCode::kInvalidArgument, "{}: scale {} is not finite", kOp, params.scale);
  }
  for (const Tensor* t : std::initializer_list<const Tensor*>{&kv_cache, &out, &block_tables}) {
    if (t->device() != device) {
      return make_error(ErrorCode::kInvalidArgument, "{}: {} is not on query's device {}", kOp,
                        t->to_string(), device.to_string());
    }
  }

  detail::SplitPlan plan;
  plan.chunk = params.max_seq_len > 0 ? params.max_seq_len : 1;
  size_t workspace_bytes = 0;
  if (workspace.defined() && tiled) {
    VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, "workspace", workspace));
    plan = detail::plan_splits(num_requests, kv_heads, params.max_seq_len);
    workspace_bytes =
        detail::split_workspace_floats(num_requests, kv_heads, head_dim, plan) * sizeof(float);
    if (workspace.device() != device || !workspace.is_contiguous() ||
        !detail::is_aligned(workspace.data_ptr(), 16) || workspace.nbytes() < workspace_bytes) {
      return make_error(ErrorCode::kInvalidArgument,
                        "{}: workspace {} must be a contiguous, 16-byte aligned tensor of at "
                        "least {} bytes on {} (paged_attention_workspace_size)",
                        kOp, workspace.to_string(), workspace_bytes, device.to_string());
    }
  }
  if (tokens == 0 || num_requests == 0) return Status::ok();

  // ---- Launch ----
  AttentionArgs args;
  args.query = q_rows.data;
  args.query_stride = q_rows.row_stride;
  args.out = out_rows.data;
  args.out_stride = out_rows.row_stride;
  args.kv_cache = kv_cache.data_ptr();
  args.num_blocks = static_cast<int32_t>(num_blocks);
  args.block_size_log2 = log2_of(block_size);
  args.num_kv_heads = static_cast<int32_t>(kv_heads);
  args.block_tables = static_cast<const int32_t*>(block_tables.data_ptr());
  args.max_blocks_per_seq = static_cast<int32_t>(max_blocks);
  args.query_start_loc = static_cast<const int32_t*>(params.query_start_loc.data_ptr());
  args.seq_lens = static_cast<const int32_t*>(params.seq_lens.data_ptr());
  args.num_tokens = static_cast<int32_t>(tokens);
  args.group = static_cast<int32_t>(q_heads / kv_heads);
  args.max_query_len = params.max_query_len;
  args.max_seq_len = params.max_seq_len;
  // An FP8 cache's k_scale joins the softmax scale, its v_scale the outputs (kv_fp8.cuh).
  args.scale_log2 = params.scale * (fp8 ? params.kv_scales.k_scale : 1.0f) * kLog2e;
  args.v_scale = fp8 ? params.kv_scales.v_scale : 1.0f;
  args.tensor_cores = params.tensor_cores;
  args.decode_tensor_cores = params.decode_tensor_cores;
  args.wgmma = detail::use_wgmma_prefill(query.dtype(), kv_cache.dtype(), head_dim,
                                         params.tensor_cores, params.wgmma) &&
               runs_sm90a(device.index);
  args.num_splits = plan.num_splits;
  if (plan.num_splits > 1) {
    args.partial_o = static_cast<float*>(workspace.data_ptr());
    args.partial_ml =
        args.partial_o + num_requests * kv_heads * plan.num_splits * detail::kSmallRows * head_dim;
  }
  const bool need_large =
      static_cast<int64_t>(params.max_query_len) * args.group > detail::kSmallRows;

  DeviceGuard guard(device);
  VLLM_RETURN_IF_ERROR(guard.status());
  const int r = static_cast<int>(num_requests);
  using detail::KvFp8;
  const bool f32 = query.dtype() == DType::kF32;
  if (!tiled) {
    const int d = static_cast<int>(head_dim);
    if (fp8) {
      return f32 ? detail::launch_attention_generic<float, KvFp8>(args, d, r, stream)
                 : detail::launch_attention_generic<__nv_bfloat16, KvFp8>(args, d, r, stream);
    }
    return f32 ? detail::launch_attention_generic<float>(args, d, r, stream)
               : detail::launch_attention_generic<__nv_bfloat16>(args, d, r, stream);
  }
  if (fp8) {
    return f32 ? run_head_dim<float, KvFp8>(head_dim, args, r, need_large, stream)
               : run_head_dim<__nv_bfloat16, KvFp8>(head_dim, args, r, need_large, stream);
  }
  return f32 ? run_head_dim<float, float>(head_dim, args, r, need_large, stream)
             : run_head_dim<__nv_bfloat16, __nv_bfloat16>(head_dim, args, r, need_large, stream);
}

}  // namespace vllm::cuda
