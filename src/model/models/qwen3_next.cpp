// Qwen3-Next (Qwen3NextForCausalLM): the hybrid decoder of qwen3_5.h with Qwen3-Next's
// checkpoint layout -- GDN input projections fused per key head (in_proj_qkvz, in_proj_ba),
// weights under model.*, MTP weights (mtp.*) not read -- and its MoE placement: a layer is
// sparse when num_experts > 0, it is not in mlp_only_layers and (layer + 1) is a multiple of
// decoder_sparse_step; the router renormalises its top-k when norm_topk_prob.
// The math follows transformers' modeling_qwen3_next.py.
#include "model/models/qwen3_5.h"
#include "model/models/registry.h"

namespace vllm {
namespace {

Expected<std::unique_ptr<Model>> create_qwen3_next(const ModelConfig& config, WeightSource& weights,
                                                   const LoadOptions& options) {
  hybrid::HybridVariant variant;
  variant.prefixes = {"model."};
  variant.fused_gdn_projections = true;
  variant.sparse = hybrid::HybridVariant::Sparse::kConfigured;
  return hybrid::create_hybrid_model(config, weights, options, variant);
}

}  // namespace

void register_qwen3_next_models(ModelRegistry& registry) {
  registry.add("Qwen3NextForCausalLM", &create_qwen3_next);
}

}  // namespace vllm
