// Internal to the hybrid model family files (qwen3_5*.cpp, qwen3_next.cpp): the Qwen3.5 /
// Qwen3.6 / Qwen3-Next decoder, one implementation for every checkpoint flavour.
//
// Layers follow config.layer_types: linear_attention = Gated DeltaNet, full_attention =
// gated attention (q_proj yields query and an output gate per head). Every norm but the GDN's
// gated norm scales by (1 + weight). The MLP is dense SwiGLU or a sparse MoE block with a
// sigmoid-gated shared expert. The flavours differ only in how the checkpoint names and lays
// out weights and which layers are sparse; HybridVariant says which.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/moe.h"
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

struct GdnWeights {
  Tensor in_proj;         // [2 * key_dim + 2 * value_dim, H]: rows q | k | v | z, head-major
  Tensor in_proj_ba;      // [2 * Hv, H]: rows b | a
  Tensor conv_weight;     // [conv_dim, K], conv_dim = 2 * key_dim + value_dim
  Tensor A_log, dt_bias;  // [Hv]
  Tensor norm;            // [Dv] (gated RMSNorm, no unit offset)
  Tensor out_proj;        // [H, value_dim]
};

struct AttentionWeights {
  Tensor q_proj;  // [Hq * D * 2, H] when gated (per head: D query rows, then D gate rows)
  Tensor k_proj, v_proj, o_proj;
  Tensor q_bias, k_bias, v_bias, o_bias;  // undefined unless attention_bias
  Tensor q_norm, k_norm;                  // [D], unit offset
};

struct MlpWeights {
  Tensor gate_up;  // [2I, H]: gate rows then up rows
  Tensor down;     // [H, I]
};

struct MoeWeights {
  Tensor router;  // [E, H]
  cpu::MoeExpertWeights experts;
  bool has_shared = false;
  MlpWeights shared;
  Tensor shared_gate;  // [1, H]
};

struct LayerWeights {
  LayerType type = LayerType::kFullAttention;
  int cache_index = 0;  // index into ModelCache::kv or conv_state / ssm_state
  Tensor input_norm, post_norm;
  GdnWeights gdn;
  AttentionWeights attn;
  bool sparse = false;
  MlpWeights mlp;
  MoeWeights moe;
};

class HybridModel final : public Model {
 public:
  HybridModel(ModelConfig config, HybridVariant variant)
      : config_(std::move(config)), variant_(std::move(variant)) {}

  Status load(WeightSource& weights, const LoadOptions& options);  // qwen3_5_weights.cpp
  const ModelConfig& config() const override { return config_; }
  Expected<ModelCache> create_cache(const CacheConfig& cache_config) const override;
  Expected<Tensor> forward(const ForwardBatch& batch, ModelCache& cache) override;

 private:
  Status check_config() const;
  Status load_gdn(WeightSource& w, const std::string& p, GdnWeights& l);
  Status load_attention(WeightSource& w, const std::string& p, AttentionWeights& l);
  Status load_moe(WeightSource& w, const std::string& p, MoeWeights& l);
  bool layer_is_sparse(int64_t layer) const;

  Status check_cache(const ForwardBatch& batch, const ModelCache& cache) const;
  void reset_new_requests(const ForwardBatch& batch, ModelCache& cache) const;
  Status gdn(const LayerWeights& l, const Tensor& x, const ForwardBatch& batch, Tensor& conv_state,
             Tensor& ssm_state, Tensor& out) const;
  Status attention(const LayerWeights& l, const Tensor& x, const ForwardBatch& batch,
                   Tensor& kv_cache, Tensor& out) const;
  Status mlp(const LayerWeights& l, const Tensor& x, Tensor& out) const;

  ModelConfig config_;
  HybridVariant variant_;
  int64_t num_attention_layers_ = 0, num_linear_layers_ = 0;
  Tensor embed_tokens_, final_norm_, lm_head_, cos_sin_cache_;
  std::vector<LayerWeights> layers_;
};

// Builds and loads the model; the registry's factories call this with their variant.
Expected<std::unique_ptr<Model>> create_hybrid_model(const ModelConfig& config,
                                                     WeightSource& weights,
                                                     const LoadOptions& options,
                                                     const HybridVariant& variant);

// Row layout helper for fused checkpoints: a new tensor holding src's rows [begin, end) of
// each range, in order (any dtype; the bytes are copied).
Expected<Tensor> gather_row_ranges(const Tensor& src,
                                   const std::vector<std::pair<int64_t, int64_t>>& ranges);

}  // namespace vllm::hybrid
