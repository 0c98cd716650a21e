// The op layer: the only code that knows both backends. Models call these; each dispatches
// on the output tensor's device to the CPU reference op (src/backend/cpu, F32 activations)
// or the CUDA op (src/backend/cuda, BF16/F32 activations). Semantics are the CPU ops'
// (see their headers); this layer adds the few ops the models used to run as host loops.
// An op without a kernel for a device returns kUnsupported naming the op and device, never
// a silent host fallback.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "ops/exec_context.h"
#include "tensor/kv_cache.h"
#include "tensor/linear_weight.h"
#include "tensor/tensor.h"

namespace vllm::ops {

// ---- Data movement ----------------------------------------------------------------------

// dst = src elementwise for tensors of one dtype and shape on any devices (host <-> device,
// device <-> device, host <-> host). src and dst contiguous, or 2-D with row strides.
// Queued on ctx's stream; a copy to the host waits for it.
Status copy(const ExecContext& ctx, const Tensor& src, Tensor& dst);
// A new tensor on ctx.device from the workspace holding `host`'s elements.
Expected<Tensor> to_device(const ExecContext& ctx, const Tensor& host);
// A new tensor of its own on ctx.device (not the workspace: for load time) holding `host`'s
// elements; on the CPU, `host` itself.
Expected<Tensor> upload(const ExecContext& ctx, const Tensor& host);
// A new contiguous CPU tensor holding `t`'s elements (waits for the stream).
Expected<Tensor> to_host(const ExecContext& ctx, const Tensor& t);
// dst = src converted between F32 / BF16 / F16 (same shape, contiguous, same device).
Status convert(const ExecContext& ctx, const Tensor& src, Tensor& dst);
// Zeroes a contiguous tensor.
Status zero(const ExecContext& ctx, Tensor& t);
// Uniform values in [low, high) from a seeded counter-based generator.
Status fill_uniform(const ExecContext& ctx, Tensor& t, float low, float high, uint64_t seed);

// ---- Decoder ops --------------------------------------------------------------------------

Status embedding(const ExecContext& ctx, const Tensor& token_ids, const Tensor& table, Tensor& out);
// One rank's share of a vocab-parallel embedding: table [R, H] holds rows [vocab_start,
// vocab_start + R) of a vocabulary of vocab_size; tokens outside it get zero rows (the
// all-reduce over the ranks then gives every token its row). CPU only so far.
Status embedding_shard(const ExecContext& ctx, const Tensor& token_ids, const Tensor& table,
                       int64_t vocab_start, int64_t vocab_size, Tensor& out);
Status rms_norm(const ExecContext& ctx, const Tensor& x, const Tensor& weight, float eps,
                bool unit_offset, Tensor& out);
Status fused_add_rms_norm(const ExecContext& ctx, Tensor& x, Tensor& residual, const Tensor& weight,
                          float eps, bool unit_offset);
// residual_out = residual + x, normed = RMSNorm(residual_out) (fused_add_rms_norm's numbers),
// out = normed @ weight^T, in one launch: on CUDA, for the sizes add_rms_norm_linear_fits()
// accepts (cuda::add_rms_norm_linear: BF16 activations with BF16 or block-scaled FP8 weights,
// products of 1 or 2 rows, the MoE router and the mixers' input projections at decode);
// elsewhere kUnsupported, and the caller runs fused_add_rms_norm and linear instead. normed may
// be undefined: not stored.
bool add_rms_norm_linear_fits(const ExecContext& ctx, const Tensor& x, const Tensor& norm_weight,
                              const LinearWeight& weight);
Status add_rms_norm_linear(const ExecContext& ctx, const Tensor& x, const Tensor& residual,
                           const Tensor& norm_weight, float eps, bool unit_offset,
                           const LinearWeight& weight, Tensor& residual_out, Tensor& normed,
                           Tensor& out);
// The residual add and RMSNorm in front of a layer whose first product takes them in
// (add_rms_norm_linear): residual_out = residual + x, the layer's input RMSNorm(residual_out).
struct AddRmsNorm {
  Tensor x;             // added to the residual stream (the last sub-layer's output)
  Tensor residual;      // F32 [T, hidden], read
  Tensor residual_out;  // F32 [T, hidden], written; overlaps neither x nor residual
  Tensor weight;        // the norm's [hidden]
  float eps = 1e-6f;
  bool unit_offset = false;
};
// add_rms_norm_linear of `norm` into out = RMSNorm(norm.residual + norm.x) @ weight^T, the
// normed rows not stored.
Status add_rms_norm_linear(const ExecContext& ctx, const AddRmsNorm& norm,
                           const LinearWeight& weight, Tensor& out);
Status add_inplace(const ExecContext& ctx, Tensor& dst, const Tensor& src);
Status silu_and_mul(const ExecContext& ctx, const Tensor& x, Tensor& out);
// out = x @ weight^T (+ bias). On CUDA out may be F32 for BF16 x (logits). Block-scaled FP8
// weights (tensor/linear_weight.h) run on the CPU only so far (kUnsupported on CUDA).
Status linear(const ExecContext& ctx, const Tensor& x, const LinearWeight& weight,
              const Tensor& bias, Tensor& out);

struct RopeArgs {
  int64_t head_size = 0;
  bool is_neox = true;
  // Per-head RMSNorm of q and k before the rotation (Qwen3, Qwen3.5); undefined: none.
  Tensor q_norm, k_norm;
  float norm_eps = 1e-6f;
  bool norm_unit_offset = false;
};
// In place on query [T, Hq * D] and key [T, Hk * D] (row strides allowed).
Status rope(const ExecContext& ctx, const Tensor& positions, Tensor& query, Tensor& key,
            const Tensor& cos_sin_cache, const RopeArgs& args);

// key, value [T, Hk * D] into kv_cache[slot_mapping]: copied into a float cache (the
// activation dtype), or as e4m3(x / scale) into an F8_E4M3 one (tensor/kv_cache.h), keys with
// scales.k_scale and values with scales.v_scale.
Status reshape_and_cache(const ExecContext& ctx, const Tensor& key, const Tensor& value,
                         Tensor& kv_cache, const Tensor& slot_mapping,
                         const KvCacheScales& scales = {});

// The batch layout attention and GDN ops need, on the host and on ctx.device.
struct BatchLayout {
  std::span<const int32_t> query_start_loc;  // [R + 1] host
  std::span<const int32_t> seq_lens;         // [R] host
  std::span<const int32_t> state_indices;    // [R] host (hybrid models)
  Tensor query_start_loc_device;             // I32 [R + 1]
  Tensor seq_lens_device;                    // I32 [R]
  Tensor state_indices_device;               // I32 [R]
  Tensor block_tables;                       // I32 [R, max_blocks]
  int32_t max_query_len = 0;
  int32_t max_seq_len = 0;
};

// Causal attention over the paged cache (cpu/attention.h); an F8_E4M3 cache is read as its
// e4m3 values times kv_scales' k_scale / v_scale.
Status paged_attention(const ExecContext& ctx, const Tensor& query, const Tensor& kv_cache,
                       const BatchLayout& layout, float scale, Tensor& out,
                       const KvCacheScales& kv_scales = {});

// Gated attention: q_gate [T, Hq * 2D] (per head D query then D gate values) -> query, gate.
Status split_q_gate(const ExecContext& ctx, const Tensor& q_gate, int64_t head_dim, Tensor& query,
                    Tensor& gate);
// x *= sigmoid(gate).
Status sigmoid_gate_mul(const ExecContext& ctx, Tensor& x, const Tensor& gate);
// out[t, :] += sigmoid(gate[t]) * x[t, :].
Status add_sigmoid_gated(const ExecContext& ctx, Tensor& out, const Tensor& x, const Tensor& gate);
// out[i, :] = x[rows[i], :]; rows I64 on ctx.device. out may be F32 for a BF16 x.
Status gather_rows(const ExecContext& ctx, const Tensor& x, const Tensor& rows, Tensor& out);
// Zeroes state[s] for each s in slots (I32 on ctx.device; host copy for the CPU path).
Status zero_slots(const ExecContext& ctx, Tensor& state, const Tensor& slots);

// ---- Gated DeltaNet -------------------------------------------------------------------------

Status causal_conv1d(const ExecContext& ctx, const Tensor& x, const Tensor& weight,
                     const Tensor& bias, const BatchLayout& layout, Tensor& conv_state,
                     Tensor& out);
Status gdn_gating(const ExecContext& ctx, const Tensor& a, const Tensor& b, const Tensor& A_log,
                  const Tensor& dt_bias, Tensor& g, Tensor& beta);
struct DeltaRuleArgs {
  bool use_qk_l2norm = true;
  float l2norm_eps = 1e-6f;
  float scale = 0.0f;  // 0: 1 / sqrt(Dk)
};
Status gated_delta_rule(const ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& g, const Tensor& beta, const BatchLayout& layout,
                        const DeltaRuleArgs& args, Tensor& state, Tensor& out);
Status gated_rms_norm(const ExecContext& ctx, const Tensor& x, const Tensor& z,
                      const Tensor& weight, float eps, Tensor& out);

// ---- Mixture of experts ---------------------------------------------------------------------

// router_logits F32 [T, E] (row stride allowed) -> topk_weights F32 [T, k], topk_ids I64 [T, k].
// shared_slot: router_logits [T, E + 1] ends with the shared expert's gate logit, and the
// outputs [T, k + 1] end with the shared expert as expert E, weight sigmoid(gate logit)
// (cuda::moe_route); moe_experts then needs the shared expert stacked as expert E.
Status moe_route(const ExecContext& ctx, const Tensor& router_logits, int64_t top_k,
                 bool renormalize, Tensor& topk_weights, Tensor& topk_ids,
                 bool shared_slot = false);

// A layer's experts, stacked: the layout the model keeps on every device.
struct MoeWeights {
  Tensor gate_up;  // [E, 2I, H]: expert e's gate rows [0, I), then its up rows [I, 2I)
  Tensor down;     // [E, H, I]
  // Expert parallelism: the stack holds experts [first_expert, first_expert + E) of the
  // router's num_experts (0: E); tokens routed to other experts are another rank's. CPU only.
  int64_t first_expert = 0;
  int64_t num_experts = 0;
  // Block-scaled FP8 experts (F8_E4M3 gate_up / down, tensor/linear_weight.h): F32 scales
  // [E, ceil(2I / n), ceil(H / k)] and [E, ceil(H / n), ceil(I / k)] per block n x k.
  Tensor gate_up_scale_inv, down_scale_inv;
  WeightBlock gate_up_block, down_block;

