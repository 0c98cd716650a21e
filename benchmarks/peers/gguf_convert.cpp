// gguf_convert: writes a Hugging Face model folder as a GGUF file for llama.cpp, so the peer
// benchmark runs both engines on the same weights.
//
//   gguf_convert MODEL_DIR OUT.gguf [--outtype bf16|f32]
//
// Architectures: Qwen3ForCausalLM (llama.cpp "qwen3") and Qwen3_5MoeForCausalLM /
// Qwen3_5ForCausalLM ("qwen35moe" / "qwen35"). The file carries no tokenizer (llama.cpp's
// "none" vocabulary of vocab_size placeholder tokens): the benchmark feeds token ids.
// Matrices keep the checkpoint's values (bf16 -> f32 is exact); 1-D tensors and the conv
// kernel are f32. For Qwen3.5 the tensors are rewritten the way llama.cpp's loader expects:
// RMSNorm weights w become 1 + w (except the gated norm of the linear-attention layers),
// A_log becomes A = -exp(A_log), and where there are more value heads than key heads the
// value heads of the linear-attention layers are reordered from grouped (per key head) to
// tiled order.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/float_convert.h"
#include "gguf_writer.h"
#include "loader/checkpoint.h"
#include "loader/hf_config.h"

namespace vllm::peers {
namespace {

struct Matrix {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

class Converter {
 public:
  Converter(const Checkpoint& ckpt, const ModelConfig& config, bool f32_out)
      : ckpt_(ckpt), config_(config), f32_out_(f32_out) {}

  Expected<Matrix> read(const std::string& name) {
    VLLM_ASSIGN_OR_RETURN(Tensor t, ckpt_.tensor(name));
    Matrix m;
    m.shape.assign(t.shape().begin(), t.shape().end());
    const int64_t n = t.numel();
    m.data.resize(static_cast<size_t>(n));
    const auto* bits = static_cast<const uint16_t*>(t.data_ptr());
    switch (t.dtype()) {
      case DType::kF32:
        std::memcpy(m.data.data(), t.data_ptr(), static_cast<size_t>(n) * sizeof(float));
        break;
      case DType::kBF16:
        for (int64_t i = 0; i < n; ++i) m.data[i] = bf16_to_f32(bits[i]);
        break;
      case DType::kF16:
        for (int64_t i = 0; i < n; ++i) m.data[i] = f16_to_f32(bits[i]);
        break;
      default:
        return make_error(ErrorCode::kUnsupported, "{}: dtype {} is not a float type", name,
                          dtype_name(t.dtype()));
    }
    return m;
  }

