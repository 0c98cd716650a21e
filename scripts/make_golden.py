#!/usr/bin/env python3
"""Writes tiny random checkpoints and their Hugging Face transformers reference outputs.

Why: the C++ CPU engine is checked against transformers in float32 (relative L2 <= 1e-4 on
every prefill position's logits; greedy tokens equal up to the first reference step whose
top-2 log-prob margin is below 1e-3). Real checkpoints are far too large for CI, so this
script builds one tiny model per supported architecture with the SHIPPED checkpoint layout
(tensor names, fused or per-expert MoE weights, VLM prefixes, extra mtp.* tensors) and
records what transformers computes for it.

Needs Python with torch, transformers (with qwen3_5, qwen3_5_moe and qwen3_next) and
safetensors; no GPU and no network (the math runs on the CPU, in float32):
    PYTHONUNBUFFERED=1 python3 scripts/make_golden.py --out OUT_DIR

Per model it writes <out>/<name>/: config.json, generation_config.json, model*.safetensors
(+ index when sharded), reference.safetensors and reference_info.json. Each written
checkpoint is loaded back with from_pretrained and compared parameter by parameter with the
in-memory model before any reference is computed from it, which proves that transformers
reads the layout we wrote. See tests/golden/README.md for the format.

Block-scaled FP8 models (qwen3_5_moe_fp8, qwen3_5_dense_fp8) are written as Qwen publishes
its FP8 checkpoints: config.json with a quantization_config (quant_method "fp8",
activation_scheme "dynamic", weight_block_size, modules_to_not_convert), each quantized
linear weight X as float8_e4m3fn beside its float32 scales X_scale_inv (one per block,
w = fp8(X) * X_scale_inv[n // bn][k // bk]), every other tensor in bfloat16. Weights are drawn
as for the float models, rounded to bfloat16, and the linear ones quantized by vLLM's online
block rule (per_block_cast_to_fp8: amax clamped to 1e-4, scale amax / 448, round to nearest
even). The reference is the model run in float32 on the dequantized weights (its
"dequantized twin", loaded by transformers from a float32 copy of the checkpoint). The FP8
checkpoint itself is then loaded with transformers' own FP8 support (on a CPU it dequantizes
at load): its parameters must equal the twin's bit for bit; if that loader cannot run here,
or dequantizes through bfloat16, the twin remains the reference and reference_info.json
says so (--fp8-reference twin skips the check). The dims are multiples of the block (or
smaller than it), because transformers derives an FP8 weight's block from the shapes of the
weight and its scale grid; partial edge blocks are covered by the C++ unit tests.
"""

import argparse
import importlib.util
import json
import math
import os
import shutil
import sys
import tempfile
import traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# CPU only: the references are float32 CPU computations, and transformers dequantizes an FP8
# checkpoint at load (what the FP8 check below compares) only where it sees no GPU.
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

# Optional fast kernels would replace transformers' pure-torch paths (and need a GPU).
# Hide them if present so the reference is the torch fallback on the CPU.
BLOCKED_MODULES = []
for _name in ("fla", "causal_conv1d", "kernels"):
    try:
        _found = importlib.util.find_spec(_name) is not None
    except (ImportError, ValueError):
        _found = False
    if _found:
        sys.modules[_name] = None  # makes `import NAME` fail and find_spec return None
        BLOCKED_MODULES.append(_name)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import safetensors  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
import transformers  # noqa: E402

PROMPT_LENGTHS = [5, 13, 29, 70]  # 70 > 64: chunked GDN prefill crosses a chunk boundary
NUM_GREEDY = 32
# The FP8 models use fewer references to stay within the folder's size limit.
FP8_PROMPT_LENGTHS = [5, 13, 70]
FP8_NUM_GREEDY = 16
FP8_BLOCK = [16, 32]  # weight_block_size [rows, columns]: several blocks per tiny matrix
MARGIN_THRESHOLD = 1e-3
SIZE_LIMIT = 10_000_000

L, FA = "linear_attention", "full_attention"


# ----------------------------------------------------------------------------------------
# Configs: same keys and structure as the real models' config.json files (configs/),
# tiny dims that are not powers of two, GQA ratio > 1.
# ----------------------------------------------------------------------------------------