  LinearWeight gate_up_weight() const { return {gate_up, gate_up_scale_inv, gate_up_block}; }
  LinearWeight down_weight() const { return {down, down_scale_inv, down_block}; }
  void set(const LinearWeight& gu, const LinearWeight& dn) {
    gate_up = gu.weight, gate_up_scale_inv = gu.scale_inv, gate_up_block = gu.block;
    down = dn.weight, down_scale_inv = dn.scale_inv, down_block = dn.block;
  }
  bool is_fp8() const {
    return gate_up.dtype() == DType::kF8E4M3 || down.dtype() == DType::kF8E4M3;
  }
};
// The shared expert's contribution, which moe_experts adds: sigmoid(gate[t]) * out[t].
struct MoeSharedExpert {
  Tensor out;   // [T, H] in x's dtype; undefined: no shared expert
  Tensor gate;  // [T, 1] logits, F32 or x's dtype (row stride allowed)
  // Instead of out: the shared expert is the stack's last expert, in every token's last slot
  // (moe_route's shared_slot), and x comes from before the router. Lets CUDA start on that
  // expert while the routing still runs (cuda::MoeExpertsArgs::shared_last_slot).
  bool in_last_slot = false;
};
// out[t] = sum_i topk_weights[t, i] * expert_{topk_ids[t, i]}(x[t]) (+ the shared expert).
Status moe_experts(const ExecContext& ctx, const Tensor& x, const MoeWeights& experts,
                   const Tensor& topk_weights, const Tensor& topk_ids,
                   const MoeSharedExpert& shared, Tensor& out);

// ---- Tensor parallelism ------------------------------------------------------------------
// The collectives of ctx.comm (parallel/communicator.h); without one (a single rank)
// all_reduce does nothing and all_gather copies x into out[0].

// x = the sum over the ranks of their x, in place.
Status all_reduce(const ExecContext& ctx, Tensor& x);
// out [tp_size, ...x's shape] = every rank's x, in rank order.
Status all_gather(const ExecContext& ctx, const Tensor& x, Tensor& out);

}  // namespace vllm::ops
