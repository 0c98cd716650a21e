// Small random-weight Qwen3.5 / Qwen3.5-MoE / Qwen3-Next checkpoints for the model tests,
// written with the names and layouts the shipped checkpoints use. One seed gives one set of
// logical weights whatever the flavour, so tests can check that two layouts of the same
// weights (separate vs fused GDN projections, per-expert vs fused experts, text-only vs
// ConditionalGeneration naming) give the same logits.
#pragma once

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "loader/safetensors_writer.h"

namespace vllm::testing {

struct HybridSpec {
  enum class Family { kQwen3_5, kQwen3_5Moe, kQwen3Next };
  Family family = Family::kQwen3_5;
  bool conditional = false;    // Qwen3.5: *ForConditionalGeneration naming + visual/mtp tensors
  bool fused_experts = false;  // experts.gate_up_proj / experts.down_proj instead of per expert
  bool tie_word_embeddings = false;
  int64_t decoder_sparse_step = 1;       // Qwen3-Next
  std::vector<int64_t> mlp_only_layers;  // Qwen3-Next
  bool moe = false;                      // Qwen3-Next: num_experts > 0
  int64_t checkpoint_experts = 0;        // experts written (0: the config's num_experts)
  uint64_t seed = 1;
};

struct HybridDims {
  int64_t vocab = 96, hidden = 32, inter = 40, layers = 4, heads = 4, kv_heads = 2, head_dim = 24;
  int64_t hk = 2, hv = 4, dk = 8, dv = 8, conv = 4;
  int64_t experts = 6, top_k = 2, moe_inter = 12, shared_inter = 20;
  std::vector<std::string> layer_types = {"linear_attention", "linear_attention", "full_attention",
                                          "linear_attention"};
};

class HybridCheckpointWriter {
 public:
  explicit HybridCheckpointWriter(HybridSpec spec, HybridDims dims = {})
      : spec_(std::move(spec)), d_(std::move(dims)), rng_(spec_.seed) {}

  // Writes config.json and model.safetensors into dir. `drop` names tensors to leave out;
  // `reshape` gives tensors a wrong shape (one extra row).
  Status write(const std::filesystem::path& dir, const std::vector<std::string>& drop = {},
               const std::vector<std::string>& reshape = {}) {
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "config.json") << config().dump(2) << "\n";
    NamedTensors tensors = weights();
    NamedTensors kept;
    for (auto& [name, t] : tensors) {
      if (std::find(drop.begin(), drop.end(), name) != drop.end()) continue;
      if (std::find(reshape.begin(), reshape.end(), name) != reshape.end()) {
        Shape s = t.shape();
        s[0] += 1;
        t = random(s, 0.1);
      }
      kept.emplace_back(name, t);
    }
    return write_safetensors(dir / "model.safetensors", kept);
  }

  const HybridDims& dims() const { return d_; }

  bool sparse_layer(int64_t i) const {
    switch (spec_.family) {
      case HybridSpec::Family::kQwen3_5:
        return false;
      case HybridSpec::Family::kQwen3_5Moe:
        return true;
      case HybridSpec::Family::kQwen3Next:
        return spec_.moe &&
               std::find(spec_.mlp_only_layers.begin(), spec_.mlp_only_layers.end(), i) ==
                   spec_.mlp_only_layers.end() &&
               (i + 1) % spec_.decoder_sparse_step == 0;
    }
    return false;
  }