def qwen3_5_dense_config():
    vocab = 419
    return {
        "architectures": ["Qwen3_5ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_output_gate": True,
        "dtype": "float32",
        "eos_token_id": vocab - 1,
        "full_attention_interval": 4,
        "head_dim": 24,
        "hidden_act": "silu",
        "hidden_size": 72,
        "initializer_range": 0.02,
        "intermediate_size": 152,
        "layer_types": [L, FA, L, L],
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 20,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_value_head_dim": 24,
        "max_position_embeddings": 262144,
        "mlp_only_layers": [],
        "model_type": "qwen3_5_text",
        "mtp_num_hidden_layers": 1,
        "mtp_use_dedicated_embeddings": False,
        "num_attention_heads": 6,
        "num_hidden_layers": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "tie_word_embeddings": False,
        "use_cache": True,
        "vocab_size": vocab,
        "mamba_ssm_dtype": "float32",
        "rope_parameters": {
            "mrope_interleaved": True,
            "mrope_section": [1, 1, 1],  # sums to rotary_dim / 2 = 24 * 0.25 / 2
            "rope_type": "default",
            "rope_theta": 10000000,
            "partial_rotary_factor": 0.25,
        },
    }


def qwen3_5_moe_config():
    vocab = 457
    hidden = 56
    return {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "image_token_id": vocab - 5,
        "model_type": "qwen3_5_moe",
        "text_config": {
            "attention_bias": False,
            "attention_dropout": 0.0,
            "attn_output_gate": True,
            "dtype": "float32",
            "eos_token_id": vocab - 1,
            "full_attention_interval": 4,
            "head_dim": 32,
            "hidden_act": "silu",
            "hidden_size": hidden,
            "initializer_range": 0.02,
            "layer_types": [L, L, FA, L],
            "linear_conv_kernel_dim": 4,
            "linear_key_head_dim": 16,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,
            "linear_value_head_dim": 20,
            "max_position_embeddings": 262144,
            "mlp_only_layers": [],
            "model_type": "qwen3_5_moe_text",
            "moe_intermediate_size": 40,
            "mtp_num_hidden_layers": 1,
            "mtp_use_dedicated_embeddings": False,
            "num_attention_heads": 4,
            "num_experts": 10,
            "num_experts_per_tok": 3,
            "num_hidden_layers": 4,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-06,
            "router_aux_loss_coef": 0.001,
            "shared_expert_intermediate_size": 44,
            "use_cache": True,
            "vocab_size": vocab,
            "mamba_ssm_dtype": "float32",
            "rope_parameters": {
                "mrope_interleaved": True,
                "mrope_section": [2, 1, 1],  # sums to rotary_dim / 2 = 32 * 0.25 / 2
                "rope_type": "default",
                "rope_theta": 10000000,
                "partial_rotary_factor": 0.25,
            },
        },
        "tie_word_embeddings": False,
        "transformers_version": transformers.__version__,
        "video_token_id": vocab - 4,
        "vision_config": {
            "deepstack_visual_indexes": [],
            "depth": 1,
            "hidden_act": "gelu_pytorch_tanh",
            "hidden_size": 32,
            "in_channels": 3,
            "initializer_range": 0.02,
            "intermediate_size": 48,
            "model_type": "qwen3_5_moe",
            "num_heads": 2,
            "num_position_embeddings": 16,
            "out_hidden_size": hidden,
            "patch_size": 4,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
        "vision_end_token_id": vocab - 6,
        "vision_start_token_id": vocab - 7,
    }


def qwen3_next_config():
    vocab = 389
    return {
        "architectures": ["Qwen3NextForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": vocab - 2,
        "decoder_sparse_step": 1,
        "eos_token_id": vocab - 1,
        # No layer_types, as in the shipped file: interval 2 gives [linear, full, linear, full].
        "full_attention_interval": 2,
        "head_dim": 24,
        "hidden_act": "silu",
        "hidden_size": 60,
        "initializer_range": 0.02,
        "intermediate_size": 128,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 24,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_value_head_dim": 16,
        "max_position_embeddings": 262144,
        "mlp_only_layers": [],
        "model_type": "qwen3_next",
        "moe_intermediate_size": 40,
        "norm_topk_prob": True,
        "num_attention_heads": 4,
        "num_experts": 6,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 4,
        "num_key_value_heads": 2,
        "output_router_logits": False,
        "partial_rotary_factor": 0.25,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 10000000,
        "router_aux_loss_coef": 0.001,
        "shared_expert_intermediate_size": 36,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "transformers_version": transformers.__version__,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": vocab,
    }


def qwen3_config():
    vocab = 397
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": vocab - 2,
        "eos_token_id": vocab - 1,
        "head_dim": 20,
        "hidden_act": "silu",
        "hidden_size": 80,
        "initializer_range": 0.02,
        "intermediate_size": 136,
        "max_position_embeddings": 40960,
        "max_window_layers": 4,
        "model_type": "qwen3",
        "num_attention_heads": 6,
        "num_hidden_layers": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "transformers_version": transformers.__version__,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": vocab,
    }


def llama_config():
    vocab = 509
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": vocab - 2,
        "eos_token_id": vocab - 1,
        "head_dim": 16,
        "hidden_act": "silu",
        "hidden_size": 96,
        "initializer_range": 0.02,
        "intermediate_size": 160,
        "max_position_embeddings": 512,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": 6,
        "num_hidden_layers": 4,
        "num_key_value_heads": 2,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        # Real Llama 3.2 uses theta 500000, factor 32, original 8192; these smaller values make
        # all three llama3 bands (kept, smoothed, divided by factor) matter at short positions.
        "rope_scaling": {
            "factor": 8.0,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 64,
            "rope_type": "llama3",
        },
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "transformers_version": transformers.__version__,
        "use_cache": True,
        "vocab_size": vocab,
    }


def qwen3_5_moe_fp8_config():
    """Qwen3.5 MoE (ConditionalGeneration, as Qwen3.5-397B-A17B-FP8) with every quantized
    matrix's dims a multiple of FP8_BLOCK (in_proj_b / in_proj_a stay bfloat16, as shipped)."""
    cfg = qwen3_5_moe_config()
    vocab, hidden = 131, 64
    t = cfg["text_config"]
    t.update({
        "dtype": "bfloat16",
        "eos_token_id": vocab - 1,
        "head_dim": 32,                  # q_proj [256, 64], k/v [64, 64], o_proj [64, 128]
        "hidden_size": hidden,
        "linear_key_head_dim": 16,       # in_proj_qkv [128, 64], in_proj_z [64, 64]
        "linear_value_head_dim": 16,     # out_proj [64, 64]
        "moe_intermediate_size": 32,     # experts: gate/up [32, 64], down [64, 32]
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "shared_expert_intermediate_size": 32,
        "vocab_size": vocab,
    })
    t["rope_parameters"]["mrope_section"] = [2, 1, 1]  # rotary_dim / 2 = 32 * 0.25 / 2
    cfg.update({
        "image_token_id": vocab - 5,
        "video_token_id": vocab - 4,
        "vision_end_token_id": vocab - 6,
        "vision_start_token_id": vocab - 7,
    })
    v = cfg["vision_config"]
    v.update({"hidden_size": 16, "intermediate_size": 32, "out_hidden_size": hidden})
    return cfg


def qwen3_5_dense_fp8_config():
    """Qwen3.5 dense (as Qwen3.5-27B-FP8) with the quantized matrices' dims multiples of
    FP8_BLOCK; in_proj_b / in_proj_a [4, 64] are FP8 too here (one block row each)."""
    cfg = qwen3_5_dense_config()
    vocab = 127
    cfg.update({
        "dtype": "bfloat16",
        "eos_token_id": vocab - 1,
        "head_dim": 32,                  # q_proj [256, 64], k/v [64, 64], o_proj [64, 128]
        "hidden_size": 64,
        "intermediate_size": 96,         # gate/up [96, 64], down [64, 96]
        "linear_key_head_dim": 16,       # in_proj_qkv [128, 64]
        "linear_value_head_dim": 16,     # in_proj_z [64, 64], out_proj [64, 64]
        "num_attention_heads": 4,
        "vocab_size": vocab,
    })
    cfg["rope_parameters"]["mrope_section"] = [2, 1, 1]
    return cfg


# family: "qwen3_5" / "qwen3_next" use RMSNorm (1 + w); the others multiply by w.
MODELS = {
    "qwen3_5_dense": dict(make=qwen3_5_dense_config, family="qwen3_5", seed=1001,
                          experts="none", mtp=True, shards=1),
    "qwen3_5_moe": dict(make=qwen3_5_moe_config, family="qwen3_5", seed=1002,
                        experts="fused", mtp=True, shards=2),
    "qwen3_next": dict(make=qwen3_next_config, family="qwen3_next", seed=1003,
                       experts="per_expert", mtp=True, shards=1),
    "qwen3": dict(make=qwen3_config, family="plain", seed=1004, experts="none", mtp=False,
                  shards=1),
    "llama": dict(make=llama_config, family="plain", seed=1005, experts="none", mtp=False,
                  shards=1),
    # Block-scaled FP8 (see the module docstring). Per-expert names: what the FP8 checkpoints
    # and transformers' save_pretrained write, and the layout its FP8 loader maps.
    "qwen3_5_moe_fp8": dict(make=qwen3_5_moe_fp8_config, family="qwen3_5", seed=1006,
                            experts="per_expert", mtp=False, shards=1,
                            fp8=dict(block=FP8_BLOCK, quantize_ba=False)),
    "qwen3_5_dense_fp8": dict(make=qwen3_5_dense_fp8_config, family="qwen3_5", seed=1007,
                              experts="none", mtp=False, shards=1,
                              fp8=dict(block=FP8_BLOCK, quantize_ba=True)),
}


def text_cfg(cfg):
    return cfg["text_config"] if "text_config" in cfg else cfg


# ----------------------------------------------------------------------------------------
# Weights
# ----------------------------------------------------------------------------------------

def init_weights(model, family, hidden, tied):
    """Random weights with larger scales than HF's default so logits are far from flat."""
    offset_norm = family in ("qwen3_5", "qwen3_next")
    if tied and offset_norm:
        raise ValueError("tied-embedding init below assumes a norm that multiplies by w")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".visual." in name or name.startswith("visual."):
                continue  # tiny vision tower keeps its (seeded) default init
            if name.endswith("A_log"):
                p.copy_(torch.empty_like(p).uniform_(0.05, 1.0).log())
            elif name.endswith("dt_bias"):
                p.uniform_(-1.0, 0.5)
            elif name.endswith("conv1d.weight"):
                p.normal_(0.0, 0.3)
            elif name.endswith("linear_attn.norm.weight"):
                # Gated RMSNorm multiplies by the weight itself (ones at init) in both families.
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif tied and name.endswith("model.norm.weight"):
                # Tied embeddings: a small embedding keeps the input token from dominating its
                # own next-token logit (greedy would repeat it); the final norm's gain restores
                # the logit spread. Plain family only (these are the tied models here).
                p.copy_(5.0 + 0.5 * torch.randn_like(p))
            elif p.dim() == 1 and "norm" in name:
                if offset_norm:
                    p.normal_(0.0, 0.1)  # used as (1 + w)
                else:
                    p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith("embed_tokens.weight"):
                p.normal_(0.0, 0.5 / math.sqrt(hidden) if tied else 0.5)
            elif name.endswith("lm_head.weight") or name.endswith("mlp.gate.weight"):
                p.normal_(0.0, 2.5 / math.sqrt(hidden))  # decisive logits / routing
            elif p.dim() >= 2:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[-1]))
            elif p.dim() == 1:
                p.normal_(0.0, 0.1)  # biases (none in these text models)


