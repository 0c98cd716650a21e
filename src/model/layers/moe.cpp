#include "model/layers/moe.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "model/tensor_parallel.h"

namespace vllm {

// One stacked [E, rows, cols] linear weight filled part by part on the parts' device: each
// part is copied into place as soon as it is read (and dropped by the caller), so a
// per-expert checkpoint never holds the experts twice. FP8 parts bring their scales: the
// stack keeps the parts' grid where every part starts on a block boundary (`part_starts`:
// the rows where the parts of one expert begin), else one scale row per weight row.
class ExpertStack {
 public:
  ExpertStack(std::string name, Shape shape, std::vector<int64_t> part_starts)
      : name_(std::move(name)), shape_(std::move(shape)), part_starts_(std::move(part_starts)) {}

  // Copies `part` [n, cols] into rows [row, row + n) of expert `expert`.
  Status put(const ExecContext& ctx, const std::string& part_name, const LinearWeight& part,
             int64_t expert, int64_t row) {
    if (!stack_.defined()) {
      VLLM_RETURN_IF_ERROR(allocate(ctx, part));
    } else if (!same_weight_format(part, stack_)) {
      return make_error(ErrorCode::kUnsupported,
                        "tensor '{}' is {} but the expert weights read before it are {}; they "
                        "must match",
                        part_name, weight_format(part), weight_format(stack_));
    }
    if (part.device().is_meta()) return Status::ok();
    Tensor dst = stack_.weight.slice(0, expert, expert + 1)
                     .view({shape_[1], shape_[2]})
                     .slice(0, row, row + part.size(0));
    VLLM_RETURN_IF_ERROR(ops::copy(ctx, part.weight, dst));
    if (!part.is_fp8()) return Status::ok();
    const Shape& grid = stack_.scale_inv.shape();
    Tensor scales = stack_.scale_inv.slice(0, expert, expert + 1).view({grid[1], grid[2]});
    if (stack_.block.n == part.block.n) {
      const int64_t first = row / part.block.n;
      Tensor dst_scales = scales.slice(0, first, first + part.scale_inv.size(0));
      return ops::copy(ctx, part.scale_inv, dst_scales);
    }
    VLLM_ASSIGN_OR_RETURN(Tensor per_row, scales_per_row(part));
    Tensor dst_scales = scales.slice(0, row, row + part.size(0));
    return ops::copy(ctx, per_row, dst_scales);
  }

  // Copies a [n, r, cols] stack of experts into rows [row, row + r) of experts [0, n).
  Status put_experts(const ExecContext& ctx, const std::string& part_name, const LinearWeight& part,
                     int64_t row = 0) {
    for (int64_t e = 0; e < part.size(0); ++e) {
      LinearWeight one(part.weight.slice(0, e, e + 1).view({part.size(1), part.size(2)}));
      if (part.is_fp8()) {
        const Shape& grid = part.scale_inv.shape();
        one = LinearWeight(one.weight, part.scale_inv.slice(0, e, e + 1).view({grid[1], grid[2]}),
                           part.block);
      }
      VLLM_RETURN_IF_ERROR(put(ctx, part_name, one, e, row));
    }
    return Status::ok();
  }

  LinearWeight take() { return std::move(stack_); }

 private:
  Status allocate(const ExecContext& ctx, const LinearWeight& part) {
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
    stack_ = LinearWeight(*made);
    if (!part.is_fp8()) return Status::ok();
    bool aligned = true;
    for (int64_t start : part_starts_) aligned &= start % part.block.n == 0;
    stack_.block = aligned ? part.block : WeightBlock{1, part.block.k};
    VLLM_ASSIGN_OR_RETURN(stack_.scale_inv, empty_weight(fp8_scale_shape(shape_, stack_.block),
                                                         DType::kF32, part.device(), &ctx));
    return Status::ok();
  }

