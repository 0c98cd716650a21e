"""How far transformers itself lands from the f32 references in BF16.

For each golden checkpoint in tests/golden/ this loads the model with transformers in
bfloat16 on a CUDA device (eager attention, the torch fallbacks of the Gated DeltaNet
layers), runs every reference prompt as one prefill and prints the worst relative L2 error
of its logits against the stored float32 reference, then decodes greedily and reports the
first step whose token differs from the reference's greedy token although the reference's
top-2 log-prob margin there is at least 0.05 (the margin rule). It is the error floor of
BF16 inference on these small random-weight models: the CUDA backend's BF16 tests are held
to the same rules, so it tells whether a bound is reachable at all.

    python3 scripts/bf16_error_floor.py [tests/golden] [model ...]
"""
import json
import os
import sys

import torch
import transformers
from safetensors.torch import load_file


def rel_l2(a, b):
    return (torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b)).item()


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "tests/golden"
    names = sys.argv[2:] or ["llama", "qwen3", "qwen3_5_dense", "qwen3_5_moe", "qwen3_next"]
    for name in names:
        mdir = os.path.join(root, name)
        with open(os.path.join(mdir, "config.json")) as f:
            arch = json.load(f)["architectures"][0]
        ref = load_file(os.path.join(mdir, "reference.safetensors"))
        row = [name]
        for dtype in (torch.float32, torch.bfloat16):
            try:
                row.append(evaluate(arch, mdir, ref, dtype, "cuda"))
            except RuntimeError:
                # transformers' grouped expert GEMM refuses some small shapes on CUDA (16-byte
                # strides): the same model on the CPU then.
                try:
                    row.append(evaluate(arch, mdir, ref, dtype, "cpu"))
                except RuntimeError as exc:
                    row.append(f"{str(dtype).replace('torch.', '')}: transformers failed ({exc})")
        print(" | ".join(row), flush=True)


def evaluate(arch, mdir, ref, dtype, device):
    model = getattr(transformers, arch).from_pretrained(
        mdir, dtype=dtype, attn_implementation="eager").eval().to(device)
    errors = []
    flips = []
    p = 0
    while f"prompt.{p}.token_ids" in ref:
        ids = ref[f"prompt.{p}.token_ids"].to(device).unsqueeze(0)
        with torch.no_grad():
            logits = model(ids).logits[0].float().cpu()
        want = ref[f"prompt.{p}.logits"]
        for i in range(want.shape[0]):
            errors.append(rel_l2(logits[i], want[i]))
        ref_tokens = ref[f"prompt.{p}.greedy_token_ids"].tolist()
        margins = ref[f"prompt.{p}.greedy_margins"].tolist()
        seq = ids
        for step, (want_token, margin) in enumerate(zip(ref_tokens, margins)):
            if margin < 0.05:
                break
            with torch.no_grad():
                got = int(model(seq).logits[0, -1].float().argmax())
            if got != want_token:
                flips.append(f"prompt {p} step {step} (margin {margin:.3f})")
                break
            seq = torch.cat([seq, torch.tensor([[got]], device=device)], dim=1)
        p += 1
    errors.sort()
    median = errors[len(errors) // 2]
    p90 = errors[(len(errors) * 9) // 10]
    return (f"{str(dtype).replace('torch.', '')} ({device}) prefill rel L2 over "
            f"{len(errors)} positions: median {median:.2e}, p90 {p90:.2e}, worst {errors[-1]:.2e}; "
            f"greedy flips past the margin: {', '.join(flips) if flips else 'none'}")


if __name__ == "__main__":
    main()