def to_shipped_layout(sd, spec, cfg):
    """Maps transformers' state_dict names/layouts to the shipped checkpoint layout."""
    t = text_cfg(cfg)
    out = {}
    notes = []
    for name, w in sd.items():
        if spec["experts"] == "per_expert" and name.endswith("mlp.experts.gate_up_proj"):
            base = name[: -len("gate_up_proj")]
            inter = w.shape[1] // 2
            for e in range(w.shape[0]):
                out[f"{base}{e}.gate_proj.weight"] = w[e, :inter]
                out[f"{base}{e}.up_proj.weight"] = w[e, inter:]
            notes.append("split fused experts.gate_up_proj into experts.{e}.gate_proj/up_proj")
        elif spec["experts"] == "per_expert" and name.endswith("mlp.experts.down_proj"):
            base = name[: -len("down_proj")]
            for e in range(w.shape[0]):
                out[f"{base}{e}.down_proj.weight"] = w[e]
            notes.append("split fused experts.down_proj into experts.{e}.down_proj")
        else:
            out[name] = w
    if spec["experts"] == "fused":
        # Shipped Qwen3.5 MoE keeps the main model's experts fused: [E, 2I, H] and [E, H, I].
        per_expert = [n for n in out if ".mlp.experts." in n and n.endswith("_proj.weight")]
        if per_expert:
            groups = {}
            for n in per_expert:
                base, rest = n.split(".mlp.experts.", 1)
                e, proj = rest.split(".", 1)
                groups.setdefault(base, {})[(int(e), proj)] = out.pop(n)
            for base, g in groups.items():
                ne = 1 + max(e for e, _ in g)
                out[f"{base}.mlp.experts.gate_up_proj"] = torch.stack(
                    [torch.cat([g[(e, "gate_proj.weight")], g[(e, "up_proj.weight")]], 0)
                     for e in range(ne)])
                out[f"{base}.mlp.experts.down_proj"] = torch.stack(
                    [g[(e, "down_proj.weight")] for e in range(ne)])
            notes.append("fused per-expert weights into experts.gate_up_proj/down_proj")
    if cfg["model_type"] == "qwen3_next":
        # Shipped Qwen3-Next: in_proj_qkvz / in_proj_ba grouped per key head. Only needed if
        # this transformers version keeps separate projections.
        hk, hv = t["linear_num_key_heads"], t["linear_num_value_heads"]
        dk, dv = t["linear_key_head_dim"], t["linear_value_head_dim"]
        r = hv // hk
        for name in [n for n in out if n.endswith("linear_attn.in_proj_qkv.weight")]:
            base = name[: -len("in_proj_qkv.weight")]
            qkv = out.pop(name)
            z = out.pop(base + "in_proj_z.weight")
            b = out.pop(base + "in_proj_b.weight")
            a = out.pop(base + "in_proj_a.weight")
            h = qkv.shape[1]
            q, k, v = qkv.split([hk * dk, hk * dk, hv * dv], 0)
            out[base + "in_proj_qkvz.weight"] = torch.cat(
                [q.view(hk, dk, h), k.view(hk, dk, h), v.view(hk, r * dv, h),
                 z.view(hk, r * dv, h)], 1).reshape(-1, h)
            out[base + "in_proj_ba.weight"] = torch.cat(
                [b.view(hk, r, h), a.view(hk, r, h)], 1).reshape(-1, h)
            notes.append("merged in_proj_qkv/z/b/a into in_proj_qkvz/in_proj_ba")
    return out, sorted(set(notes))


