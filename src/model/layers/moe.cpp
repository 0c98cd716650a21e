#include "model/layers/moe.h"

#include <utility>

namespace vllm {
namespace {

// One stacked [E, rows, cols] tensor filled part by part on the parts' device: each part is
// copied into place as soon as it is read (and dropped by the caller), so a per-expert
// checkpoint never holds the experts twice.
class ExpertStack {
 public:
  ExpertStack(std::string name, Shape shape) : name_(std::move(name)), shape_(std::move(shape)) {}

  // Copies `part` [n, cols] into rows [row, row + n) of expert `expert`.
  Status put(const ExecContext& ctx, const std::string& part_name, const Tensor& part,
             int64_t expert, int64_t row) {
    if (!stack_.defined()) {
      auto made = empty_weight(shape_, part.dtype(), part.device(), &ctx);
      if (!made) {
        const DeviceMemory m = device_memory(part.device());
        return make_error(made.status().code(),
                          "cannot place the stacked expert weight '{}' ({} bytes) on {}: {} "
                          "({:.2f} GiB free of {:.2f} GiB)",
                          name_, Tensor::empty(shape_, part.dtype(), Device::meta()).nbytes(),
                          part.device().to_string(), made.status().message(),
                          static_cast<double>(m.free_bytes) / (1 << 30),
                          static_cast<double>(m.total_bytes) / (1 << 30));
      }
      stack_ = *made;
    } else if (part.dtype() != stack_.dtype()) {
      return make_error(ErrorCode::kUnsupported,
                        "tensor '{}' has dtype {} but the expert weights read before it have {}; "
                        "they must match",
                        part_name, dtype_name(part.dtype()), dtype_name(stack_.dtype()));
    }
    if (part.device().is_meta()) return Status::ok();
    Tensor dst = stack_.slice(0, expert, expert + 1)
                     .view({shape_[1], shape_[2]})
                     .slice(0, row, row + part.size(0));
    return ops::copy(ctx, part, dst);
  }

  Tensor take() { return std::move(stack_); }