  std::string name_;
  Shape shape_;
  std::vector<int64_t> part_starts_;
  LinearWeight stack_;
};

Status MoeLayer::load(WeightSource& w, const std::string& m, const MoeSpec& spec,
                      const ExecContext& ctx) {
  spec_ = spec;
  const int64_t hidden = spec.hidden_size, experts = spec.num_experts;
  VLLM_ASSIGN_OR_RETURN(Tensor router, w.get(m + "gate.weight", {experts, hidden}));
  router_ = router;
  gate_in_router_ = false;
  shared_in_experts_ = false;
  shared_gate_ = Tensor();
  Tensor gate;
  if (spec.shared_intermediate_size > 0) {
    VLLM_ASSIGN_OR_RETURN(gate, w.get(m + "shared_expert_gate.weight", {1, hidden}));
    if (gate.dtype() == router.dtype()) {
      VLLM_ASSIGN_OR_RETURN(router_, concat_rows({router, gate}, &ctx));
      gate_in_router_ = true;
    } else {
      shared_gate_ = gate;
    }
    // On CUDA a shared expert of the routed experts' shape runs as one more expert (E): its
    // gate's sigmoid is the weight of a (k + 1)-th routing slot (cuda::moe_route), so it
    // costs no launches of its own. The CPU keeps it apart, as the reference.
    shared_in_experts_ = ctx.is_cuda() && gate_in_router_ && !expert_parallel() &&
                         spec.shared_intermediate_size == spec.intermediate_size;
  }
  if (ctx.is_cuda() && router_.size(0) % 8 != 0 && !router_.device().is_meta()) {
    const int64_t rows = router_.size(0);
    VLLM_ASSIGN_OR_RETURN(
        Tensor pad, Tensor::try_empty({8 - rows % 8, hidden}, router_.dtype(), router_.device()));
    VLLM_RETURN_IF_ERROR(ops::zero(ctx, pad));
    VLLM_ASSIGN_OR_RETURN(router_, concat_rows({router_, pad}, &ctx));
  }
  VLLM_RETURN_IF_ERROR(load_experts(w, m, ctx));
  if (shared_in_experts_) {
    // Larger batches run it apart (see forward), from the same memory.
    const int64_t inter = experts_.down.size(2);  // this rank's slice
    LinearWeight gate_up(experts_.gate_up.slice(0, experts, experts + 1).view({2 * inter, hidden}));
    LinearWeight down(experts_.down.slice(0, experts, experts + 1).view({hidden, inter}));
    if (experts_.is_fp8()) {  // the shared expert's scales, from the stacks' grids
      const Shape& gu = experts_.gate_up_scale_inv.shape();
      const Shape& dn = experts_.down_scale_inv.shape();
      gate_up = LinearWeight(
          gate_up.weight,
          experts_.gate_up_scale_inv.slice(0, experts, experts + 1).view({gu[1], gu[2]}),
          experts_.gate_up_block);
      down = LinearWeight(
          down.weight, experts_.down_scale_inv.slice(0, experts, experts + 1).view({dn[1], dn[2]}),
          experts_.down_block);
    }
    shared_.set(gate_up, down);
  } else if (spec.shared_intermediate_size > 0) {
    // Its partial sums join the experts' in the block's one all-reduce.
    VLLM_RETURN_IF_ERROR(shared_.load(w, m + "shared_expert.", hidden,
                                      spec.shared_intermediate_size, ctx,
                                      /*reduce_results=*/false));
  }
  return Status::ok();
}

Status MoeLayer::load_experts(WeightSource& w, const std::string& m, const ExecContext& ctx) {
  const int64_t hidden = spec_.hidden_size, experts = spec_.num_experts;
  const int64_t inter = spec_.intermediate_size;
  if (expert_parallel()) return load_local_experts(w, m, ctx);
  const int64_t slots = experts + (shared_in_experts_ ? 1 : 0);
  // Tensor parallelism: every rank holds every expert's slice of the intermediate features.
  VLLM_ASSIGN_OR_RETURN(ShardRange part, tp_split(ctx, inter, "moe_intermediate_size"));
  const int64_t local = part.size();
  ExpertStack gate_up(m + "experts.gate_up_proj", {slots, 2 * local, hidden}, {0, local});
  ExpertStack down(m + "experts.down_proj", {slots, hidden, local}, {0});
  if (w.contains(m + "experts.gate_up_proj")) {
    const std::string gate_up_name = m + "experts.gate_up_proj",
                      down_name = m + "experts.down_proj";
    const Shape gate_up_shape{experts, 2 * inter, hidden}, down_shape{experts, hidden, inter};
    if (ctx.tp_size() == 1) {
      VLLM_ASSIGN_OR_RETURN(LinearWeight fused_gate_up, w.get_linear(gate_up_name, gate_up_shape));
      VLLM_ASSIGN_OR_RETURN(LinearWeight fused_down, w.get_linear(down_name, down_shape));
      if (!same_weight_format(fused_down, fused_gate_up)) {
        return make_error(ErrorCode::kUnsupported,
                          "tensor '{}' is {} but '{}' is {}; they must match", down_name,
                          weight_format(fused_down), gate_up_name, weight_format(fused_gate_up));
      }
      if (!shared_in_experts_) {
        experts_.set(fused_gate_up, fused_down);
        return Status::ok();
      }
      VLLM_RETURN_IF_ERROR(gate_up.put_experts(ctx, gate_up_name, fused_gate_up));
      VLLM_RETURN_IF_ERROR(down.put_experts(ctx, down_name, fused_down));
    } else {
      // Each expert's gate rows [i0, i1), up rows [I + i0, I + i1) and down columns [i0, i1).
      {
        VLLM_ASSIGN_OR_RETURN(
            LinearWeight gate,
            w.get_linear_slice(gate_up_name, gate_up_shape, WeightSlice{1, part.begin, part.end}));
        VLLM_RETURN_IF_ERROR(gate_up.put_experts(ctx, gate_up_name, gate, 0));
      }
      {
        VLLM_ASSIGN_OR_RETURN(LinearWeight up, w.get_linear_slice(gate_up_name, gate_up_shape,
                                                                  WeightSlice{1, inter + part.begin,
                                                                              inter + part.end}));
        VLLM_RETURN_IF_ERROR(gate_up.put_experts(ctx, gate_up_name, up, local));
      }
      VLLM_ASSIGN_OR_RETURN(
          LinearWeight dn,
          w.get_linear_slice(down_name, down_shape, WeightSlice{2, part.begin, part.end}));
      VLLM_RETURN_IF_ERROR(down.put_experts(ctx, down_name, dn));
    }
  } else {
    // Per expert: experts 0 .. E-1 must all be there (get() names a missing one), and no more.
    const std::string extra = m + "experts." + std::to_string(experts) + ".gate_proj.weight";
    if (w.contains(extra)) {
      return make_error(ErrorCode::kInvalidFormat,
                        "tensor '{}' is in the checkpoint, but config.json has num_experts = {}",
                        extra, experts);
    }
    for (int64_t e = 0; e < experts; ++e) {
      VLLM_RETURN_IF_ERROR(
          put_mlp(w, m + "experts." + std::to_string(e) + ".", e, ctx, gate_up, down));
    }
  }
  if (shared_in_experts_) {
    VLLM_RETURN_IF_ERROR(put_mlp(w, m + "shared_expert.", experts, ctx, gate_up, down));
  }
  const LinearWeight stacked_gate_up = gate_up.take(), stacked_down = down.take();
  if (!same_weight_format(stacked_down, stacked_gate_up)) {
    return make_error(ErrorCode::kUnsupported,
                      "tensor '{}experts.0.down_proj.weight' is {} but the gate and up "
                      "projections are {}; they must match",
                      m, weight_format(stacked_down), weight_format(stacked_gate_up));
  }
  experts_.set(stacked_gate_up, stacked_down);
  return Status::ok();
}

Status MoeLayer::load_local_experts(WeightSource& w, const std::string& m, const ExecContext& ctx) {
  const int64_t hidden = spec_.hidden_size, experts = spec_.num_experts;
  const int64_t inter = spec_.intermediate_size, ranks = ctx.tp_size(), rank = ctx.tp_rank();
  if (experts < ranks) {
    return make_error(ErrorCode::kInvalidArgument,
                      "expert parallelism: num_experts ({}) is below --tensor-parallel-size {}; "
                      "every rank needs an expert",
                      experts, ranks);
  }
  // vLLM's linear placement: experts / ranks each, the remainder to the first ranks.
  const int64_t base = experts / ranks, remainder = experts % ranks;
  const int64_t count = base + (rank < remainder ? 1 : 0);
  const int64_t first = rank * base + std::min(rank, remainder);
  LinearWeight stacked_gate_up, stacked_down;
  if (w.contains(m + "experts.gate_up_proj")) {
    const WeightSlice mine{0, first, first + count};
    VLLM_ASSIGN_OR_RETURN(stacked_gate_up, w.get_linear_slice(m + "experts.gate_up_proj",
                                                              {experts, 2 * inter, hidden}, mine));
    VLLM_ASSIGN_OR_RETURN(
        stacked_down, w.get_linear_slice(m + "experts.down_proj", {experts, hidden, inter}, mine));
  } else {
    const std::string extra = m + "experts." + std::to_string(experts) + ".gate_proj.weight";
    if (w.contains(extra)) {
      return make_error(ErrorCode::kInvalidFormat,
                        "tensor '{}' is in the checkpoint, but config.json has num_experts = {}",
                        extra, experts);
    }
    ExpertStack gate_up(m + "experts.gate_up_proj", {count, 2 * inter, hidden}, {0, inter});
    ExpertStack down(m + "experts.down_proj", {count, hidden, inter}, {0});
    for (int64_t e = first; e < first + count; ++e) {
      VLLM_RETURN_IF_ERROR(
          put_mlp(w, m + "experts." + std::to_string(e) + ".", e - first, ctx, gate_up, down));
    }
    stacked_gate_up = gate_up.take();
    stacked_down = down.take();
  }
  if (!same_weight_format(stacked_down, stacked_gate_up)) {
    return make_error(ErrorCode::kUnsupported,
                      "{}experts: the down projections are {} but the gate and up projections "
                      "are {}; they must match",
                      m, weight_format(stacked_down), weight_format(stacked_gate_up));
  }
  experts_.set(stacked_gate_up, stacked_down);
  experts_.first_expert = first;
  experts_.num_experts = experts;
  return Status::ok();
}

Status MoeLayer::put_mlp(WeightSource& w, const std::string& x, int64_t slot,
                         const ExecContext& ctx, ExpertStack& gate_up, ExpertStack& down) const {
  const int64_t hidden = spec_.hidden_size, inter = spec_.intermediate_size;
  // Whole experts under expert parallelism, else this rank's slice of every expert.
  ShardRange part{0, inter};
  if (!expert_parallel()) {
    VLLM_ASSIGN_OR_RETURN(part, tp_split(ctx, inter, "moe_intermediate_size"));
  }
  const WeightSlice rows{0, part.begin, part.end};
  {
    VLLM_ASSIGN_OR_RETURN(LinearWeight gate,
                          w.get_linear_slice(x + "gate_proj.weight", {inter, hidden}, rows));
    VLLM_RETURN_IF_ERROR(gate_up.put(ctx, x + "gate_proj.weight", gate, slot, 0));
  }
  {
    VLLM_ASSIGN_OR_RETURN(LinearWeight up,
                          w.get_linear_slice(x + "up_proj.weight", {inter, hidden}, rows));
    VLLM_RETURN_IF_ERROR(gate_up.put(ctx, x + "up_proj.weight", up, slot, part.size()));
  }
  VLLM_ASSIGN_OR_RETURN(LinearWeight dn, w.get_linear_slice(x + "down_proj.weight", {hidden, inter},
                                                            WeightSlice{1, part.begin, part.end}));
  return down.put(ctx, x + "down_proj.weight", dn, slot, 0);
}

Expected<MoeLayer::Routing> MoeLayer::route(const ExecContext& ctx, const Tensor& x) const {
  VLLM_ASSIGN_OR_RETURN(Tensor logits, ctx.alloc({x.size(0), router_.size(0)}, DType::kF32));
  VLLM_RETURN_IF_ERROR(ops::linear(ctx, x, router_, Tensor(), logits));
  return route_logits(ctx, std::move(logits));
}

Expected<MoeLayer::Routing> MoeLayer::route_logits(const ExecContext& ctx, Tensor logits) const {
  const int64_t tokens = logits.size(0), experts = spec_.num_experts, k = spec_.top_k;
  Routing r;
  r.logits = std::move(logits);
  r.shared_slot = shared_slot(tokens);
  const int64_t slots = k + (r.shared_slot ? 1 : 0);
  VLLM_ASSIGN_OR_RETURN(r.topk_weights, ctx.alloc({tokens, slots}, DType::kF32));
  VLLM_ASSIGN_OR_RETURN(r.topk_ids, ctx.alloc({tokens, slots}, DType::kI64));
  const Tensor routed = r.logits.slice(1, 0, experts + (r.shared_slot ? 1 : 0));
  VLLM_RETURN_IF_ERROR(
      ops::moe_route(ctx, routed, k, spec_.renormalize, r.topk_weights, r.topk_ids, r.shared_slot));
  return r;
}

Status MoeLayer::forward(const ExecContext& ctx, const Tensor& x, Tensor& out) const {
  VLLM_ASSIGN_OR_RETURN(Routing r, route(ctx, x));
  return experts_forward(ctx, x, r, out);
}

bool MoeLayer::fuses_norm(const ExecContext& ctx, const Tensor& x,
                          const Tensor& norm_weight) const {
  return ops::add_rms_norm_linear_fits(ctx, x, norm_weight, router_);
}

Status MoeLayer::forward_add_norm(const ExecContext& ctx, const Tensor& x, const Tensor& residual,
                                  const Tensor& norm_weight, float eps, bool unit_offset,
                                  Tensor& residual_out, Tensor& out) const {
  VLLM_ASSIGN_OR_RETURN(Tensor normed, ctx.act(x.shape()));
  VLLM_ASSIGN_OR_RETURN(Tensor logits, ctx.alloc({x.size(0), router_.size(0)}, DType::kF32));
  VLLM_RETURN_IF_ERROR(ops::add_rms_norm_linear(ctx, x, residual, norm_weight, eps, unit_offset,
                                                router_, residual_out, normed, logits));
  VLLM_ASSIGN_OR_RETURN(Routing r, route_logits(ctx, std::move(logits)));
  return experts_forward(ctx, normed, r, out);
}

Status MoeLayer::experts_forward(const ExecContext& ctx, const Tensor& x, const Routing& r,
                                 Tensor& out) const {
  const int64_t tokens = x.size(0), experts = spec_.num_experts;
  ops::MoeSharedExpert shared;  // the shared expert, unless it runs as expert E
  shared.in_last_slot = r.shared_slot;
  if (shared_.loaded() && !r.shared_slot) {
    VLLM_ASSIGN_OR_RETURN(shared.out, ctx.act({tokens, spec_.hidden_size}));
    VLLM_RETURN_IF_ERROR(shared_.forward(ctx, x, shared.out));
    if (gate_in_router_) {
      shared.gate = r.logits.slice(1, experts, experts + 1);
    } else {
      VLLM_ASSIGN_OR_RETURN(shared.gate, ctx.act({tokens, 1}));
      VLLM_RETURN_IF_ERROR(ops::linear(ctx, x, shared_gate_, Tensor(), shared.gate));
    }
  }
  VLLM_RETURN_IF_ERROR(ops::moe_experts(ctx, x, experts_, r.topk_weights, r.topk_ids, shared, out));
  // Every rank's partial sums of the routed and the shared expert, in one all-reduce.
  return ops::all_reduce(ctx, out);
}

}  // namespace vllm