def fake_mtp_tensors(cfg, gen):
    """A few mtp.* tensors in the shipped names/shapes; transformers ignores them."""
    t = text_cfg(cfg)
    h = t["hidden_size"]

    def rnd(*shape):
        return (torch.randn(*shape, generator=gen) * 0.1).contiguous()

    out = {
        "mtp.fc.weight": rnd(h, 2 * h),
        "mtp.pre_fc_norm_embedding.weight": rnd(h),
        "mtp.pre_fc_norm_hidden.weight": rnd(h),
        "mtp.norm.weight": rnd(h),
        "mtp.layers.0.input_layernorm.weight": rnd(h),
    }
    if t.get("num_experts"):
        i, e = t["moe_intermediate_size"], t["num_experts"]
        # The shipped Qwen3.5 MoE checkpoints keep the MTP layer's experts per expert.
        out["mtp.layers.0.mlp.gate.weight"] = rnd(e, h)
        out["mtp.layers.0.mlp.experts.0.gate_proj.weight"] = rnd(i, h)
        out["mtp.layers.0.mlp.experts.0.up_proj.weight"] = rnd(i, h)
        out["mtp.layers.0.mlp.experts.0.down_proj.weight"] = rnd(h, i)
    else:
        i = t["intermediate_size"]
        out["mtp.layers.0.mlp.gate_proj.weight"] = rnd(i, h)
    return out


def write_checkpoint(mdir, tensors, shards):
    names = sorted(tensors)
    meta = {"format": "pt"}
    if shards == 1:
        save_file({n: tensors[n] for n in names}, os.path.join(mdir, "model.safetensors"),
                  metadata=meta)
        return ["model.safetensors"]
    # Two shards + index, mtp.* in the last shard (as in the shipped files).
    main = [n for n in names if not n.startswith("mtp.")]
    half = len(main) // 2
    parts = [main[:half], main[half:] + [n for n in names if n.startswith("mtp.")]]
    files = [f"model-{i + 1:05d}-of-{len(parts):05d}.safetensors" for i in range(len(parts))]
    weight_map = {}
    for fname, part in zip(files, parts):
        save_file({n: tensors[n] for n in part}, os.path.join(mdir, fname), metadata=meta)
        for n in part:
            weight_map[n] = fname
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    with open(os.path.join(mdir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2,
                  sort_keys=True)
        f.write("\n")
    return files + ["model.safetensors.index.json"]


def read_safetensors_dir(d):
    out = {}
    for fn in sorted(os.listdir(d)):
        if fn.endswith(".safetensors"):
            with safe_open(os.path.join(d, fn), framework="pt") as f:
                for k in f.keys():
                    out[k] = tuple(f.get_slice(k).get_shape())
    return out


# ----------------------------------------------------------------------------------------
# References
# ----------------------------------------------------------------------------------------

class RouterGapMonitor:
    """Smallest gap between the k-th and (k+1)-th routing probability seen (ties flip experts)."""

    def __init__(self, model, top_k):
        self.min_gap = float("inf")
        self.handles = []
        self.top_k = top_k
        for name, mod in model.named_modules():
            if name.endswith("mlp.gate") and hasattr(mod, "weight") and not name.startswith("mtp"):
                self.handles.append(mod.register_forward_pre_hook(self._hook))

    def _hook(self, mod, args):
        x = args[0]
        logits = F.linear(x.reshape(-1, x.shape[-1]).float(), mod.weight.float())
        probs = logits.softmax(-1)
        top = probs.topk(self.top_k + 1, dim=-1).values
        self.min_gap = min(self.min_gap, float((top[:, -2] - top[:, -1]).min()))

    def close(self):
        for h in self.handles:
            h.remove()


def rel_l2(a, b):
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


@torch.inference_mode()
def greedy_cached(model, ids, steps):
    """Manual greedy loop through the model's own KV / recurrent cache; returns tokens and
    the logits each step's token was chosen from."""
    out = model(input_ids=ids, use_cache=True)
    past = out.past_key_values
    logits = out.logits[0, -1].float()
    toks, step_logits = [], []
    for _ in range(steps):
        tok = int(logits.argmax())
        toks.append(tok)
        step_logits.append(logits.clone())
        out = model(input_ids=torch.tensor([[tok]]), past_key_values=past, use_cache=True)
        past = out.past_key_values
        logits = out.logits[0, -1].float()
    return torch.tensor(toks, dtype=torch.int64), torch.stack(step_logits)


@torch.inference_mode()
def generate_crosscheck(model, ids, toks, step_logits):
    """Same prompt through model.generate (greedy); returns a one-line verdict."""
    try:
        model.generation_config.eos_token_id = None
        gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                             max_new_tokens=len(toks), do_sample=False, num_beams=1,
                             pad_token_id=0, output_logits=True, return_dict_in_generate=True)
        g = gen.sequences[0, ids.shape[1]:]
        n = min(len(g), len(toks))
        same = bool(torch.equal(g[:n].cpu(), toks[:n]))
        glog = torch.stack([x[0].float() for x in gen.logits[:n]])
        err = max(rel_l2(glog[i], step_logits[i]) for i in range(n)) if n else float("nan")
        return f"generate: {n} steps, tokens {'match' if same else 'DIFFER'}, " \
               f"max rel L2 vs manual {err:.2e}"
    except Exception as exc:  # cross-check only
        return f"generate cross-check failed: {type(exc).__name__}: {exc}"
    finally:
        # Qwen3.5 VLM generate() caches M-RoPE deltas on the model; later calls must not see them.
        inner = getattr(model, "model", None)
        if inner is not None and getattr(inner, "rope_deltas", None) is not None:
            inner.rope_deltas = None


def describe_paths(model):
    lines = []
    try:
        from transformers.utils import import_utils as iu
        for fn in ("is_flash_linear_attention_available", "is_causal_conv1d_available",
                   "is_kernels_available"):
            if hasattr(iu, fn):
                lines.append(f"{fn}={getattr(iu, fn)()}")
    except Exception as exc:
        lines.append(f"import_utils probe failed: {exc}")
    for name, mod in model.named_modules():
        if name.endswith("linear_attn"):
            bits = [type(mod).__name__, f"norm={type(mod.norm).__name__}"]
            for attr in ("causal_conv1d_fn", "causal_conv1d_update", "chunk_gated_delta_rule",
                         "recurrent_gated_delta_rule"):
                if hasattr(mod, attr):
                    fn = getattr(mod, attr)
                    bits.append(f"{attr}={getattr(fn, '__module__', '?')}."
                                f"{getattr(fn, '__name__', fn)}")
            lines.append("GDN module: " + ", ".join(bits))
            break
    mod_name = type(model).__module__
    m = sys.modules.get(mod_name)
    if m is not None:
        for fn in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule",
                   "causal_conv1d_fn", "causal_conv1d_update", "chunk_gated_delta_rule",
                   "fused_recurrent_gated_delta_rule"):
            if hasattr(m, fn):
                f = getattr(m, fn)
                lines.append(f"{mod_name}.{fn} -> {getattr(f, '__module__', '?')}."
                             f"{getattr(f, '__qualname__', repr(f))}")
    return lines