 private:
  nlohmann::json config() const {
    const bool moe = spec_.family == HybridSpec::Family::kQwen3_5Moe;
    const bool next = spec_.family == HybridSpec::Family::kQwen3Next;
    nlohmann::json text = {
        {"vocab_size", d_.vocab},
        {"hidden_size", d_.hidden},
        {"num_hidden_layers", d_.layers},
        {"num_attention_heads", d_.heads},
        {"num_key_value_heads", d_.kv_heads},
        {"head_dim", d_.head_dim},
        {"hidden_act", "silu"},
        {"max_position_embeddings", 128},
        {"rms_norm_eps", 1e-6},
        {"tie_word_embeddings", spec_.tie_word_embeddings},
        {"layer_types", d_.layer_types},
        {"linear_num_key_heads", d_.hk},
        {"linear_num_value_heads", d_.hv},
        {"linear_key_head_dim", d_.dk},
        {"linear_value_head_dim", d_.dv},
        {"linear_conv_kernel_dim", d_.conv},
        {"attention_bias", false},
    };
    if (!moe) text["intermediate_size"] = d_.inter;
    if (moe || (next && spec_.moe)) {
      text["num_experts"] = d_.experts;
      text["num_experts_per_tok"] = d_.top_k;
      text["moe_intermediate_size"] = d_.moe_inter;
      text["shared_expert_intermediate_size"] = d_.shared_inter;
      text["norm_topk_prob"] = true;
    }
    if (next) {
      text["decoder_sparse_step"] = spec_.decoder_sparse_step;
      text["mlp_only_layers"] = spec_.mlp_only_layers;
      text["rope_theta"] = 10000.0;
      text["partial_rotary_factor"] = 0.25;
      text["architectures"] = {"Qwen3NextForCausalLM"};
      text["model_type"] = "qwen3_next";
      return text;
    }
    text["rope_parameters"] = {{"rope_type", "default"},
                               {"rope_theta", 10000.0},
                               {"partial_rotary_factor", 0.25},
                               {"mrope_section", mrope_section()},
                               {"mrope_interleaved", true}};
    const std::string base = moe ? "qwen3_5_moe" : "qwen3_5";
    const std::string arch = moe ? "Qwen3_5Moe" : "Qwen3_5";
    text["model_type"] = base + "_text";
    if (!spec_.conditional) {
      text["architectures"] = {arch + "ForCausalLM"};
      return text;
    }
    return {{"architectures", {arch + "ForConditionalGeneration"}},
            {"model_type", base},
            {"tie_word_embeddings", spec_.tie_word_embeddings},
            {"text_config", text},
            {"vision_config", {{"depth", 1}, {"hidden_size", 8}}}};
  }

  // The rotary pairs (a quarter of head_dim, halved) over M-RoPE's three sections.
  std::vector<int64_t> mrope_section() const {
    const int64_t pairs = d_.head_dim / 8;
    return {pairs - 2 * (pairs / 3), pairs / 3, pairs / 3};
  }

  Tensor random(const Shape& shape, double scale, double mean = 0.0) {
    Tensor t = Tensor::empty(shape, DType::kF32);
    std::uniform_real_distribution<double> dist(-scale, scale);
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data<float>()[i] = static_cast<float>(mean + dist(rng_));
    return t;
  }
  Tensor linear(int64_t out, int64_t in) { return random({out, in}, 1.0 / std::sqrt(double(in))); }

  // Rows [begin, end) of a 2-D tensor, copied.
  static Tensor rows(const Tensor& t, int64_t begin, int64_t end) {
    return t.slice(0, begin, end).clone();
  }
  static Tensor cat(const std::vector<Tensor>& parts) {
    int64_t n = 0;
    for (const Tensor& p : parts) n += p.size(0);
    Shape s = parts[0].shape();
    s[0] = n;
    Tensor out = Tensor::empty(s, DType::kF32);
    float* dst = out.data<float>();
    for (const Tensor& p : parts) dst = std::copy_n(p.data<float>(), p.numel(), dst);
    return out;
  }

