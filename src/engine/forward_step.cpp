#include "engine/forward_step.h"

#include "base/profile.h"
#include "model/state_copy.h"

namespace vllm::engine {

Expected<Tensor> run_forward_step(Model& model, ModelCache& cache, const ForwardStep& step,
                                  DecodeGraphs* graphs) {
  const ExecContext& ctx = model.context();
  VLLM_RETURN_IF_ERROR(
      copy_state_slots(ctx, cache, step.restores.src_slots, step.restores.dst_slots));
  Tensor logits;
  {
    VLLM_PROFILE_SCOPE("step.forward");
    if (graphs != nullptr && graphs->covers(step.batch)) {
      VLLM_ASSIGN_OR_RETURN(logits, graphs->run(step.batch));
    } else {
      VLLM_ASSIGN_OR_RETURN(logits, model.forward(step.batch, cache));
    }
  }
  VLLM_RETURN_IF_ERROR(copy_state_slots(ctx, cache, step.saves.src_slots, step.saves.dst_slots));
  return logits;
}

}  // namespace vllm::engine