def expected_rotary_dim(t):
    rp = t.get("rope_parameters") or {}
    prf = rp.get("partial_rotary_factor", t.get("partial_rotary_factor", 1.0))
    hd = t.get("head_dim") or t["hidden_size"] // t["num_attention_heads"]
    return int(hd * prf)


def find_rotary(model):
    for name, mod in model.named_modules():
        if name.endswith("rotary_emb") and "visual" not in name and hasattr(mod, "inv_freq"):
            return mod
    return None


def load_model(cls, mdir):
    kwargs = dict(attn_implementation="eager", output_loading_info=True)
    try:
        return cls.from_pretrained(mdir, dtype=torch.float32, **kwargs)
    except TypeError:
        return cls.from_pretrained(mdir, torch_dtype=torch.float32, **kwargs)


def build_model(name, spec, out_root):
    cfg = spec["make"]()
    t = text_cfg(cfg)
    arch = cfg["architectures"][0]
    cls = getattr(transformers, arch)
    mdir = os.path.join(out_root, name)
    shutil.rmtree(mdir, ignore_errors=True)
    os.makedirs(mdir)
    cfg.setdefault("transformers_version", transformers.__version__)
    with open(os.path.join(mdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    gen_cfg = {"do_sample": False, "eos_token_id": t["eos_token_id"],
               "transformers_version": transformers.__version__}
    if "bos_token_id" in t:
        gen_cfg["bos_token_id"] = t["bos_token_id"]
    with open(os.path.join(mdir, "generation_config.json"), "w") as f:
        json.dump(gen_cfg, f, indent=2)
        f.write("\n")

    try:
        config = transformers.AutoConfig.from_pretrained(mdir)
    except Exception as exc:
        print(f"[{name}] AutoConfig failed ({exc}); using {cls.__name__}.config_class")
        config = cls.config_class.from_pretrained(mdir)
    print(f"[{name}] config class {type(config).__name__}, model class {cls.__name__}")
    for attr in ("_checkpoint_conversion_mapping", "_keys_to_ignore_on_load_unexpected",
                 "_tied_weights_keys"):
        print(f"[{name}] {cls.__name__}.{attr} = {getattr(cls, attr, None)!r}")
    try:
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping
        mts = {cfg["model_type"], t.get("model_type", cfg["model_type"])}
        for mt in sorted(mts):
            conv = get_checkpoint_conversion_mapping(mt)
            print(f"[{name}] conversion mapping for {mt}: {conv!r}")
    except Exception as exc:
        print(f"[{name}] conversion mapping probe failed: {exc}")

    torch.manual_seed(spec["seed"])
    try:
        model = cls._from_config(config, attn_implementation="eager")
    except Exception as exc:
        print(f"[{name}] _from_config failed ({exc}); using cls(config)")
        model = cls(config)
    model = model.float().eval()
    in_emb = model.get_input_embeddings().weight
    out_emb = model.get_output_embeddings().weight
    tied = in_emb.data_ptr() == out_emb.data_ptr()
    print(f"[{name}] tied embeddings: {tied} (config says {cfg.get('tie_word_embeddings')})")
    init_weights(model, spec["family"], t["hidden_size"], tied)

    sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    if tied:
        sd = {k: v for k, v in sd.items() if not k.endswith("lm_head.weight")}
    shipped, notes = to_shipped_layout(sd, spec, cfg)
    for n in notes:
        print(f"[{name}] layout: {n}")
    if spec["mtp"]:
        g = torch.Generator().manual_seed(spec["seed"] + 7)
        mtp = fake_mtp_tensors(cfg, g)
        shipped.update(mtp)
        print(f"[{name}] added {len(mtp)} fake mtp.* tensors: {sorted(mtp)}")
    shipped = {k: v.to(torch.float32).contiguous() for k, v in shipped.items()}
    files = write_checkpoint(mdir, shipped, spec["shards"])
    n_model = sum(p.numel() for p in model.parameters())
    n_file = sum(v.numel() for v in shipped.values())
    print(f"[{name}] params: model {n_model}, in files {n_file} ({len(shipped)} tensors); "
          f"files {files}")
    layer0 = sorted(k for k in shipped if ".layers.0." in k and not k.startswith("mtp"))
    other = sorted(k for k in shipped if ".layers." not in k)
    for k in other + layer0:
        print(f"[{name}]   {k} {list(shipped[k].shape)}")
    for li, lt in enumerate(getattr(config.get_text_config(), "layer_types", []) or []):
        if lt != getattr(config.get_text_config(), "layer_types")[0]:
            for k in sorted(x for x in shipped if f".layers.{li}." in x and "mtp" not in x):
                print(f"[{name}]   {k} {list(shipped[k].shape)}")
            break

    # What save_pretrained itself would write (informational: names the shipped layout vs
    # transformers' own).
    try:
        with tempfile.TemporaryDirectory() as tmp:
            model.save_pretrained(tmp, safe_serialization=True)
            saved = read_safetensors_dir(tmp)
        mine = {k: tuple(v.shape) for k, v in shipped.items()}
        only_saved = sorted(set(saved) - set(mine))
        only_mine = sorted(set(mine) - set(saved))
        shape_diff = sorted(k for k in set(saved) & set(mine) if saved[k] != mine[k])
        print(f"[{name}] save_pretrained writes {len(saved)} tensors; only in save_pretrained: "
              f"{len(only_saved)} {only_saved[:6]}; only in shipped layout: {len(only_mine)} "
              f"{only_mine[:6]}; shape differences: {shape_diff[:6]}")
    except Exception as exc:
        print(f"[{name}] save_pretrained probe failed: {type(exc).__name__}: {exc}")

    # Load the written checkpoint back and demand identical parameters.
    reloaded, info = load_model(cls, mdir)
    reloaded = reloaded.float().eval()
    print(f"[{name}] reload: missing={info.get('missing_keys')} "
          f"unexpected={sorted(info.get('unexpected_keys') or [])[:8]} "
          f"mismatched={info.get('mismatched_keys')}")
    ref_sd = model.state_dict()
    worst, bad = 0.0, []
    for k, v in reloaded.state_dict().items():
        if k not in ref_sd:
            bad.append(f"{k} (not in original)")
            continue
        if tuple(v.shape) != tuple(ref_sd[k].shape):
            bad.append(f"{k} shape {tuple(v.shape)} vs {tuple(ref_sd[k].shape)}")
            continue
        d = float((v.float() - ref_sd[k].float()).abs().max()) if v.numel() else 0.0
        worst = max(worst, d)
        if d != 0.0:
            bad.append(f"{k} max abs diff {d:.3e}")
    if bad or info.get("missing_keys"):
        raise RuntimeError(f"reloaded checkpoint differs from the model: {bad[:10]}, "
                           f"missing {info.get('missing_keys')}")
    print(f"[{name}] reload check: all {len(ref_sd)} state_dict entries identical")
    del model
    return cfg, reloaded, mdir


# ----------------------------------------------------------------------------------------
# Block-scaled FP8
# ----------------------------------------------------------------------------------------

FP8_LINEAR_SUFFIXES = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
                       "in_proj_qkv.weight", "in_proj_z.weight", "in_proj_qkvz.weight",
                       "out_proj.weight", "gate_proj.weight", "up_proj.weight",
                       "down_proj.weight", "experts.gate_up_proj", "experts.down_proj")
FP8_BA_SUFFIXES = ("in_proj_b.weight", "in_proj_a.weight", "in_proj_ba.weight")


def fp8_quantized(name, tensor, fp8):
    """The tensors Qwen's FP8 checkpoints quantize: attention, GDN projections (in_proj_b /
    in_proj_a only with quantize_ba), MLP, shared expert and expert weights. Not the
    embeddings, lm_head, norms, router (mlp.gate), shared_expert_gate, conv1d, vision, mtp."""
    if tensor.dim() < 2 or name.startswith("mtp.") or ".visual." in name:
        return False
    suffixes = FP8_LINEAR_SUFFIXES + (FP8_BA_SUFFIXES if fp8["quantize_ba"] else ())
    return name.endswith(suffixes)


def fp8_quantize_blocks(w, block):
    """vLLM's per_block_cast_to_fp8 (vllm/utils/deep_gemm.py, used by its online block FP8),
    also for [E, N, K] stacks: per block of block[0] rows x block[1] columns, amax in float32
    clamped to 1e-4, scale_inv = amax / 448, q = e4m3(x * (1 / scale_inv)), round to nearest
    even. Partial edge blocks are the blocks of the elements they hold (zero padding)."""
    bn, bk = block
    *lead, n, k = w.shape
    nb, kb = -(-n // bn), -(-k // bk)
    padded = torch.zeros(*lead, nb * bn, kb * bk, dtype=torch.float32)
    padded[..., :n, :k] = w.float()
    view = padded.view(*lead, nb, bn, kb, bk)
    amax = view.abs().amax(dim=(-3, -1), keepdim=True).clamp(min=1e-4)
    scale_inv = amax / 448.0
    q = (view * (1.0 / scale_inv)).to(torch.float8_e4m3fn)
    q = q.view(*lead, nb * bn, kb * bk)[..., :n, :k].contiguous()
    return q, scale_inv.view(*lead, nb, kb).contiguous()


def fp8_dequantize_blocks(q, scale_inv, block):
    """The definition the engine implements: w[n][k] = fp8(q[n][k]) * scale_inv[n//bn][k//bk],
    the product rounded once in float32."""
    bn, bk = block
    n, k = q.shape[-2:]
    s = scale_inv.float().repeat_interleave(bn, dim=-2)[..., :n, :]
    s = s.repeat_interleave(bk, dim=-1)[..., :k]
    return (q.float() * s).contiguous()


def fp8_modules_to_not_convert(model, quantized_names):
    """Like the shipped file's list: every module holding a 2-D+ `weight` that stays
    unquantized (embeddings, lm_head, conv1d, routers, gates, the vision tower, ...)."""
    out = []
    for mname, mod in model.named_modules():
        w = getattr(mod, "weight", None)
        if isinstance(w, torch.nn.Parameter) and w.dim() >= 2 and \
                f"{mname}.weight" not in quantized_names:
            out.append(mname)
    return sorted(out)


def params_equal(a, b):
    """(bit-identical, max relative difference, first differing names) of two state_dicts."""
    worst, bad = 0.0, []
    for k, v in a.items():
        if k not in b or tuple(b[k].shape) != tuple(v.shape):
            bad.append(f"{k} (missing or shape)")
            continue
        d = (v.float() - b[k].float()).abs()
        if v.numel() and float(d.max()) > 0:
            rel = float(d.max() / b[k].float().abs().max().clamp_min(1e-30))
            worst = max(worst, rel)
            bad.append(f"{k} max rel diff {rel:.2e}")
    return not bad, worst, bad[:8]


def load_fp8_model(cls, mdir, block):
    """transformers' own loading of the FP8 checkpoint, asking it to dequantize (to the
    float32 parameters) where its FineGrainedFP8Config takes that option."""
    kwargs = dict(attn_implementation="eager", output_loading_info=True)
    try:
        from transformers import FineGrainedFP8Config
        kwargs["quantization_config"] = FineGrainedFP8Config(weight_block_size=tuple(block),
                                                             dequantize=True)
    except Exception as exc:  # older transformers: the checkpoint's config alone
        print(f"FineGrainedFP8Config(dequantize=True) unavailable ({exc}); loading as is")
    try:
        return cls.from_pretrained(mdir, dtype=torch.float32, **kwargs)
    except TypeError:
        return cls.from_pretrained(mdir, torch_dtype=torch.float32, **kwargs)


def build_fp8_model(name, spec, out_root, fp8_reference):
    """Writes the FP8 checkpoint of spec's model to <out_root>/<name> and returns (cfg,
    reference model, folder, notes for reference_info.json); see the module docstring."""
    fp8 = spec["fp8"]
    block = list(fp8["block"])
    cfg = spec["make"]()
    t = text_cfg(cfg)
    cls = getattr(transformers, cfg["architectures"][0])
    mdir = os.path.join(out_root, name)
    shutil.rmtree(mdir, ignore_errors=True)
    os.makedirs(mdir)
    cfg.setdefault("transformers_version", transformers.__version__)
    gen_cfg = {"do_sample": False, "eos_token_id": t["eos_token_id"],
               "transformers_version": transformers.__version__}
    if "bos_token_id" in t:
        gen_cfg["bos_token_id"] = t["bos_token_id"]

    def write_configs(d, config_dict):
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config_dict, f, indent=2)
            f.write("\n")
        with open(os.path.join(d, "generation_config.json"), "w") as f:
            json.dump(gen_cfg, f, indent=2)
            f.write("\n")

    write_configs(mdir, cfg)  # without quantization_config until the model lists its modules
    config = transformers.AutoConfig.from_pretrained(mdir)
    torch.manual_seed(spec["seed"])
    model = cls._from_config(config, attn_implementation="eager").float().eval()
    tied = model.get_input_embeddings().weight.data_ptr() == \
        model.get_output_embeddings().weight.data_ptr()
    if tied:
        raise RuntimeError("the FP8 goldens assume untied embeddings")
    init_weights(model, spec["family"], t["hidden_size"], tied)
    with torch.no_grad():  # the values a bfloat16 checkpoint holds
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())

    sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    shipped, notes = to_shipped_layout(sd, spec, cfg)
    for n in notes:
        print(f"[{name}] layout: {n}")
    fp8_tensors, twin, quantized = {}, {}, []
    for tname, w in shipped.items():
        if fp8_quantized(tname, w, fp8):
            q, scale_inv = fp8_quantize_blocks(w, block)
            fp8_tensors[tname] = q
            fp8_tensors[tname + "_scale_inv"] = scale_inv
            twin[tname] = fp8_dequantize_blocks(q, scale_inv, block)
            quantized.append(tname)
        else:
            fp8_tensors[tname] = w.to(torch.bfloat16).contiguous()  # exact: bf16 values
            twin[tname] = w.float().contiguous()
    n_blocks = sum(int(fp8_tensors[n + "_scale_inv"].numel()) for n in quantized)
    print(f"[{name}] FP8: {len(quantized)} quantized tensors in {block[0]}x{block[1]} blocks "
          f"({n_blocks} scales), {len(shipped) - len(quantized)} bfloat16 tensors")
    for tname in sorted(quantized)[:6]:
        print(f"[{name}]   {tname} {list(fp8_tensors[tname].shape)} scales "
              f"{list(fp8_tensors[tname + '_scale_inv'].shape)}")

    qcfg = {"activation_scheme": "dynamic",
            "modules_to_not_convert": fp8_modules_to_not_convert(model, set(quantized)),
            "quant_method": "fp8",
            "weight_block_size": block}
    fp8_cfg = dict(cfg)
    fp8_cfg["quantization_config"] = qcfg
    write_configs(mdir, fp8_cfg)
    files = write_checkpoint(mdir, fp8_tensors, spec["shards"])
    print(f"[{name}] wrote {files}; modules_to_not_convert {qcfg['modules_to_not_convert'][:8]}"
          f"... ({len(qcfg['modules_to_not_convert'])})")
    del model

    # The reference: transformers on the dequantized twin, from a float32 copy.
    info = {"fp8_weight_block_size": block, "fp8_quantized_tensors": len(quantized),
            "fp8_quantizer": "vLLM per_block_cast_to_fp8 (amax clamp 1e-4, amax / 448, RNE)"}
    with tempfile.TemporaryDirectory() as tmp:
        write_configs(tmp, cfg)
        write_checkpoint(tmp, twin, 1)
        reference, load_info = load_model(cls, tmp)
    reference = reference.float().eval()
    if load_info.get("missing_keys") or load_info.get("mismatched_keys"):
        raise RuntimeError(f"twin reload: missing {load_info.get('missing_keys')}, mismatched "
                           f"{load_info.get('mismatched_keys')}")
    twin_sd = reference.state_dict()
    info["reference"] = "float32 dequantized twin"

    if fp8_reference == "twin":
        info["transformers_fp8_load"] = "skipped (--fp8-reference twin)"
        return cfg, reference, mdir, info
    try:
        loaded, fp8_info = load_fp8_model(cls, mdir, block)
    except Exception as exc:  # no FP8 support in this transformers, or not on this machine
        info["transformers_fp8_load"] = f"failed: {type(exc).__name__}: {exc}"[:400]
        print(f"[{name}] transformers' FP8 loader failed ({type(exc).__name__}: {exc}); the "
              f"reference is the dequantized twin")
        return cfg, reference, mdir, info
    kept = sorted({str(p.dtype) for p in loaded.parameters()} - {"torch.float32"})
    if kept:
        info["transformers_fp8_load"] = f"kept {kept} parameters (did not dequantize)"
        print(f"[{name}] transformers' FP8 loader {info['transformers_fp8_load']}; the reference "
              f"is the dequantized twin")
        return cfg, reference, mdir, info
    loaded = loaded.eval()
    quantizer = getattr(loaded, "hf_quantizer", None)
    print(f"[{name}] transformers FP8 load: quantizer {type(quantizer).__name__}, dequantize="
          f"{getattr(getattr(quantizer, 'quantization_config', None), 'dequantize', None)}, "
          f"missing={fp8_info.get('missing_keys')} unexpected="
          f"{sorted(fp8_info.get('unexpected_keys') or [])[:8]}")
    same, worst, bad = params_equal(twin_sd, loaded.state_dict())
    if same and not fp8_info.get("missing_keys"):
        info["transformers_fp8_load"] = "parameters bit-identical to the twin"
        info["reference"] = "transformers FP8 loading (bit-identical to the dequantized twin)"
        print(f"[{name}] transformers' FP8 loading gives the twin's parameters bit for bit")
        del reference
        return cfg, loaded, mdir, info
    if not fp8_info.get("missing_keys") and worst <= 2.0 ** -8:
        # Dequantized through bfloat16: not exact to the block definition; keep the twin.
        info["transformers_fp8_load"] = (f"dequantizes through bfloat16 (max rel diff "
                                         f"{worst:.2e}); the twin is the reference")
        print(f"[{name}] {info['transformers_fp8_load']}")
        return cfg, reference, mdir, info
    raise RuntimeError(f"transformers' FP8 loading of {mdir} disagrees with the dequantized twin "
                       f"(missing {fp8_info.get('missing_keys')}; {bad}): the checkpoint layout "
                       f"or the scale definition is wrong")


