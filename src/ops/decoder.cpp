// Decoder ops of the op layer (ops.h): each checks nothing the backend op does not check
// itself and dispatches on the output's device.
#include <cmath>

#include "backend/cpu/attention.h"
#include "backend/cpu/gates.h"
#include "backend/cpu/ops.h"
#include "base/profile.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

#if VLLM_WITH_CUDA
#include "backend/cuda/attention.cuh"
#include "backend/cuda/cache.cuh"
#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/gemm.cuh"
#include "backend/cuda/norm.cuh"
#include "backend/cuda/rope.cuh"
#endif

namespace vllm::ops {

using detail::unsupported;
#if VLLM_WITH_CUDA
using detail::stream;
#endif

Status embedding(const ExecContext& ctx, const Tensor& token_ids, const Tensor& table,
                 Tensor& out) {
  VLLM_PROFILE_SCOPE("embedding");
  if (out.device().is_cpu()) return cpu::embedding(token_ids, table, out);
#if VLLM_WITH_CUDA
  if (out.device().is_cuda()) return cuda::embedding(token_ids, table, out, stream(ctx));
#endif
  return unsupported("embedding", out);
}

Status embedding_shard(const ExecContext& ctx, const Tensor& token_ids, const Tensor& table,
                       int64_t vocab_start, int64_t vocab_size, Tensor& out) {
  VLLM_PROFILE_SCOPE("embedding");
  if (out.device().is_cpu()) {
    return cpu::embedding_shard(token_ids, table, vocab_start, vocab_size, out);
  }
  return unsupported("embedding_shard (vocab-parallel embedding)", out);
}

Status rms_norm(const ExecContext& ctx, const Tensor& x, const Tensor& weight, float eps,
                bool unit_offset, Tensor& out) {
  VLLM_PROFILE_SCOPE("rms_norm");
  if (out.device().is_cpu()) return cpu::rms_norm(x, weight, eps, unit_offset, out);
#if VLLM_WITH_CUDA
  if (out.device().is_cuda()) {
    return cuda::rms_norm(x, weight, eps, unit_offset, out, stream(ctx));
  }
#endif
  return unsupported("rms_norm", out);
}

Status fused_add_rms_norm(const ExecContext& ctx, Tensor& x, Tensor& residual, const Tensor& weight,
                          float eps, bool unit_offset) {
  VLLM_PROFILE_SCOPE("fused_add_rms_norm");
  if (x.device().is_cpu()) return cpu::fused_add_rms_norm(x, residual, weight, eps, unit_offset);
#if VLLM_WITH_CUDA
  if (x.device().is_cuda()) {
    return cuda::fused_add_rms_norm(x, residual, weight, eps, unit_offset, stream(ctx));
  }
#endif
  return unsupported("fused_add_rms_norm", x);
}

bool add_rms_norm_linear_fits(const ExecContext& ctx, const Tensor& x, const Tensor& norm_weight,
                              const LinearWeight& weight) {
#if VLLM_WITH_CUDA
  return x.defined() && x.device().is_cuda() && ctx.blas != nullptr && norm_weight.defined() &&
         norm_weight.dtype() == DType::kBF16 && cuda::add_rms_norm_linear_fits(x, weight);
#else
  (void)ctx, (void)x, (void)norm_weight, (void)weight;
  return false;
#endif
}

Status add_rms_norm_linear(const ExecContext& ctx, const Tensor& x, const Tensor& residual,
                           const Tensor& norm_weight, float eps, bool unit_offset,
                           const LinearWeight& weight, Tensor& residual_out, Tensor& normed,
                           Tensor& out) {
  VLLM_PROFILE_SCOPE("add_rms_norm_linear");
#if VLLM_WITH_CUDA
  if (out.device().is_cuda()) {
    return cuda::add_rms_norm_linear(x, residual, norm_weight, eps, unit_offset, weight,
                                     residual_out, normed, out, stream(ctx));
  }
#endif
  return unsupported("add_rms_norm_linear", out);
}

Status add_rms_norm_linear(const ExecContext& ctx, const AddRmsNorm& norm,
                           const LinearWeight& weight, Tensor& out) {
  Tensor residual_out = norm.residual_out, normed;  // normed undefined: not stored
  return add_rms_norm_linear(ctx, norm.x, norm.residual, norm.weight, norm.eps, norm.unit_offset,
                             weight, residual_out, normed, out);
}

Status add_inplace(const ExecContext& ctx, Tensor& dst, const Tensor& src) {
  VLLM_PROFILE_SCOPE("add_inplace");
  if (dst.device().is_cpu()) return cpu::add_inplace(dst, src);
#if VLLM_WITH_CUDA
  if (dst.device().is_cuda()) return cuda::add_inplace(dst, src, stream(ctx));
#endif
  return unsupported("add_inplace", dst);
}

Status silu_and_mul(const ExecContext& ctx, const Tensor& x, Tensor& out) {
  VLLM_PROFILE_SCOPE("silu_and_mul");
  if (out.device().is_cpu()) return cpu::silu_and_mul(x, out);
#if VLLM_WITH_CUDA
  if (out.device().is_cuda()) return cuda::silu_and_mul(x, out, stream(ctx));
#endif
  return unsupported("silu_and_mul", out);
}

Status linear(const ExecContext& ctx, const Tensor& x, const LinearWeight& weight,
              const Tensor& bias, Tensor& out) {
  VLLM_PROFILE_SCOPE("linear");
  if (out.device().is_cpu()) return cpu::linear(x, weight, bias, out);
#if VLLM_WITH_CUDA
  if (out.device().is_cuda()) {
    if (ctx.blas == nullptr) {
      return make_error(ErrorCode::kInvalidArgument,
                        "linear: the execution context has no GEMM handle");
    }
    auto& blas = *static_cast<cuda::BlasContext*>(ctx.blas);
    if (weight.is_fp8() && cuda::use_fp8_w8a8(x, weight)) {
      // W8A8: the activations quantized per token group into workspace scratch.
      const int64_t m = x.size(0), k = x.size(1), rows = cuda::fp8_w8a8_rows(m);
      VLLM_ASSIGN_OR_RETURN(Tensor x_q, ctx.alloc({rows, k}, DType::kF8E4M3));
      VLLM_ASSIGN_OR_RETURN(Tensor x_scales, ctx.alloc({k / 128, rows}, DType::kF32));
      Tensor out_pad;
      if (rows != m) {
        VLLM_ASSIGN_OR_RETURN(out_pad, ctx.alloc({rows, weight.size(0)}, out.dtype()));
      }
      return cuda::linear_fp8_w8a8(blas, x, weight, bias, x_q, x_scales, out_pad, out, stream(ctx));
    }
    if (weight.is_fp8()) return cuda::linear_fp8(blas, x, weight, bias, out, stream(ctx));
    return cuda::linear(blas, x, weight.weight, bias, out, stream(ctx));
  }
#endif
  return unsupported("linear", out);
}

namespace {

// Per-head RMSNorm of a [T, H * D] tensor (row strides allowed) in place, on the CPU.
Status cpu_head_norm(const Tensor& t, const Tensor& weight, int64_t head_size, float eps,
                     bool unit_offset) {
  if (t.is_contiguous()) {
    Tensor rows = t.view({-1, head_size});
    return cpu::rms_norm(rows, weight, eps, unit_offset, rows);
  }
  for (int64_t i = 0; i < t.size(0); ++i) {
    Tensor rows = t.slice(0, i, i + 1).view({-1, head_size});
    VLLM_RETURN_IF_ERROR(cpu::rms_norm(rows, weight, eps, unit_offset, rows));
  }
  return Status::ok();
}

}  // namespace

Status rope(const ExecContext& ctx, const Tensor& positions, Tensor& query, Tensor& key,
            const Tensor& cos_sin_cache, const RopeArgs& args) {
  VLLM_PROFILE_SCOPE("rope");
  if (query.device().is_cpu()) {
    if (args.q_norm.defined()) {
      VLLM_RETURN_IF_ERROR(
          cpu_head_norm(query, args.q_norm, args.head_size, args.norm_eps, args.norm_unit_offset));
    }
    if (args.k_norm.defined() && key.defined()) {
      VLLM_RETURN_IF_ERROR(
          cpu_head_norm(key, args.k_norm, args.head_size, args.norm_eps, args.norm_unit_offset));
    }
    return cpu::rotary_embedding(positions, query, key, args.head_size, cos_sin_cache,
                                 args.is_neox);
  }
#if VLLM_WITH_CUDA
  if (query.device().is_cuda()) {
    cuda::RopeParams p;
    p.head_size = args.head_size;
    p.is_neox = args.is_neox;
    p.q_norm_weight = args.q_norm;
    p.k_norm_weight = args.k_norm;
    p.norm_eps = args.norm_eps;
    p.norm_unit_offset = args.norm_unit_offset;
    return cuda::rotary_embedding(positions, query, key, cos_sin_cache, p, stream(ctx));
  }
#endif
  return unsupported("rope", query);
}

Status reshape_and_cache(const ExecContext& ctx, const Tensor& key, const Tensor& value,
                         Tensor& kv_cache, const Tensor& slot_mapping,
                         const KvCacheScales& scales) {
  VLLM_PROFILE_SCOPE("reshape_and_cache");
  if (kv_cache.device().is_cpu()) {
    VLLM_ASSIGN_OR_RETURN(Tensor k, detail::contiguous(ctx, key));
    VLLM_ASSIGN_OR_RETURN(Tensor v, detail::contiguous(ctx, value));
    return cpu::reshape_and_cache(k, v, kv_cache, slot_mapping, scales);
  }
#if VLLM_WITH_CUDA
  if (kv_cache.device().is_cuda()) {
    return cuda::reshape_and_cache(key, value, kv_cache, slot_mapping, stream(ctx), scales);
  }
#endif
  return unsupported("reshape_and_cache", kv_cache);
}

Status paged_attention(const ExecContext& ctx, const Tensor& query, const Tensor& kv_cache,
                       const BatchLayout& layout, float scale, Tensor& out,
                       const KvCacheScales& kv_scales) {
  VLLM_PROFILE_SCOPE("paged_attention");
  if (out.device().is_cpu()) {
    VLLM_ASSIGN_OR_RETURN(Tensor q, detail::contiguous(ctx, query));
    cpu::PagedAttentionParams p;
    p.query_start_loc = layout.query_start_loc;
    p.seq_lens = layout.seq_lens;
    p.scale = scale;
    p.kv_scales = kv_scales;
    return cpu::paged_attention(q, kv_cache, layout.block_tables, p, out);
  }
#if VLLM_WITH_CUDA
  if (out.device().is_cuda()) {
    cuda::PagedAttentionParams p;
    p.query_start_loc = layout.query_start_loc_device;
    p.seq_lens = layout.seq_lens_device;
    p.max_query_len = layout.max_query_len;
    p.max_seq_len = layout.max_seq_len;
    p.scale = scale;
    p.kv_scales = kv_scales;
    // Scratch for splitting long contexts across thread blocks (flash-decoding).
    const int64_t requests = static_cast<int64_t>(layout.seq_lens.size());
    const size_t bytes = cuda::paged_attention_workspace_size(requests, kv_cache.size(3),
                                                              kv_cache.size(4), layout.max_seq_len);
    Tensor scratch;
    if (bytes > 0) {
      VLLM_ASSIGN_OR_RETURN(scratch, ctx.alloc({static_cast<int64_t>(bytes)}, DType::kU8));
    }
    return cuda::paged_attention(query, kv_cache, layout.block_tables, p, scratch, out,
                                 stream(ctx));
  }
#endif
  return unsupported("paged_attention", out);
}

Status split_q_gate(const ExecContext& ctx, const Tensor& q_gate, int64_t head_dim, Tensor& query,
                    Tensor& gate) {
  VLLM_PROFILE_SCOPE("split_q_gate");
  if (query.device().is_cpu()) return cpu::split_q_gate(q_gate, head_dim, query, gate);
#if VLLM_WITH_CUDA
  if (query.device().is_cuda()) {
    return cuda::split_q_gate(q_gate, head_dim, query, gate, stream(ctx));
  }
#endif
  return unsupported("split_q_gate", query);
}

Status sigmoid_gate_mul(const ExecContext& ctx, Tensor& x, const Tensor& gate) {
  VLLM_PROFILE_SCOPE("sigmoid_gate_mul");
  if (x.device().is_cpu()) return cpu::sigmoid_gate_mul(x, gate);
#if VLLM_WITH_CUDA
  if (x.device().is_cuda()) return cuda::sigmoid_gate_mul(x, gate, stream(ctx));
#endif
  return unsupported("sigmoid_gate_mul", x);
}

Status add_sigmoid_gated(const ExecContext& ctx, Tensor& out, const Tensor& x, const Tensor& gate) {
  VLLM_PROFILE_SCOPE("add_sigmoid_gated");
  if (out.device().is_cpu()) return cpu::add_sigmoid_gated(out, x, gate);
#if VLLM_WITH_CUDA
  if (out.device().is_cuda()) return cuda::add_sigmoid_gated(out, x, gate, stream(ctx));
#endif
  return unsupported("add_sigmoid_gated", out);
}

Status gather_rows(const ExecContext& ctx, const Tensor& x, const Tensor& rows, Tensor& out) {
  VLLM_PROFILE_SCOPE("gather_rows");
  if (out.device().is_cpu()) return cpu::gather_rows(x, rows, out);
#if VLLM_WITH_CUDA
  if (out.device().is_cuda()) return cuda::gather_rows(x, rows, out, stream(ctx));
#endif
  return unsupported("gather_rows", out);
}

Status zero_slots(const ExecContext& ctx, Tensor& state, const Tensor& slots) {
  VLLM_PROFILE_SCOPE("zero_slots");
  if (state.device().is_cpu()) return cpu::zero_slots(state, slots);
#if VLLM_WITH_CUDA
  if (state.device().is_cuda()) return cuda::zero_slots(state, slots, stream(ctx));
#endif
  return unsupported("zero_slots", state);
}

}  // namespace vllm::ops
