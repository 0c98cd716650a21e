// Test helper: turns a float checkpoint folder into a block-scaled FP8 checkpoint written as
// the published ones are (each quantized linear weight `X` as F8_E4M3 beside its F32 or BF16
// scales `X_scale_inv`, config.json with a quantization_config), plus its dequantized twin:
// the same folder with every quantized weight replaced by its F32 dequantized values. An FP8
// model and its twin compute the same function, so their logits must agree to f32 rounding.
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "base/float_convert.h"
#include "loader/checkpoint.h"
#include "loader/safetensors_writer.h"
#include "tensor/block_fp8.h"

namespace vllm::testing {

struct Fp8Conversion {
  WeightBlock block{128, 128};
  bool quantize_ba = false;  // in_proj_b / in_proj_a / in_proj_ba too (Qwen keeps them BF16)
  bool bf16_scales = false;  // scales stored as BF16 (the twin uses the rounded values)
  bool quantization_config = true;
  std::set<std::string> also;  // more tensors to quantize (for error tests)
};

inline Fp8Conversion fp8_conversion(WeightBlock block, bool quantize_ba = false,
                                    bool bf16_scales = false) {
  Fp8Conversion c;
  c.block = block;
  c.quantize_ba = quantize_ba;
  c.bf16_scales = bf16_scales;
  return c;
}

// The linear weights Qwen's FP8 checkpoints quantize: attention q/k/v/o, Gated DeltaNet
// in_proj_qkv / in_proj_z / in_proj_qkvz / out_proj, MLP, shared expert and expert
// projections (per expert or fused). Not: embeddings, lm_head, norms, the router
// (mlp.gate), shared_expert_gate, conv1d, in_proj_b / in_proj_a, the vision tower, mtp.*.
inline bool fp8_quantized_name(const std::string& name, const Fp8Conversion& c) {
  if (c.also.count(name) != 0) return true;
  if (name.rfind("mtp.", 0) == 0 || name.find(".visual.") != std::string::npos) return false;
  auto ends = [&](const std::string& tail) {
    return name.size() >= tail.size() &&
           name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  for (const char* t :
       {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "in_proj_qkv.weight",
        "in_proj_z.weight", "in_proj_qkvz.weight", "out_proj.weight", "gate_proj.weight",
        "up_proj.weight", "down_proj.weight", "experts.gate_up_proj", "experts.down_proj"}) {
    if (ends(t)) return true;
  }
  if (c.quantize_ba) {
    for (const char* t : {"in_proj_b.weight", "in_proj_a.weight", "in_proj_ba.weight"}) {
      if (ends(t)) return true;
    }
  }
  return false;
}

inline Tensor to_bf16_rounded(Tensor f32, Tensor* widened) {  // f32 by value: may be *widened
  Tensor bf = Tensor::empty(f32.shape(), DType::kBF16);
  *widened = Tensor::empty(f32.shape(), DType::kF32);
  for (int64_t i = 0; i < f32.numel(); ++i) {
    bf.data<uint16_t>()[i] = f32_to_bf16(f32.data<float>()[i]);
    widened->data<float>()[i] = bf16_to_f32(bf.data<uint16_t>()[i]);
  }
  return bf;
}

// Writes fp8_dir and twin_dir (config.json, model.safetensors; generation_config.json copied
// when there is one). Returns the names of the quantized tensors.
inline Expected<std::vector<std::string>> write_fp8_checkpoint(
    const std::filesystem::path& src, const std::filesystem::path& fp8_dir,
    const std::filesystem::path& twin_dir, const Fp8Conversion& c) {
  namespace fs = std::filesystem;
  fs::create_directories(fp8_dir);
  fs::create_directories(twin_dir);
  nlohmann::json config;
  std::ifstream(src / "config.json") >> config;
  std::ofstream(twin_dir / "config.json") << config.dump(2) << "\n";
  if (c.quantization_config) {
    config["quantization_config"] = {{"quant_method", "fp8"},
                                     {"fmt", "e4m3"},
                                     {"activation_scheme", "dynamic"},
                                     {"weight_block_size", {c.block.n, c.block.k}},
                                     {"modules_to_not_convert", {"lm_head"}}};
  }
  std::ofstream(fp8_dir / "config.json") << config.dump(2) << "\n";
  if (fs::exists(src / "generation_config.json")) {
    fs::copy_file(src / "generation_config.json", fp8_dir / "generation_config.json");
    fs::copy_file(src / "generation_config.json", twin_dir / "generation_config.json");
  }
  VLLM_ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::open(src));
  NamedTensors fp8, twin;
  std::vector<std::string> quantized;
  for (const std::string& name : checkpoint.names()) {
    VLLM_ASSIGN_OR_RETURN(Tensor t, checkpoint.tensor(name));
    if (!fp8_quantized_name(name, c) || t.ndim() < 2) {
      fp8.emplace_back(name, t);
      twin.emplace_back(name, t);
      continue;
    }
    VLLM_ASSIGN_OR_RETURN(LinearWeight q, quantize_fp8_blocks(t.clone(), c.block, name));
    Tensor stored_scales = q.scale_inv;
    if (c.bf16_scales) stored_scales = to_bf16_rounded(q.scale_inv, &q.scale_inv);
    VLLM_ASSIGN_OR_RETURN(Tensor deq, dequantize_fp8_blocks(q));
    fp8.emplace_back(name, q.weight);
    fp8.emplace_back(name + "_scale_inv", stored_scales);
    twin.emplace_back(name, deq);
    quantized.push_back(name);
  }
  VLLM_RETURN_IF_ERROR(write_safetensors(fp8_dir / "model.safetensors", fp8));
  VLLM_RETURN_IF_ERROR(write_safetensors(twin_dir / "model.safetensors", twin));
  return quantized;
}

}  // namespace vllm::testing