def make_references(name, spec, cfg, model, mdir, extra_info=None):
    t = text_cfg(cfg)
    for line in describe_paths(model):
        print(f"[{name}] path: {line}")
    rot = find_rotary(model)
    if rot is not None:
        got = 2 * rot.inv_freq.numel()
        want = expected_rotary_dim(t)
        print(f"[{name}] rotary dim {got} (expected {want}), attention_scaling "
              f"{getattr(rot, 'attention_scaling', None)}, inv_freq {rot.inv_freq.tolist()}")
        if got != want:
            raise RuntimeError(f"rotary dim {got} != expected {want}")
    print(f"[{name}] attn implementation: {getattr(model.config, '_attn_implementation', None)}")

    vocab = t["vocab_size"]
    prompt_lengths = FP8_PROMPT_LENGTHS if "fp8" in spec else PROMPT_LENGTHS
    num_greedy = FP8_NUM_GREEDY if "fp8" in spec else NUM_GREEDY
    gen = torch.Generator().manual_seed(spec["seed"] + 99)
    monitor = RouterGapMonitor(model, t.get("num_experts_per_tok", 0)) \
        if t.get("num_experts") else None
    tensors = {}
    margins_all = []
    info = {"model": name, "architecture": cfg["architectures"][0],
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__, "safetensors_version": safetensors.__version__,
            "blocked_optional_kernels": BLOCKED_MODULES, "prompts": []}
    info.update(extra_info or {})
    for i, plen in enumerate(prompt_lengths):
        # Ids below vocab - 8 keep clear of the special ids placed at the top of the vocab.
        ids = torch.randint(0, vocab - 8, (1, plen), generator=gen, dtype=torch.int64)
        with torch.inference_mode():
            logits = model(input_ids=ids, use_cache=False).logits[0].float().contiguous()
        toks, step_logits = greedy_cached(model, ids, num_greedy)
        lp = step_logits.log_softmax(-1)
        top2 = lp.topk(2, dim=-1).values
        margins = (top2[:, 0] - top2[:, 1]).contiguous()
        # Consistency: cached decode vs. one uncached forward over prompt + generated tokens.
        full_ids = torch.cat([ids[0], toks[:-1]]).unsqueeze(0)
        with torch.inference_mode():
            full = model(input_ids=full_ids, use_cache=False).logits[0, plen - 1:].float()
        cache_err = max(rel_l2(step_logits[j], full[j]) for j in range(num_greedy))
        prefill_err = rel_l2(logits[-1], step_logits[0])
        verdict = generate_crosscheck(model, ids, toks, step_logits)
        tensors[f"prompt.{i}.token_ids"] = ids[0].clone()
        tensors[f"prompt.{i}.logits"] = logits
        tensors[f"prompt.{i}.greedy_token_ids"] = toks
        tensors[f"prompt.{i}.greedy_margins"] = margins.float()
        tensors[f"prompt.{i}.greedy_logits"] = step_logits.contiguous()
        margins_all.append(margins)
        low = int((margins < MARGIN_THRESHOLD).sum())
        first_low = int((margins < MARGIN_THRESHOLD).nonzero()[0]) if low else -1
        print(f"[{name}] prompt {i}: len {plen}, logits std {float(logits.std()):.3f}, "
              f"greedy {toks.tolist()}")
        print(f"[{name}]   margins min {float(margins.min()):.4g} median "
              f"{float(margins.median()):.4g}, <{MARGIN_THRESHOLD}: {low} (first at {first_low});"
              f" cached-vs-full max rel L2 {cache_err:.2e}; prefill-vs-cached last row "
              f"{prefill_err:.2e}; {verdict}")
        info["prompts"].append({"length": plen, "margin_min": float(margins.min()),
                                "margin_median": float(margins.median()),
                                "steps_below_threshold": low, "first_step_below": first_low,
                                "cached_vs_full_max_rel_l2": cache_err,
                                "generate_crosscheck": verdict})
    m = torch.cat(margins_all)
    frac = float((m < MARGIN_THRESHOLD).float().mean())
    print(f"[{name}] ALL: margin min {float(m.min()):.4g}, median {float(m.median()):.4g}, "
          f"fraction < {MARGIN_THRESHOLD}: {frac:.4f}")
    info.update(margin_min=float(m.min()), margin_median=float(m.median()),
                fraction_below_threshold=frac)
    if monitor is not None:
        print(f"[{name}] smallest router gap between top-k and next expert prob: "
              f"{monitor.min_gap:.3e}")
        info["min_router_gap"] = monitor.min_gap
        monitor.close()
    info["paths"] = describe_paths(model)
    save_file(tensors, os.path.join(mdir, "reference.safetensors"),
              metadata={"format": "pt", "transformers_version": transformers.__version__,
                        "torch_version": torch.__version__})
    with open(os.path.join(mdir, "reference_info.json"), "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")


