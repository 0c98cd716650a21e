#include "tools/tiny_checkpoint.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "base/float_convert.h"
#include "loader/safetensors_writer.h"

namespace vllm::testing {
namespace {

struct Dims {
  int64_t vocab = 512, hidden = 96, inter = 200, layers = 2, heads = 6, kv_heads = 2, head_dim = 16;
};

class Filler {
 public:
  explicit Filler(uint64_t seed) : rng_(seed) {}
  // bf16 tensor of N(mean, std^2) values.
  Tensor make(const Shape& shape, double mean, double std) {
    Tensor t = Tensor::empty(shape, DType::kBF16);
    std::normal_distribution<double> dist(mean, std);
    uint16_t* p = t.data<uint16_t>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = f32_to_bf16(static_cast<float>(dist(rng_)));
    return t;
  }
  Tensor linear(int64_t out, int64_t in) { return make({out, in}, 0.0, 1.0 / std::sqrt(in)); }
  Tensor norm(int64_t n) { return make({n}, 1.0, 0.1); }

 private:
  std::mt19937_64 rng_;
};

Status write_json(const std::filesystem::path& path, const nlohmann::json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) return make_error(ErrorCode::kIoError, "cannot write {}", path.string());
  return Status::ok();
}

}  // namespace

Status write_tiny_checkpoint(const std::filesystem::path& dir, const std::string& arch,
                             uint64_t seed, int64_t vocab_size) {
  if (arch != "llama" && arch != "qwen3") {
    return make_error(ErrorCode::kInvalidArgument, "arch must be llama or qwen3, got '{}'", arch);
  }
  const bool qwen3 = arch == "qwen3";
  Dims d;
  if (vocab_size > 0) d.vocab = vocab_size;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return make_error(ErrorCode::kIoError, "cannot create {}: {}", dir.string(), ec.message());

  nlohmann::json config = {
      {"architectures", {qwen3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM"}},
      {"model_type", qwen3 ? "qwen3" : "llama"},
      {"vocab_size", d.vocab},
      {"hidden_size", d.hidden},
      {"intermediate_size", d.inter},
      {"num_hidden_layers", d.layers},
      {"num_attention_heads", d.heads},
      {"num_key_value_heads", d.kv_heads},
      {"head_dim", d.head_dim},
      {"hidden_act", "silu"},
      {"max_position_embeddings", 1024},
      {"rms_norm_eps", 1e-6},
      {"rope_theta", 10000.0},
      {"tie_word_embeddings", !qwen3},
      {"attention_bias", false},
      {"bos_token_id", 1},
      {"eos_token_id", 2},
      {"torch_dtype", "bfloat16"},
  };
  if (!qwen3) {
    config["rope_scaling"] = {{"rope_type", "llama3"},
                              {"factor", 8.0},
                              {"low_freq_factor", 1.0},
                              {"high_freq_factor", 4.0},
                              {"original_max_position_embeddings", 256}};
  }
  VLLM_RETURN_IF_ERROR(write_json(dir / "config.json", config));
  VLLM_RETURN_IF_ERROR(
      write_json(dir / "generation_config.json",
                 {{"bos_token_id", 1}, {"eos_token_id", 2}, {"do_sample", false}}));

  Filler fill(seed);
  NamedTensors tensors;
  tensors.emplace_back("model.embed_tokens.weight", fill.make({d.vocab, d.hidden}, 0.0, 1.0));
  tensors.emplace_back("model.norm.weight", fill.norm(d.hidden));
  if (qwen3) tensors.emplace_back("lm_head.weight", fill.linear(d.vocab, d.hidden));
  for (int64_t i = 0; i < d.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    tensors.emplace_back(p + "input_layernorm.weight", fill.norm(d.hidden));
    tensors.emplace_back(p + "post_attention_layernorm.weight", fill.norm(d.hidden));
    tensors.emplace_back(p + "self_attn.q_proj.weight",
                         fill.linear(d.heads * d.head_dim, d.hidden));
    tensors.emplace_back(p + "self_attn.k_proj.weight",
                         fill.linear(d.kv_heads * d.head_dim, d.hidden));
    tensors.emplace_back(p + "self_attn.v_proj.weight",
                         fill.linear(d.kv_heads * d.head_dim, d.hidden));
    tensors.emplace_back(p + "self_attn.o_proj.weight",
                         fill.linear(d.hidden, d.heads * d.head_dim));
    if (qwen3) {
      tensors.emplace_back(p + "self_attn.q_norm.weight", fill.norm(d.head_dim));
      tensors.emplace_back(p + "self_attn.k_norm.weight", fill.norm(d.head_dim));
    }
    tensors.emplace_back(p + "mlp.gate_proj.weight", fill.linear(d.inter, d.hidden));
    tensors.emplace_back(p + "mlp.up_proj.weight", fill.linear(d.inter, d.hidden));
    tensors.emplace_back(p + "mlp.down_proj.weight", fill.linear(d.hidden, d.inter));
  }
  return write_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}});
}

}  // namespace vllm::testing
