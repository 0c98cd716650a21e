#include "model/layers/gdn.h"

#include <utility>
#include <vector>

#include "model/tensor_parallel.h"
#include "ops/ops.h"

namespace vllm {

Status GdnLayer::load(WeightSource& w, const std::string& a, const GdnSpec& spec,
                      const ExecContext& ctx) {
  const int64_t hidden = spec.hidden_size, hk = spec.num_key_heads, hv = spec.num_value_heads;
  const int64_t dk = spec.key_head_dim, dv = spec.value_head_dim;
  const int64_t conv_dim = spec.conv_dim(), value_dim = spec.value_dim(), key_dim = spec.key_dim();
  const int64_t group = hv / hk;
  // Tensor parallelism splits by key heads, each with its group of value heads: rank r holds
  // key heads [k0, k1) and value heads [k0 * G, k1 * G), in every part of the projection, the
  // conv channels and the per-head parameters; out_proj is row-parallel (tensor_parallel.h).
  VLLM_ASSIGN_OR_RETURN(ShardRange keys, tp_split(ctx, hk, "linear_num_key_heads"));
  const ShardRange values{keys.begin * group, keys.end * group};
  spec_ = spec;
  spec_.num_key_heads = keys.size();
  spec_.num_value_heads = values.size();
  auto rows = [](int64_t begin, int64_t end) { return WeightSlice{0, begin, end}; };
  // The rows of q | k | v | z, and of b | a, in the order the fused weight holds them.
  std::vector<LinearWeight> qkvz_parts, ba_parts;
  std::string qkvz_name, ba_name;  // for messages
  if (spec.fused_checkpoint) {
    // Per key head h: [q_h (Dk) | k_h (Dk) | v of its group (G * Dv) | z of its group], and
    // [b of its group (G) | a of its group (G)]. Regroup into q | k | v | z and b | a.
    qkvz_name = a + "in_proj_qkvz.weight";
    ba_name = a + "in_proj_ba.weight";
    const Shape qkvz_shape{conv_dim + value_dim, hidden}, ba_shape{2 * hv, hidden};
    const int64_t block = 2 * dk + 2 * group * dv;
    for (int part = 0; part < 4; ++part) {
      const int64_t offset = part == 0   ? 0
                             : part == 1 ? dk
                             : part == 2 ? 2 * dk
                                         : 2 * dk + group * dv;
      const int64_t size = part < 2 ? dk : group * dv;
      for (int64_t h = keys.begin; h < keys.end; ++h) {
        VLLM_ASSIGN_OR_RETURN(LinearWeight t, w.get_linear_slice(qkvz_name, qkvz_shape,
                                                                 rows(h * block + offset,
                                                                      h * block + offset + size)));
        qkvz_parts.push_back(std::move(t));
      }
    }
    for (int part = 0; part < 2; ++part) {
      for (int64_t h = keys.begin; h < keys.end; ++h) {
        VLLM_ASSIGN_OR_RETURN(LinearWeight t,
                              w.get_linear_slice(ba_name, ba_shape,
                                                 rows(h * 2 * group + part * group,
                                                      h * 2 * group + (part + 1) * group)));
        ba_parts.push_back(std::move(t));
      }
    }
  } else {
    // in_proj_qkv holds q | k | v (each split by heads), then z, b and a per value head.
    qkvz_name = a + "in_proj_qkv.weight";
    ba_name = a + "in_proj_b.weight";
    struct Part {
      const char* name;
      Shape shape;
      WeightSlice slice;
    };
    const Part names[] = {
        {"in_proj_qkv.weight", {conv_dim, hidden}, rows(keys.begin * dk, keys.end * dk)},
        {"in_proj_qkv.weight",
         {conv_dim, hidden},
         rows(key_dim + keys.begin * dk, key_dim + keys.end * dk)},
        {"in_proj_qkv.weight",
         {conv_dim, hidden},
         rows(2 * key_dim + values.begin * dv, 2 * key_dim + values.end * dv)},
        {"in_proj_z.weight", {value_dim, hidden}, rows(values.begin * dv, values.end * dv)},
        {"in_proj_b.weight", {hv, hidden}, rows(values.begin, values.end)},
        {"in_proj_a.weight", {hv, hidden}, rows(values.begin, values.end)}};
    for (int i = 0; i < 6; ++i) {
      VLLM_ASSIGN_OR_RETURN(LinearWeight t,
                            w.get_linear_slice(a + names[i].name, names[i].shape, names[i].slice));
      std::vector<LinearWeight>& parts = i < 4 ? qkvz_parts : ba_parts;
      if (!parts.empty() && !same_weight_format(t, parts[0])) {
        return make_error(ErrorCode::kUnsupported,
                          "tensor '{}{}' is {} but '{}{}' is {}; they must match", a, names[i].name,
                          weight_format(t), a, names[i - 1].name, weight_format(parts[0]));
      }
      parts.push_back(std::move(t));
    }
  }
  // One GEMM for all six parts when q | k | v | z and b | a share a format and, in FP8,
  // their block grids stack; two otherwise. FP8 checkpoints keep in_proj_b / in_proj_a in BF16
  // (modules_to_not_convert); quantized at load, b and a have too few rows for a whole block,
  // and fusing them would leave the large q | k | v | z product without its 128-row blocks.
  std::vector<LinearWeight> all = qkvz_parts;
  all.insert(all.end(), ba_parts.begin(), ba_parts.end());
  if (same_weight_format(qkvz_parts[0], ba_parts[0]) && fp8_grids_stack(all)) {
    VLLM_ASSIGN_OR_RETURN(in_proj_, concat_linear_rows(all, &ctx));
    in_proj_ba_ = LinearWeight();
  } else {
    auto fused = concat_linear_rows(qkvz_parts, &ctx);
    if (!fused) return fused.status().with_context(qkvz_name);
    in_proj_ = std::move(*fused);
    fused = concat_linear_rows(ba_parts, &ctx);
    if (!fused) return fused.status().with_context(ba_name);
    in_proj_ba_ = std::move(*fused);
  }
  // The conv channels are q | k | v, each split like the projection's parts.
  const int64_t kernel = spec.conv_kernel;
  const std::string conv_name = a + "conv1d.weight";
  const Shape conv_shape{conv_dim, 1, kernel};
  std::vector<Tensor> conv_parts;
  for (const WeightSlice& slice :
       {rows(keys.begin * dk, keys.end * dk),
        rows(key_dim + keys.begin * dk, key_dim + keys.end * dk),
        rows(2 * key_dim + values.begin * dv, 2 * key_dim + values.end * dv)}) {
    VLLM_ASSIGN_OR_RETURN(Tensor t, w.get_slice(conv_name, conv_shape, slice));
    conv_parts.push_back(t.view({t.size(0), kernel}));
  }
  VLLM_ASSIGN_OR_RETURN(conv_weight_, concat_rows(conv_parts, &ctx));
  const WeightSlice heads = rows(values.begin, values.end);
  VLLM_ASSIGN_OR_RETURN(A_log_, w.get_slice(a + "A_log", {hv}, heads));
  VLLM_ASSIGN_OR_RETURN(dt_bias_, w.get_slice(a + "dt_bias", {hv}, heads));
  VLLM_ASSIGN_OR_RETURN(norm_, w.get(a + "norm.weight", {dv}));
  VLLM_ASSIGN_OR_RETURN(out_proj_,
                        w.get_linear_slice(a + "out_proj.weight", {hidden, value_dim},
                                           WeightSlice{1, values.begin * dv, values.end * dv}));
  return Status::ok();
}

Status GdnLayer::forward(const ExecContext& ctx, const Tensor& x, const StepInputs& in,
                         Tensor& conv_state, Tensor& ssm_state, Tensor& out) const {
  const GdnSpec& s = spec_;
  const int64_t tokens = x.size(0), hv = s.num_value_heads;
  const int64_t value_dim = s.value_dim(), conv_dim = s.conv_dim();
  VLLM_ASSIGN_OR_RETURN(Tensor proj, ctx.act({tokens, conv_dim + value_dim + 2 * hv}));
  if (in_proj_ba_.defined()) {
    Tensor qkvz = proj.slice(1, 0, conv_dim + value_dim);
    Tensor ba = proj.slice(1, conv_dim + value_dim, conv_dim + value_dim + 2 * hv);
    VLLM_RETURN_IF_ERROR(ops::linear(ctx, x, in_proj_, Tensor(), qkvz));
    VLLM_RETURN_IF_ERROR(ops::linear(ctx, x, in_proj_ba_, Tensor(), ba));
  } else {
    VLLM_RETURN_IF_ERROR(ops::linear(ctx, x, in_proj_, Tensor(), proj));
  }
  return mix(ctx, proj, in, conv_state, ssm_state, out);
}

bool GdnLayer::fuses_norm(const ExecContext& ctx, const Tensor& x,
                          const Tensor& norm_weight) const {
  return ops::add_rms_norm_linear_fits(ctx, x, norm_weight, in_proj_);
}

Status GdnLayer::forward_add_norm(const ExecContext& ctx, const ops::AddRmsNorm& norm,
                                  const StepInputs& in, Tensor& conv_state, Tensor& ssm_state,
                                  Tensor& out) const {
  if (!in_proj_ba_.defined()) {  // one weight: its rows are the whole projection
    VLLM_ASSIGN_OR_RETURN(Tensor proj, ctx.act({norm.x.size(0), in_proj_.size(0)}));
    VLLM_RETURN_IF_ERROR(ops::add_rms_norm_linear(ctx, norm, in_proj_, proj));
    return mix(ctx, proj, in, conv_state, ssm_state, out);
  }
  // Two weights (FP8 checkpoints keep b / a in BF16): the q | k | v | z product takes in the
  // add and the norm and stores the normed rows, which the b | a product reads.
  const GdnSpec& s = spec_;
  const int64_t tokens = norm.x.size(0), hv = s.num_value_heads;
  const int64_t qkvz_cols = s.conv_dim() + s.value_dim();
  VLLM_ASSIGN_OR_RETURN(Tensor proj, ctx.act({tokens, qkvz_cols + 2 * hv}));
  VLLM_ASSIGN_OR_RETURN(Tensor normed, ctx.act({tokens, norm.x.size(1)}));
  Tensor qkvz = proj.slice(1, 0, qkvz_cols);
  Tensor ba = proj.slice(1, qkvz_cols, qkvz_cols + 2 * hv);
  Tensor residual_out = norm.residual_out;
  VLLM_RETURN_IF_ERROR(ops::add_rms_norm_linear(ctx, norm.x, norm.residual, norm.weight, norm.eps,
                                                norm.unit_offset, in_proj_, residual_out, normed,
                                                qkvz));
  VLLM_RETURN_IF_ERROR(ops::linear(ctx, normed, in_proj_ba_, Tensor(), ba));
  return mix(ctx, proj, in, conv_state, ssm_state, out);
}

Status GdnLayer::mix(const ExecContext& ctx, const Tensor& proj, const StepInputs& in,
                     Tensor& conv_state, Tensor& ssm_state, Tensor& out) const {
  const GdnSpec& s = spec_;
  const int64_t tokens = proj.size(0), hv = s.num_value_heads;
  const int64_t key_dim = s.key_dim(), value_dim = s.value_dim(), conv_dim = s.conv_dim();
  Tensor z = proj.slice(1, conv_dim, conv_dim + value_dim);
  Tensor b = proj.slice(1, conv_dim + value_dim, conv_dim + value_dim + hv);
  Tensor a = proj.slice(1, conv_dim + value_dim + hv, conv_dim + value_dim + 2 * hv);

  VLLM_ASSIGN_OR_RETURN(Tensor conv_out, ctx.act({tokens, conv_dim}));
  VLLM_RETURN_IF_ERROR(ops::causal_conv1d(ctx, proj.slice(1, 0, conv_dim), conv_weight_, Tensor(),
                                          in.layout, conv_state, conv_out));
  VLLM_ASSIGN_OR_RETURN(Tensor g, ctx.alloc({tokens, hv}, DType::kF32));
  VLLM_ASSIGN_OR_RETURN(Tensor beta, ctx.alloc({tokens, hv}, DType::kF32));
  VLLM_RETURN_IF_ERROR(ops::gdn_gating(ctx, a, b, A_log_, dt_bias_, g, beta));
  VLLM_ASSIGN_OR_RETURN(Tensor core, ctx.act({tokens, value_dim}));
  VLLM_RETURN_IF_ERROR(ops::gated_delta_rule(ctx, conv_out.slice(1, 0, key_dim),
                                             conv_out.slice(1, key_dim, 2 * key_dim),
                                             conv_out.slice(1, 2 * key_dim, conv_dim), g, beta,
                                             in.layout, ops::DeltaRuleArgs{}, ssm_state, core));
  VLLM_RETURN_IF_ERROR(ops::gated_rms_norm(ctx, core, z, norm_, s.eps, core));
  VLLM_RETURN_IF_ERROR(ops::linear(ctx, core, out_proj_, Tensor(), out));
  return ops::all_reduce(ctx, out);
}

}  // namespace vllm