def dir_size(d):
    total = 0
    for root, _, files in os.walk(d):
        for fn in files:
            total += os.path.getsize(os.path.join(root, fn))
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/golden")
    ap.add_argument("--models", default=",".join(MODELS),
                    help="comma-separated subset of: " + ", ".join(MODELS))
    ap.add_argument("--fp8-reference", choices=("auto", "twin"), default="auto",
                    help="FP8 models: auto checks transformers' own FP8 loading against the "
                         "dequantized twin (and uses it when bit-identical); twin skips that")
    args = ap.parse_args()

    torch.set_default_dtype(torch.float32)
    torch.use_deterministic_algorithms(True, warn_only=True)
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, transformers "
          f"{transformers.__version__}, safetensors {safetensors.__version__}; blocked optional "
          f"kernels: {BLOCKED_MODULES or 'none installed'}; threads {torch.get_num_threads()}")
    os.makedirs(args.out, exist_ok=True)
    failed = []
    for name in [m for m in args.models.split(",") if m]:
        spec = MODELS[name]
        print(f"\n===== {name} =====")
        try:
            if "fp8" in spec:
                cfg, model, mdir, extra = build_fp8_model(name, spec, args.out,
                                                          args.fp8_reference)
                make_references(name, spec, cfg, model, mdir, extra)
            else:
                cfg, model, mdir = build_model(name, spec, args.out)
                make_references(name, spec, cfg, model, mdir)
            print(f"[{name}] OK, {dir_size(mdir)} bytes")
        except Exception:
            traceback.print_exc()
            print(f"[{name}] FAILED")
            failed.append(name)
    total = dir_size(args.out)
    print(f"\ntotal size of {args.out}: {total} bytes ({total / 2**20:.2f} MiB)"
          f"{'  OVER THE 10 MB LIMIT' if total > SIZE_LIMIT else ''}")
    if total > SIZE_LIMIT:
        failed.append("size")
    print(f"failed: {failed or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
