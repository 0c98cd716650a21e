// Internal to the hybrid model family files (qwen3_5*.cpp, qwen3_next.cpp): the Qwen3.5 /
// Qwen3.6 / Qwen3-Next decoder, one implementation for every checkpoint flavour.
//
// Layers follow config.layer_types: linear_attention = Gated DeltaNet (layers/gdn.h),
// full_attention = gated attention (layers/attention.h: q_proj yields query and an output
// gate per head). Every norm but the GDN's gated norm scales by (1 + weight). The MLP is
// dense SwiGLU or a sparse MoE block with a sigmoid-gated shared expert. The flavours differ
// only in how the checkpoint names and lays out weights and which layers are sparse;
// HybridVariant says which.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/layers/attention.h"
#include "model/layers/gdn.h"
#include "model/layers/mlp.h"
#include "model/layers/moe.h"
#include "model/model.h"
#include "model/weights.h"

namespace vllm::hybrid {

struct HybridVariant {
  // Where the decoder's weights live; the first prefix whose embed_tokens exists is used.
  std::vector<std::string> prefixes;
  // Qwen3-Next ships in_proj_qkvz / in_proj_ba fused and grouped per key head; Qwen3.5 ships
  // in_proj_qkv, in_proj_z, in_proj_b, in_proj_a.
  bool fused_gdn_projections = false;
  // Which layers have a sparse MoE MLP.
  enum class Sparse {
    kNone,        // Qwen3.5 dense: every MLP is dense, whatever num_experts says
    kAll,         // Qwen3.5-MoE: every layer; the router always renormalises its top-k
    kConfigured,  // Qwen3-Next: num_experts, decoder_sparse_step, mlp_only_layers and
                  // norm_topk_prob decide, as transformers' Qwen3NextDecoderLayer does
  };
  Sparse sparse = Sparse::kNone;
};

struct HybridLayer {
  LayerType type = LayerType::kFullAttention;
  int cache_index = 0;  // index into ModelCache::kv or conv_state / ssm_state
  Tensor input_norm, post_norm;
  GdnLayer gdn;
  AttentionLayer attn;
  bool sparse = false;
  MlpLayer mlp;
  MoeLayer moe;
};

class HybridModel final : public Model {
 public:
  HybridModel(ModelConfig config, HybridVariant variant)
      : config_(std::move(config)), variant_(std::move(variant)) {}

  Status load(WeightSource& weights, const LoadOptions& options);  // qwen3_5_weights.cpp
  const ModelConfig& config() const override { return config_; }
  CacheShapes cache_shapes() const override;
  Expected<Tensor> compute(const StepInputs& in, ModelCache& cache) override;
  Status check_cache(const ModelCache& cache) const override;

 private:
  Status check_config() const;
  bool layer_is_sparse(int64_t layer) const;

  ModelConfig config_;
  HybridVariant variant_;
  int64_t num_attention_layers_ = 0, num_linear_layers_ = 0;
  CacheShapes cache_shapes_;  // this rank's (set at load)
  Tensor embed_tokens_, final_norm_, lm_head_, cos_sin_cache_;
  std::vector<HybridLayer> layers_;
};

// Builds and loads the model; the registry's factories call this with their variant.
Expected<std::unique_ptr<Model>> create_hybrid_model(const ModelConfig& config,
                                                     WeightSource& weights,
                                                     const LoadOptions& options,
                                                     const HybridVariant& variant);

}  // namespace vllm::hybrid