  NamedTensors weights() {
    const bool next = spec_.family == HybridSpec::Family::kQwen3Next;
    const std::string p = spec_.conditional ? "model.language_model." : "model.";
    const int64_t h = d_.hidden, kd = d_.hk * d_.dk, vd = d_.hv * d_.dv, conv_dim = 2 * kd + vd;
    const int64_t group = d_.hv / d_.hk;
    NamedTensors out;
    // Logical weights are drawn in one fixed order, whatever the flavour.
    out.emplace_back(p + "embed_tokens.weight", random({d_.vocab, h}, 1.0));
    out.emplace_back(p + "norm.weight", random({h}, 0.1));
    Tensor head = random({d_.vocab, h}, 1.0 / std::sqrt(double(h)));
    if (!spec_.tie_word_embeddings) out.emplace_back("lm_head.weight", head);
    for (int64_t i = 0; i < d_.layers; ++i) {
      const std::string l = p + "layers." + std::to_string(i) + ".";
      out.emplace_back(l + "input_layernorm.weight", random({h}, 0.1));
      out.emplace_back(l + "post_attention_layernorm.weight", random({h}, 0.1));
      if (d_.layer_types[static_cast<size_t>(i)] == "linear_attention") {
        const std::string a = l + "linear_attn.";
        Tensor qkv = linear(conv_dim, h), z = linear(vd, h), b = linear(d_.hv, h),
               av = linear(d_.hv, h);
        if (next) {
          std::vector<Tensor> qkvz, ba;
          for (int64_t k = 0; k < d_.hk; ++k) {
            qkvz.push_back(rows(qkv, k * d_.dk, (k + 1) * d_.dk));
            qkvz.push_back(rows(qkv, kd + k * d_.dk, kd + (k + 1) * d_.dk));
            qkvz.push_back(rows(qkv, 2 * kd + k * group * d_.dv, 2 * kd + (k + 1) * group * d_.dv));
            qkvz.push_back(rows(z, k * group * d_.dv, (k + 1) * group * d_.dv));
            ba.push_back(rows(b, k * group, (k + 1) * group));
            ba.push_back(rows(av, k * group, (k + 1) * group));
          }
          out.emplace_back(a + "in_proj_qkvz.weight", cat(qkvz));
          out.emplace_back(a + "in_proj_ba.weight", cat(ba));
        } else {
          out.emplace_back(a + "in_proj_qkv.weight", qkv);
          out.emplace_back(a + "in_proj_z.weight", z);
          out.emplace_back(a + "in_proj_b.weight", b);
          out.emplace_back(a + "in_proj_a.weight", av);
        }
        out.emplace_back(a + "conv1d.weight", random({conv_dim, 1, d_.conv}, 0.5));
        Tensor a_log = random({d_.hv}, 1.0, 1.0);  // A in (1, e^2)
        out.emplace_back(a + "A_log", a_log);
        out.emplace_back(a + "dt_bias", random({d_.hv}, 1.0));
        out.emplace_back(a + "norm.weight", random({d_.dv}, 0.1, 1.0));
        out.emplace_back(a + "out_proj.weight", linear(h, vd));
      } else {
        const std::string a = l + "self_attn.";
        out.emplace_back(a + "q_proj.weight", linear(2 * d_.heads * d_.head_dim, h));
        out.emplace_back(a + "k_proj.weight", linear(d_.kv_heads * d_.head_dim, h));
        out.emplace_back(a + "v_proj.weight", linear(d_.kv_heads * d_.head_dim, h));
        out.emplace_back(a + "o_proj.weight", linear(h, d_.heads * d_.head_dim));
        out.emplace_back(a + "q_norm.weight", random({d_.head_dim}, 0.1));
        out.emplace_back(a + "k_norm.weight", random({d_.head_dim}, 0.1));
      }
      const std::string m = l + "mlp.";
      if (!sparse_layer(i)) {
        out.emplace_back(m + "gate_proj.weight", linear(d_.inter, h));
        out.emplace_back(m + "up_proj.weight", linear(d_.inter, h));
        out.emplace_back(m + "down_proj.weight", linear(h, d_.inter));
        continue;
      }
      out.emplace_back(m + "gate.weight", linear(d_.experts, h));
      std::vector<Tensor> gate_up, down;
      const int64_t written = spec_.checkpoint_experts > 0 ? spec_.checkpoint_experts : d_.experts;
      for (int64_t e = 0; e < written; ++e) {
        Tensor g = linear(d_.moe_inter, h), u = linear(d_.moe_inter, h),
               dn = linear(h, d_.moe_inter);
        if (spec_.fused_experts) {
          gate_up.push_back(cat({g, u}).view({1, 2 * d_.moe_inter, h}));
          down.push_back(dn.view({1, h, d_.moe_inter}));
        } else {
          const std::string x = m + "experts." + std::to_string(e) + ".";
          out.emplace_back(x + "gate_proj.weight", g);
          out.emplace_back(x + "up_proj.weight", u);
          out.emplace_back(x + "down_proj.weight", dn);
        }
      }
      if (spec_.fused_experts) {
        out.emplace_back(m + "experts.gate_up_proj", cat(gate_up));
        out.emplace_back(m + "experts.down_proj", cat(down));
      }
      out.emplace_back(m + "shared_expert.gate_proj.weight", linear(d_.shared_inter, h));
      out.emplace_back(m + "shared_expert.up_proj.weight", linear(d_.shared_inter, h));
      out.emplace_back(m + "shared_expert.down_proj.weight", linear(h, d_.shared_inter));
      out.emplace_back(m + "shared_expert_gate.weight", linear(1, h));
    }
    // Tensors the text model must not read.
    if (spec_.conditional) {
      out.emplace_back("model.visual.patch_embed.proj.weight", random({8, 3, 2, 2, 2}, 0.1));
      out.emplace_back("model.visual.blocks.0.attn.qkv.weight", random({24, 8}, 0.1));
    }
    out.emplace_back("mtp.fc.weight", random({h, 2 * h}, 0.1));
    out.emplace_back("mtp.layers.0.input_layernorm.weight", random({h}, 0.1));
    return out;
  }

  HybridSpec spec_;
  HybridDims d_;
  std::mt19937_64 rng_;
};

}  // namespace vllm::testing