  // Adds `m` as a matrix (bf16 unless --outtype f32) or, when `keep_f32`, as f32.
  void emit(const std::string& name, const Matrix& m, bool keep_f32 = false) {
    const size_t n = m.data.size();
    std::vector<uint8_t> bytes;
    if (keep_f32 || f32_out_ || m.shape.size() < 2) {
      bytes.resize(n * sizeof(float));
      std::memcpy(bytes.data(), m.data.data(), bytes.size());
      writer_.add_tensor(name, m.shape, GgmlType::kF32, std::move(bytes));
    } else {
      bytes.resize(n * sizeof(uint16_t));
      auto* out = reinterpret_cast<uint16_t*>(bytes.data());
      for (size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(m.data[i]);
      writer_.add_tensor(name, m.shape, GgmlType::kBF16, std::move(bytes));
    }
  }

  Status copy(const std::string& hf, const std::string& gguf, bool keep_f32 = false) {
    VLLM_ASSIGN_OR_RETURN(Matrix m, read(hf));
    emit(gguf, m, keep_f32);
    return Status::ok();
  }

  Status norm(const std::string& hf, const std::string& gguf, bool unit_offset) {
    VLLM_ASSIGN_OR_RETURN(Matrix m, read(hf));
    if (unit_offset) {
      for (float& v : m.data) v += 1.0f;
    }
    emit(gguf, m, true);
    return Status::ok();
  }

  GgufWriter& writer() { return writer_; }
  const ModelConfig& config() const { return config_; }

 private:
  const Checkpoint& ckpt_;
  const ModelConfig& config_;
  bool f32_out_;
  GgufWriter writer_;
};

std::string blk(int64_t i, const char* what) {
  return fmt::format("blk.{}.{}", i, what);
}
std::string hf_layer(int64_t i, const char* what) {
  return fmt::format("model.layers.{}.{}", i, what);
}

// Metadata every converted architecture has.
void add_common(GgufWriter& w, const std::string& arch, const ModelConfig& c) {
  w.add_string("general.architecture", arch);
  w.add_string("general.name", arch + "-peer-benchmark");
  w.add_u32(arch + ".context_length", static_cast<uint32_t>(c.max_position_embeddings));
  w.add_u32(arch + ".embedding_length", static_cast<uint32_t>(c.hidden_size));
  w.add_u32(arch + ".block_count", static_cast<uint32_t>(c.num_hidden_layers));
  if (c.intermediate_size > 0) {
    w.add_u32(arch + ".feed_forward_length", static_cast<uint32_t>(c.intermediate_size));
  }
  w.add_u32(arch + ".attention.head_count", static_cast<uint32_t>(c.num_attention_heads));
  w.add_u32(arch + ".attention.head_count_kv", static_cast<uint32_t>(c.num_key_value_heads));
  w.add_u32(arch + ".attention.key_length", static_cast<uint32_t>(c.head_dim));
  w.add_u32(arch + ".attention.value_length", static_cast<uint32_t>(c.head_dim));
  w.add_f32(arch + ".attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
  w.add_f32(arch + ".rope.freq_base", static_cast<float>(c.rope.rope_theta));
  w.add_u32(arch + ".vocab_size", static_cast<uint32_t>(c.vocab_size));
  w.add_string("tokenizer.ggml.model", "none");
}

Status add_embeddings(Converter& cv, bool unit_offset_norm) {
  const ModelConfig& c = cv.config();
  VLLM_RETURN_IF_ERROR(cv.copy("model.embed_tokens.weight", "token_embd.weight"));
  VLLM_RETURN_IF_ERROR(cv.norm("model.norm.weight", "output_norm.weight", unit_offset_norm));
  if (!c.tie_word_embeddings) VLLM_RETURN_IF_ERROR(cv.copy("lm_head.weight", "output.weight"));
  return Status::ok();
}

Status convert_qwen3(Converter& cv) {
  const ModelConfig& c = cv.config();
  add_common(cv.writer(), "qwen3", c);
  VLLM_RETURN_IF_ERROR(add_embeddings(cv, false));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    VLLM_RETURN_IF_ERROR(
        cv.norm(hf_layer(i, "input_layernorm.weight"), blk(i, "attn_norm.weight"), false));
    VLLM_RETURN_IF_ERROR(
        cv.norm(hf_layer(i, "post_attention_layernorm.weight"), blk(i, "ffn_norm.weight"), false));
    VLLM_RETURN_IF_ERROR(
        cv.norm(hf_layer(i, "self_attn.q_norm.weight"), blk(i, "attn_q_norm.weight"), false));
    VLLM_RETURN_IF_ERROR(
        cv.norm(hf_layer(i, "self_attn.k_norm.weight"), blk(i, "attn_k_norm.weight"), false));
    VLLM_RETURN_IF_ERROR(cv.copy(hf_layer(i, "self_attn.q_proj.weight"), blk(i, "attn_q.weight")));
    VLLM_RETURN_IF_ERROR(cv.copy(hf_layer(i, "self_attn.k_proj.weight"), blk(i, "attn_k.weight")));
    VLLM_RETURN_IF_ERROR(cv.copy(hf_layer(i, "self_attn.v_proj.weight"), blk(i, "attn_v.weight")));
    VLLM_RETURN_IF_ERROR(
        cv.copy(hf_layer(i, "self_attn.o_proj.weight"), blk(i, "attn_output.weight")));
    VLLM_RETURN_IF_ERROR(cv.copy(hf_layer(i, "mlp.gate_proj.weight"), blk(i, "ffn_gate.weight")));
    VLLM_RETURN_IF_ERROR(cv.copy(hf_layer(i, "mlp.up_proj.weight"), blk(i, "ffn_up.weight")));
    VLLM_RETURN_IF_ERROR(cv.copy(hf_layer(i, "mlp.down_proj.weight"), blk(i, "ffn_down.weight")));
  }
  return Status::ok();
}

// Value heads grouped by key head [g][j] -> tiled [j][g], along `axis` (0: rows, 1: columns)
// of a 2-D matrix, for the index range [start, start + nk * per * head_dim) of that axis.
void tile_value_heads(Matrix& m, int axis, int64_t start, int64_t nk, int64_t per,
                      int64_t head_dim) {
  if (nk == 0 || per <= 1) return;
  const int64_t rows = m.shape[0];
  const int64_t cols = m.shape.size() > 1 ? m.shape[1] : 1;
  const int64_t span = nk * per * head_dim;
  auto new_index = [&](int64_t idx) {
    const int64_t d = idx % head_dim, head = idx / head_dim;
    const int64_t g = head / per, j = head % per;
    return (j * nk + g) * head_dim + d;
  };
  Matrix out = m;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t col = 0; col < cols; ++col) {
      int64_t nr = r, nc = col;
      if (axis == 0 && r >= start && r < start + span) nr = start + new_index(r - start);
      if (axis == 1 && col >= start && col < start + span) nc = start + new_index(col - start);
      out.data[nr * cols + nc] = m.data[r * cols + col];
    }
  }
  m = std::move(out);
}

Status convert_qwen35(Converter& cv) {
  const ModelConfig& c = cv.config();
  const std::string arch = c.is_moe() ? "qwen35moe" : "qwen35";
  GgufWriter& w = cv.writer();
  add_common(w, arch, c);
  w.add_u32(arch + ".rope.dimension_count",
            static_cast<uint32_t>(std::lround(c.head_dim * c.rope.partial_rotary_factor)));
  std::vector<int32_t> sections(4, 0);
  for (size_t i = 0; i < c.rope.mrope_section.size() && i < 4; ++i) {
    sections[i] = static_cast<int32_t>(c.rope.mrope_section[i]);
  }
  if (c.rope.mrope_section.empty()) sections = {11, 11, 10, 0};
  w.add_i32_array(arch + ".rope.dimension_sections", sections);
  w.add_u32(arch + ".ssm.conv_kernel", static_cast<uint32_t>(c.linear_conv_kernel_dim));
  w.add_u32(arch + ".ssm.state_size", static_cast<uint32_t>(c.linear_key_head_dim));
  w.add_u32(arch + ".ssm.group_count", static_cast<uint32_t>(c.linear_num_key_heads));
  w.add_u32(arch + ".ssm.time_step_rank", static_cast<uint32_t>(c.linear_num_value_heads));
  w.add_u32(arch + ".ssm.inner_size",
            static_cast<uint32_t>(c.linear_value_head_dim * c.linear_num_value_heads));
  w.add_u32(arch + ".full_attention_interval", static_cast<uint32_t>(c.full_attention_interval));
  if (c.is_moe()) {
    w.add_u32(arch + ".expert_count", static_cast<uint32_t>(c.num_experts));
    w.add_u32(arch + ".expert_used_count", static_cast<uint32_t>(c.num_experts_per_tok));
    w.add_u32(arch + ".expert_feed_forward_length", static_cast<uint32_t>(c.moe_intermediate_size));
    w.add_u32(arch + ".expert_shared_feed_forward_length",
              static_cast<uint32_t>(c.shared_expert_intermediate_size));
  }
  if (c.linear_key_head_dim != c.linear_value_head_dim) {
    return make_error(
        ErrorCode::kUnsupported,
        "llama.cpp's qwen35 loader needs linear_key_head_dim == linear_value_head_dim");
  }
  VLLM_RETURN_IF_ERROR(add_embeddings(cv, true));

  const int64_t nk = c.linear_num_key_heads, nv = c.linear_num_value_heads;
  const int64_t per = nk > 0 ? nv / nk : 1;
  const int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    VLLM_RETURN_IF_ERROR(
        cv.norm(hf_layer(i, "input_layernorm.weight"), blk(i, "attn_norm.weight"), true));
    VLLM_RETURN_IF_ERROR(cv.norm(hf_layer(i, "post_attention_layernorm.weight"),
                                 blk(i, "post_attention_norm.weight"), true));
    if (c.layer_types[i] == LayerType::kLinearAttention) {
      VLLM_ASSIGN_OR_RETURN(Matrix qkv, cv.read(hf_layer(i, "linear_attn.in_proj_qkv.weight")));
      tile_value_heads(qkv, 0, 2 * nk * dk, nk, per, dv);
      cv.emit(blk(i, "attn_qkv.weight"), qkv);
      VLLM_ASSIGN_OR_RETURN(Matrix z, cv.read(hf_layer(i, "linear_attn.in_proj_z.weight")));
      tile_value_heads(z, 0, 0, nk, per, dv);
      cv.emit(blk(i, "attn_gate.weight"), z);
      VLLM_ASSIGN_OR_RETURN(Matrix b, cv.read(hf_layer(i, "linear_attn.in_proj_b.weight")));
      tile_value_heads(b, 0, 0, nk, per, 1);
      cv.emit(blk(i, "ssm_beta.weight"), b);
      VLLM_ASSIGN_OR_RETURN(Matrix a, cv.read(hf_layer(i, "linear_attn.in_proj_a.weight")));
      tile_value_heads(a, 0, 0, nk, per, 1);
      cv.emit(blk(i, "ssm_alpha.weight"), a);
      VLLM_ASSIGN_OR_RETURN(Matrix a_log, cv.read(hf_layer(i, "linear_attn.A_log")));
      for (float& v : a_log.data) v = -std::exp(v);
      tile_value_heads(a_log, 0, 0, nk, per, 1);
      cv.emit(blk(i, "ssm_a"), a_log, true);
      VLLM_ASSIGN_OR_RETURN(Matrix dt, cv.read(hf_layer(i, "linear_attn.dt_bias")));
      tile_value_heads(dt, 0, 0, nk, per, 1);
      cv.emit(blk(i, "ssm_dt.bias"), dt, true);
      VLLM_ASSIGN_OR_RETURN(Matrix conv, cv.read(hf_layer(i, "linear_attn.conv1d.weight")));
      conv.shape = {conv.shape[0], conv.shape.back()};  // [C, 1, K] -> [C, K]
      tile_value_heads(conv, 0, 2 * nk * dk, nk, per, dv);
      cv.emit(blk(i, "ssm_conv1d.weight"), conv, true);
      VLLM_RETURN_IF_ERROR(
          cv.norm(hf_layer(i, "linear_attn.norm.weight"), blk(i, "ssm_norm.weight"), false));
      VLLM_ASSIGN_OR_RETURN(Matrix out, cv.read(hf_layer(i, "linear_attn.out_proj.weight")));
      tile_value_heads(out, 1, 0, nk, per, dv);
      cv.emit(blk(i, "ssm_out.weight"), out);
    } else {
      VLLM_RETURN_IF_ERROR(
          cv.copy(hf_layer(i, "self_attn.q_proj.weight"), blk(i, "attn_q.weight")));
      VLLM_RETURN_IF_ERROR(
          cv.copy(hf_layer(i, "self_attn.k_proj.weight"), blk(i, "attn_k.weight")));
      VLLM_RETURN_IF_ERROR(
          cv.copy(hf_layer(i, "self_attn.v_proj.weight"), blk(i, "attn_v.weight")));
      VLLM_RETURN_IF_ERROR(
          cv.copy(hf_layer(i, "self_attn.o_proj.weight"), blk(i, "attn_output.weight")));
      VLLM_RETURN_IF_ERROR(
          cv.norm(hf_layer(i, "self_attn.q_norm.weight"), blk(i, "attn_q_norm.weight"), true));
      VLLM_RETURN_IF_ERROR(
          cv.norm(hf_layer(i, "self_attn.k_norm.weight"), blk(i, "attn_k_norm.weight"), true));
    }
    if (c.is_moe()) {
      VLLM_RETURN_IF_ERROR(cv.copy(hf_layer(i, "mlp.gate.weight"), blk(i, "ffn_gate_inp.weight")));
      VLLM_ASSIGN_OR_RETURN(Matrix gate_up, cv.read(hf_layer(i, "mlp.experts.gate_up_proj")));
      const int64_t E = gate_up.shape[0], I2 = gate_up.shape[1], H = gate_up.shape[2];
      Matrix gate{{E, I2 / 2, H}, {}}, up{{E, I2 / 2, H}, {}};
      for (int64_t e = 0; e < E; ++e) {
        const float* base = gate_up.data.data() + e * I2 * H;
        gate.data.insert(gate.data.end(), base, base + (I2 / 2) * H);
        up.data.insert(up.data.end(), base + (I2 / 2) * H, base + I2 * H);
      }
      cv.emit(blk(i, "ffn_gate_exps.weight"), gate);
      cv.emit(blk(i, "ffn_up_exps.weight"), up);
      VLLM_RETURN_IF_ERROR(
          cv.copy(hf_layer(i, "mlp.experts.down_proj"), blk(i, "ffn_down_exps.weight")));
      VLLM_RETURN_IF_ERROR(cv.copy(hf_layer(i, "mlp.shared_expert.gate_proj.weight"),
                                   blk(i, "ffn_gate_shexp.weight")));
      VLLM_RETURN_IF_ERROR(
          cv.copy(hf_layer(i, "mlp.shared_expert.up_proj.weight"), blk(i, "ffn_up_shexp.weight")));
      VLLM_RETURN_IF_ERROR(cv.copy(hf_layer(i, "mlp.shared_expert.down_proj.weight"),
                                   blk(i, "ffn_down_shexp.weight")));
      VLLM_ASSIGN_OR_RETURN(Matrix sg, cv.read(hf_layer(i, "mlp.shared_expert_gate.weight")));
      sg.shape = {sg.shape.back()};  // [1, H] -> [H]
      cv.emit(blk(i, "ffn_gate_inp_shexp.weight"), sg, true);
    } else {
      VLLM_RETURN_IF_ERROR(cv.copy(hf_layer(i, "mlp.gate_proj.weight"), blk(i, "ffn_gate.weight")));
      VLLM_RETURN_IF_ERROR(cv.copy(hf_layer(i, "mlp.up_proj.weight"), blk(i, "ffn_up.weight")));
      VLLM_RETURN_IF_ERROR(cv.copy(hf_layer(i, "mlp.down_proj.weight"), blk(i, "ffn_down.weight")));
    }
  }
  return Status::ok();
}

Status run(const std::string& model_dir, const std::string& out_path, bool f32_out) {
  VLLM_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(model_dir));
  VLLM_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(model_dir));
  Converter cv(ckpt, config, f32_out);
  const std::string arch = config.architectures.empty() ? "" : config.architectures[0];
  if (arch == "Qwen3ForCausalLM") {
    VLLM_RETURN_IF_ERROR(convert_qwen3(cv));
  } else if (arch == "Qwen3_5MoeForCausalLM" || arch == "Qwen3_5ForCausalLM") {
    VLLM_RETURN_IF_ERROR(convert_qwen35(cv));
  } else {
    return make_error(ErrorCode::kUnsupported,
                      "gguf_convert: architecture '{}' is not supported (Qwen3ForCausalLM, "
                      "Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM)",
                      arch);
  }
  return cv.writer().write(out_path);
}

}  // namespace
}  // namespace vllm::peers

int main(int argc, char** argv) {
  if (argc != 3 && !(argc == 5 && std::strcmp(argv[3], "--outtype") == 0)) {
    std::fprintf(stderr, "usage: gguf_convert MODEL_DIR OUT.gguf [--outtype bf16|f32]\n");
    return 2;
  }
  bool f32_out = false;
  if (argc == 5) {
    if (std::strcmp(argv[4], "f32") == 0) {
      f32_out = true;
    } else if (std::strcmp(argv[4], "bf16") != 0) {
      std::fprintf(stderr, "gguf_convert: --outtype must be bf16 or f32, not '%s'\n", argv[4]);
      return 2;
    }
  }
  vllm::Status status = vllm::peers::run(argv[1], argv[2], f32_out);
  if (!status.is_ok()) {
    std::fprintf(stderr, "gguf_convert: %s\n", status.to_string().c_str());
    return 1;
  }
  std::printf("wrote %s\n", argv[2]);
  return 0;
}