 private:
  std::string name_;
  Shape shape_;
  Tensor stack_;
};

}  // namespace

Status MoeLayer::load(WeightSource& w, const std::string& m, const MoeSpec& spec,
                      const ExecContext& ctx) {
  spec_ = spec;
  const int64_t hidden = spec.hidden_size, experts = spec.num_experts;
  VLLM_ASSIGN_OR_RETURN(Tensor router, w.get(m + "gate.weight", {experts, hidden}));
  VLLM_RETURN_IF_ERROR(load_experts(w, m, ctx));
  router_ = router;
  gate_in_router_ = false;
  shared_gate_ = Tensor();
  if (spec.shared_intermediate_size > 0) {
    VLLM_RETURN_IF_ERROR(
        shared_.load(w, m + "shared_expert.", hidden, spec.shared_intermediate_size, ctx));
    VLLM_ASSIGN_OR_RETURN(Tensor gate, w.get(m + "shared_expert_gate.weight", {1, hidden}));
    if (gate.dtype() == router.dtype()) {
      VLLM_ASSIGN_OR_RETURN(router_, concat_rows({router, gate}, &ctx));
      gate_in_router_ = true;
    } else {
      shared_gate_ = gate;
    }
  }
  return Status::ok();
}

Status MoeLayer::load_experts(WeightSource& w, const std::string& m, const ExecContext& ctx) {
  const int64_t hidden = spec_.hidden_size, experts = spec_.num_experts;
  const int64_t inter = spec_.intermediate_size;
  if (w.contains(m + "experts.gate_up_proj")) {
    VLLM_ASSIGN_OR_RETURN(experts_.gate_up,
                          w.get(m + "experts.gate_up_proj", {experts, 2 * inter, hidden}));
    VLLM_ASSIGN_OR_RETURN(experts_.down, w.get(m + "experts.down_proj", {experts, hidden, inter}));
    if (experts_.down.dtype() != experts_.gate_up.dtype()) {
      return make_error(ErrorCode::kUnsupported,
                        "tensor '{}experts.down_proj' has dtype {} but '{}experts.gate_up_proj' "
                        "has {}; they must match",
                        m, dtype_name(experts_.down.dtype()), m,
                        dtype_name(experts_.gate_up.dtype()));
    }
    return Status::ok();
  }
  // Per expert: experts 0 .. E-1 must all be there (get() names a missing one), and no more.
  const std::string extra = m + "experts." + std::to_string(experts) + ".gate_proj.weight";
  if (w.contains(extra)) {
    return make_error(ErrorCode::kInvalidFormat,
                      "tensor '{}' is in the checkpoint, but config.json has num_experts = {}",
                      extra, experts);
  }
  ExpertStack gate_up(m + "experts.gate_up_proj", {experts, 2 * inter, hidden});
  ExpertStack down(m + "experts.down_proj", {experts, hidden, inter});
  for (int64_t e = 0; e < experts; ++e) {
    const std::string x = m + "experts." + std::to_string(e) + ".";
    {
      VLLM_ASSIGN_OR_RETURN(Tensor gate, w.get(x + "gate_proj.weight", {inter, hidden}));
      VLLM_RETURN_IF_ERROR(gate_up.put(ctx, x + "gate_proj.weight", gate, e, 0));
    }
    {
      VLLM_ASSIGN_OR_RETURN(Tensor up, w.get(x + "up_proj.weight", {inter, hidden}));
      VLLM_RETURN_IF_ERROR(gate_up.put(ctx, x + "up_proj.weight", up, e, inter));
    }
    {
      VLLM_ASSIGN_OR_RETURN(Tensor dn, w.get(x + "down_proj.weight", {hidden, inter}));
      VLLM_RETURN_IF_ERROR(down.put(ctx, x + "down_proj.weight", dn, e, 0));
    }
  }
  experts_.gate_up = gate_up.take();
  experts_.down = down.take();
  if (experts_.down.dtype() != experts_.gate_up.dtype()) {
    return make_error(ErrorCode::kUnsupported,
                      "tensor '{}experts.0.down_proj.weight' has dtype {} but the gate and up "
                      "projections have {}; they must match",
                      m, dtype_name(experts_.down.dtype()), dtype_name(experts_.gate_up.dtype()));
  }
  return Status::ok();
}

Expected<MoeLayer::Routing> MoeLayer::route(const ExecContext& ctx, const Tensor& x) const {
  const int64_t tokens = x.size(0), experts = spec_.num_experts, k = spec_.top_k;
  Routing r;
  VLLM_ASSIGN_OR_RETURN(r.logits, ctx.alloc({tokens, router_.size(0)}, DType::kF32));
  VLLM_RETURN_IF_ERROR(ops::linear(ctx, x, router_, Tensor(), r.logits));
  VLLM_ASSIGN_OR_RETURN(r.topk_weights, ctx.alloc({tokens, k}, DType::kF32));
  VLLM_ASSIGN_OR_RETURN(r.topk_ids, ctx.alloc({tokens, k}, DType::kI64));
  VLLM_RETURN_IF_ERROR(ops::moe_route(ctx, r.logits.slice(1, 0, experts), k, spec_.renormalize,
                                      r.topk_weights, r.topk_ids));
  return r;
}

Status MoeLayer::forward(const ExecContext& ctx, const Tensor& x, Tensor& out) const {
  const int64_t tokens = x.size(0), experts = spec_.num_experts;
  VLLM_ASSIGN_OR_RETURN(Routing r, route(ctx, x));
  ops::MoeSharedExpert shared;
  if (shared_.loaded()) {
    VLLM_ASSIGN_OR_RETURN(shared.out, ctx.act({tokens, spec_.hidden_size}));
    VLLM_RETURN_IF_ERROR(shared_.forward(ctx, x, shared.out));
    if (gate_in_router_) {
      shared.gate = r.logits.slice(1, experts, experts + 1);
    } else {
      VLLM_ASSIGN_OR_RETURN(shared.gate, ctx.act({tokens, 1}));
      VLLM_RETURN_IF_ERROR(ops::linear(ctx, x, shared_gate_, Tensor(), shared.gate));
    }
  }
  return ops::moe_experts(ctx, x, experts_, r.topk_weights, r.topk_ids, shared, out);
}

}  // namespace vllm
