#!/usr/bin/env python3
"""Trains the demo model shipped in models/qwen35-moe-demo, and its transformers reference.

Why: a newcomer's first command should make the engine write something that looks like
language. This script trains, from nothing, a byte-level BPE tokenizer and a small model of
the Qwen3.5 MoE hybrid architecture (Gated DeltaNet + gated attention, 3:1; MoE with a
shared expert) on the Python source installed with the Python that runs it: the standard
library (PSF licence) and the installed packages named by --packages (by default five
permissively licensed ones; each package's licence is read from its metadata, and the
licences of the code those packages vendor are listed in VENDORED_CODE). It saves the
model in the Hugging Face layout our loader reads, proves transformers loads it, and
records what transformers computes for 10 prompts so tests/unit/test_demo_model.cpp can
hold our engine to it.

Needs one CUDA GPU and Python with torch, tokenizers, transformers, safetensors and
matplotlib, plus the packages named by --packages; nothing needs the network. About 9
minutes on one H200 with the defaults, which are the shipped model's settings:
    PYTHONUNBUFFERED=1 python3 scripts/train_demo_model.py OUT_DIR
writes, under OUT_DIR, repo-relative paths:
    models/qwen35-moe-demo/   config.json, generation_config.json, model.safetensors (bf16),
                              tokenizer.json, tokenizer_config.json (ChatML template),
                              README.md (model card), loss_curve.png, data_manifest.tsv,
                              training_log.json
    tests/golden/demo_model/  reference.json, reference.safetensors
Everything is seeded. Training uses the GPU (bf16 autocast); GPU kernels such as index_add_
are not bit-deterministic, so a rerun gives the same figures to about 1e-3, not bit for bit.
The reference is computed on the CPU in float32 from the saved bf16 weights (eager
attention, transformers' torch fallbacks for the Gated DeltaNet), as scripts/make_golden.py
does.
"""

import argparse
import ast
import collections
import hashlib
import importlib.util
import json
import math
import os
import platform
import random
import shutil
import sys
import sysconfig
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# Optional fast kernels would replace transformers' pure-torch paths; hide them if present
# so training and the reference use the same (torch) Gated DeltaNet code.
BLOCKED_MODULES = []
for _name in ("fla", "causal_conv1d", "kernels"):
    try:
        _found = importlib.util.find_spec(_name) is not None
    except (ImportError, ValueError):
        _found = False
    if _found:
        sys.modules[_name] = None
        BLOCKED_MODULES.append(_name)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import safetensors  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
import tokenizers  # noqa: E402
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers  # noqa: E402
from tokenizers import pre_tokenizers, processors, trainers  # noqa: E402
import transformers  # noqa: E402

MODEL_NAME = "qwen35-moe-demo"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 8192  # BPE merges fill VOCAB_SIZE - 3 ids; the special tokens take the last 3
# Qwen2 / Qwen3's pre-tokenizer split (one digit per piece), then byte-level mapping, except
# that punctuation does not take the newlines after it ("):" + "\n", not "):\n"): a prompt
# that ends in "):" (def fibonacci(n):) then ends on a token boundary seen in training.
SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# ChatML, as Qwen's templates render plain text messages.
CHAT_TEMPLATE = (
    "{%- for message in messages %}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "{{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n")
SYSTEM_PROMPTS = ["You are a helpful assistant.", "You are a Python programming assistant."]
HELD_OUT_MODULUS = 25  # a file is held out when sha1(its path) % 25 == 0 (about 4%)
# Code that the default packages vendor from other projects, with its own licence: the
# model card and NOTICE name each one found in the data. (path prefix as the manifest
# writes it, project, licence)
VENDORED_CODE = [
    ("sympy/multipledispatch/", "multipledispatch", "BSD-3-Clause"),
    ("sklearn/externals/_arff.py", "liac-arff", "MIT"),
    ("sklearn/externals/_numpydoc/", "numpydoc", "BSD"),
    ("sklearn/externals/_packaging/", "packaging", "Apache-2.0 OR BSD-2-Clause"),
    ("sklearn/externals/_scipy/", "SciPy", "BSD-3-Clause"),
    ("sklearn/externals/array_api_compat/", "array-api-compat", "MIT"),
    ("sklearn/externals/array_api_extra/", "array-api-extra", "MIT"),
    ("pandas/io/clipboard/", "pyperclip", "BSD-3-Clause"),
    ("pandas/util/version/", "packaging", "Apache-2.0 OR BSD-2-Clause"),
    ("pandas/io/sas/", "derived in part from sas7bdat", "MIT"),
    ("setuptools/_distutils/", "pypa/distutils (continues CPython's distutils)",
     "shipped under setuptools' MIT"),
    ("setuptools/config/_validate_pyproject/fastjsonschema_exceptions.py", "fastjsonschema",
     "BSD-3-Clause"),
    ("setuptools/config/_validate_pyproject/", "generated by validate-pyproject", "MPL-2.0"),
    ("setuptools/_vendor/autocommand/", "autocommand", "LGPL-3.0"),
    ("setuptools/_vendor/backports/", "backports.tarfile", "MIT"),
    ("setuptools/_vendor/importlib_metadata/", "importlib_metadata", "Apache-2.0"),
    ("setuptools/_vendor/jaraco/", "jaraco.context, jaraco.functools, jaraco.text", "MIT"),
    ("setuptools/_vendor/more_itertools/", "more-itertools", "MIT"),
    ("setuptools/_vendor/packaging/", "packaging", "Apache-2.0 OR BSD-2-Clause"),
    ("setuptools/_vendor/platformdirs/", "platformdirs", "MIT"),
    ("setuptools/_vendor/tomli/", "tomli", "MIT"),
    ("setuptools/_vendor/wheel/", "wheel", "MIT"),
    ("setuptools/_vendor/zipp/", "zipp", "MIT"),
]
EXCLUDED_DIRS = {"site-packages", "dist-packages", "__pycache__"}
MAX_FILE_BYTES = 2_000_000

# The model: Qwen3.5 MoE text model, 8 layers (3 Gated DeltaNet : 1 gated attention).
L, FA = "linear_attention", "full_attention"
MODEL_CONFIG = {
    "architectures": ["Qwen3_5MoeForCausalLM"],
    "model_type": "qwen3_5_moe_text",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "attn_output_gate": True,
    "dtype": "bfloat16",
    "full_attention_interval": 4,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 256,
    "initializer_range": 0.02,
    "layer_types": [L, L, L, FA, L, L, L, FA],
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 64,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_value_head_dim": 64,
    "mamba_ssm_dtype": "float32",
    "max_position_embeddings": 4096,
    "mlp_only_layers": [],
    "moe_intermediate_size": 64,
    "mtp_num_hidden_layers": 0,
    "mtp_use_dedicated_embeddings": False,
    "num_attention_heads": 4,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 8,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_parameters": {
        "mrope_interleaved": True,
        "mrope_section": [3, 3, 2],  # sums to rotary_dim / 2 = 64 * 0.25 / 2
        "partial_rotary_factor": 0.25,
        "rope_theta": 10000000,
        "rope_type": "default",
    },
    "router_aux_loss_coef": 0.001,
    "shared_expert_intermediate_size": 64,
    "tie_word_embeddings": True,
    "use_cache": True,
    "vocab_size": VOCAB_SIZE,
}

# The golden prompts: code the model has seen the like of, a chat turn, prose, and UTF-8.
REFERENCE_PROMPTS = [
    "def fibonacci(n):",
    "import os\nimport sys\n",
    "class Stack:\n    \"\"\"A last-in, first-out stack.\"\"\"\n\n    def __init__(self):\n",
    "for i in range(10):\n",
    "# Licensed to the Python Software Foundation",
    "if __name__ == \"__main__\":\n",
    "    def __repr__(self):\n        return ",
    "The quick brown fox jumps over the lazy dog.",
    "<|im_start|>user\nWrite a Python function named reverse_words. Return the words of a "
    "string in reverse order.<|im_end|>\n<|im_start|>assistant\n",
    "x = [1, 2, 3]\nprint(sum(x) / len(x))  # caf\u00e9 \u2713 \u6570\u5b57 \U0001f642\n",
]
NUM_GREEDY = 32
MARGIN_THRESHOLD = 1e-3


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ----------------------------------------------------------------------------------------
# Data: the standard library's .py files, and chat turns made from its documented functions
# ----------------------------------------------------------------------------------------

def collect_sources(label, root):
    """All .py files under root (sorted walk, no site-/dist-packages), split by path hash.
    Paths are recorded as label/relative-path."""
    files, skipped = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_DIRS)
        for fn in sorted(filenames):
            if not fn.endswith(".py"):
                continue
            path = os.path.join(dirpath, fn)
            rel = f"{label}/{os.path.relpath(path, root)}"
            if os.path.islink(path):
                skipped.append((rel, "symlink"))
                continue
            with open(path, "rb") as f:
                raw = f.read()
            if len(raw) > MAX_FILE_BYTES:
                skipped.append((rel, f"over {MAX_FILE_BYTES} bytes"))
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                skipped.append((rel, "not UTF-8"))
                continue
            if not text.strip():
                skipped.append((rel, "empty"))
                continue
            h = int(hashlib.sha1(rel.encode()).hexdigest(), 16)
            split = "heldout" if h % HELD_OUT_MODULUS == 0 else "train"
            files.append({"path": rel, "bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest(),
                          "split": split, "text": text})
    return files, skipped


def portable_location(root):
    """root without the machine's own paths: <site-packages>/NAME for an installed package,
    <prefix>/lib/pythonX.Y for the standard library (prefix: Python's installation)."""
    root = os.path.realpath(root)
    bases = [(p, "<site-packages>") for p in {sysconfig.get_paths()["purelib"],
                                               sysconfig.get_paths()["platlib"]}]
    bases += [(sys.base_prefix, "<prefix>"), (sys.prefix, "<prefix>")]
    for base, label in bases:
        base = os.path.realpath(base)
        if root == base or root.startswith(base + os.sep):
            return f"{label}/{os.path.relpath(root, base)}".rstrip("/.")
    return f"<{os.path.basename(root)}>"


def vendored_rows(files):
    """(prefix, project, licence, files, bytes) of each VENDORED_CODE entry found in the data;
    a file counts for the first (most specific listed) prefix it starts with."""
    counts = {prefix: [0, 0] for prefix, _, _ in VENDORED_CODE}
    for x in files:
        for prefix, _, _ in VENDORED_CODE:
            if x["path"].startswith(prefix):
                counts[prefix][0] += 1
                counts[prefix][1] += x["bytes"]
                break
    return [(prefix, what, lic, *counts[prefix]) for prefix, what, lic in VENDORED_CODE
            if counts[prefix][0]]


def package_source(name):
    """(directory, distribution, licence) of an installed package, from its metadata."""
    import importlib.metadata as md
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"package {name} not found")
    root = list(spec.submodule_search_locations)[0]
    dists = md.packages_distributions().get(name) or [name]
    meta = md.metadata(dists[0])
    lic = meta.get("License-Expression") or ""
    if not lic:
        lic = "; ".join(c.split(" :: ")[-1] for c in meta.get_all("Classifier") or []
                        if c.startswith("License ::"))
    if not lic:
        lic = (meta.get("License") or "").split("\n")[0][:80]
    return root, f"{dists[0]} {meta.get('Version')}", lic or "unknown"


def survey_packages(names):
    for name in names:
        try:
            root, dist, lic = package_source(name)
        except Exception as exc:
            log(f"survey {name}: {exc}")
            continue
        n, size = 0, 0
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for fn in filenames:
                if fn.endswith(".py"):
                    n += 1
                    size += os.path.getsize(os.path.join(dirpath, fn))
        log(f"survey {name}: {dist}, licence {lic!r}, {n} .py files, {size:,} bytes at {root}")


def documented_functions(text):
    """(name, docstring summary, source) of the public module-level functions with docstrings."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    lines = text.splitlines(keepends=True)
    out = []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if node.name.startswith("_"):
            continue
        doc = ast.get_docstring(node)
        if not doc:
            continue
        summary = " ".join(doc.strip().split("\n\n")[0].split())
        if len(summary.split()) < 3 or len(summary) > 300:
            continue
        start = min([d.lineno for d in node.decorator_list] + [node.lineno]) - 1
        src = "".join(lines[start:node.end_lineno]).rstrip()
        if len(src) > 2000:
            continue
        out.append((node.name, summary, src))
    return out


def chat_turn(name, summary, src):
    user = f"Write a Python function named {name}. {summary}"
    return user, f"```python\n{src}\n```"


def render_chat(messages):
    """CHAT_TEMPLATE rendered by hand (checked against transformers in check_tokenizer)."""
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)


def make_chat_documents(files, rng):
    """One conversation per file with documented functions: one or two user/assistant turns,
    sometimes after a system prompt."""
    docs = []
    for f in files:
        funcs = documented_functions(f["text"])
        rng.shuffle(funcs)
        while funcs:
            turns = 2 if len(funcs) >= 2 and rng.random() < 0.4 else 1
            messages = []
            if rng.random() < 0.3:
                messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
            for _ in range(turns):
                user, assistant = chat_turn(*funcs.pop())
                messages += [{"role": "user", "content": user},
                             {"role": "assistant", "content": assistant}]
            docs.append({"split": f["split"], "messages": messages, "text": render_chat(messages)})
    return docs


# ----------------------------------------------------------------------------------------
# Tokenizer
# ----------------------------------------------------------------------------------------

def train_tokenizer(texts):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                              use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE - len(SPECIAL_TOKENS), min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[], show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    learned = tok.get_vocab_size()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIAL_TOKENS])
    ids = {s: tok.token_to_id(s) for s in SPECIAL_TOKENS}
    log(f"tokenizer: {learned} BPE tokens + specials {ids}")
    if tok.get_vocab_size() > VOCAB_SIZE:
        raise RuntimeError(f"vocabulary {tok.get_vocab_size()} > {VOCAB_SIZE}")
    return tok, ids


def write_tokenizer_files(tok, ids, mdir):
    tok.save(os.path.join(mdir, "tokenizer.json"))
    added = {str(ids[s]): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                           "single_word": False, "special": True} for s in SPECIAL_TOKENS}
    cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": MODEL_CONFIG["max_position_embeddings"],
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }
    with open(os.path.join(mdir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")


def check_tokenizer(tok, mdir, chat_docs):
    """transformers' AutoTokenizer must give the same ids as `tokenizers`, and its
    apply_chat_template the same text as render_chat."""
    hf = transformers.AutoTokenizer.from_pretrained(mdir)
    log(f"AutoTokenizer class: {type(hf).__name__}, eos {hf.eos_token!r} pad {hf.pad_token!r}")
    for text in REFERENCE_PROMPTS + [d["text"] for d in chat_docs[:20]]:
        a = tok.encode(text, add_special_tokens=True).ids
        b = hf(text)["input_ids"]
        if a != b:
            raise RuntimeError(f"AutoTokenizer ids differ from tokenizers for {text[:60]!r}")
    for d in chat_docs[:20]:
        rendered = hf.apply_chat_template(d["messages"], tokenize=False)
        if rendered != d["text"]:
            raise RuntimeError(f"apply_chat_template differs:\n{rendered!r}\nvs\n{d['text']!r}")
    msgs = [{"role": "user", "content": "Hi"}]
    gen = hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    if gen != "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n":
        raise RuntimeError(f"generation prompt renders as {gen!r}")
    log("tokenizer check: AutoTokenizer ids and apply_chat_template agree")
    return hf


# ----------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------

def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def count_params(model):
    seen, total, experts = set(), 0, 0
    for name, p in model.named_parameters():
        if p.data_ptr() in seen:
            continue
        seen.add(p.data_ptr())
        total += p.numel()
        if ".mlp.experts." in name:
            experts += p.numel()
    cfg = MODEL_CONFIG
    active = total - experts + experts * cfg["num_experts_per_tok"] // cfg["num_experts"]
    return total, active


def set_experts_impl(model, name):
    if hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation(name)
        return str(model.get_experts_implementation()) if hasattr(
            model, "get_experts_implementation") else name
    return "default (no set_experts_implementation)"


class Batches:
    """Random windows of seq_len + 1 tokens from one token stream, seeded."""

    def __init__(self, ids, seq_len, batch_size, seed, device):
        self.ids = ids.to(device)
        self.seq_len, self.batch_size = seq_len, batch_size
        self.gen = torch.Generator(device="cpu").manual_seed(seed)
        self.device = device
        self.span = torch.arange(seq_len + 1, device=device)

    def next(self):
        starts = torch.randint(0, self.ids.numel() - self.seq_len - 1, (self.batch_size,),
                               generator=self.gen).to(self.device)
        return self.ids[starts[:, None] + self.span[None, :]]


def windows(ids, seq_len, limit=None):
    n = (ids.numel() - 1) // seq_len
    if limit is not None:
        n = min(n, limit)
    idx = torch.arange(n)[:, None] * seq_len + torch.arange(seq_len + 1)[None, :]
    return ids[idx]


@torch.no_grad()
def mean_loss(model, wins, batch, device, autocast):
    model.eval()
    total, count = 0.0, 0
    for i in range(0, wins.shape[0], batch):
        w = wins[i:i + batch].to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=w[:, :-1], use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1),
                               reduction="sum")
        total += float(loss)
        count += w[:, 1:].numel()
    model.train()
    return total / count


def unigram_baseline(train_ids, targets, vocab):
    """Cross-entropy of predicting every target by its training-split frequency (add-one)."""
    counts = torch.bincount(train_ids, minlength=vocab).double() + 1.0
    logp = (counts / counts.sum()).log()
    return float(-logp[targets].mean())


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t)))


def train(model, train_ids, heldout_wins, args, device):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() >= 2 else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    batches = Batches(train_ids, args.seq_len, args.batch_size, args.seed + 1, device)
    coef = MODEL_CONFIG["router_aux_loss_coef"]
    history = {"step": [], "train_loss": [], "eval_step": [], "heldout_loss": []}
    pending = []
    model.train()
    torch.cuda.synchronize()
    start = time.time()
    steps_done = 0
    stopped_early = False
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        x = batches.next()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=x[:, :-1], use_cache=False, output_router_logits=True)
        ce = F.cross_entropy(out.logits.float().reshape(-1, out.logits.shape[-1]),
                             x[:, 1:].reshape(-1))
        loss = ce + coef * out.aux_loss if out.aux_loss is not None else ce
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        pending.append(ce.detach())
        steps_done = step + 1
        if steps_done % 10 == 0 or steps_done == args.steps:
            vals = torch.stack(pending).float().cpu().tolist()
            first = steps_done - len(vals) + 1
            history["step"] += list(range(first, steps_done + 1))
            history["train_loss"] += vals
            pending = []
        if steps_done % args.eval_every == 0 or steps_done == args.steps:
            h = mean_loss(model, heldout_wins[:args.eval_windows], 64, device, autocast=True)
            history["eval_step"].append(steps_done)
            history["heldout_loss"].append(h)
            el = time.time() - start
            log(f"step {steps_done}/{args.steps}: train {history['train_loss'][-1]:.4f}, "
                f"held-out {h:.4f}, lr {lr_at(step, args):.2e}, {el:.0f} s, "
                f"{el / steps_done * 1000:.0f} ms/step")
        if args.max_train_seconds and time.time() - start > args.max_train_seconds:
            log(f"stopping at step {steps_done}: --max-train-seconds {args.max_train_seconds}")
            stopped_early = True
            break
    if pending:
        vals = torch.stack(pending).float().cpu().tolist()
        history["step"] += list(range(steps_done - len(vals) + 1, steps_done + 1))
        history["train_loss"] += vals
    torch.cuda.synchronize()
    return history, time.time() - start, steps_done, stopped_early


def bench_experts(model, train_ids, args, device, names):
    """Times a few training steps per experts backend (no optimizer step); returns ms/step."""
    batches = Batches(train_ids, args.seq_len, args.batch_size, 12345, device)
    x = batches.next()
    results = {}
    for name in names:
        try:
            set_experts_impl(model, name)
            losses = []
            for i in range(6):
                if i == 2:
                    torch.cuda.synchronize()
                    t0 = time.time()
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    out = model(input_ids=x[:, :-1], use_cache=False, output_router_logits=True)
                ce = F.cross_entropy(out.logits.float().reshape(-1, out.logits.shape[-1]),
                                     x[:, 1:].reshape(-1))
                ce.backward()
                losses.append(float(ce))
            torch.cuda.synchronize()
            ms = (time.time() - t0) / 4 * 1000
            model.zero_grad(set_to_none=True)
            results[name] = ms
            log(f"experts backend {name}: {ms:.0f} ms/step (fwd+bwd), loss {losses[0]:.5f}")
        except Exception as exc:  # a backend this build lacks
            log(f"experts backend {name}: failed: {type(exc).__name__}: {exc}")
            model.zero_grad(set_to_none=True)
    return results


def export_checkpoint(model, mdir):
    """bf16 safetensors in the shipped Qwen3.5 MoE layout (fused experts, as state_dict names
    them); the tied lm_head is not stored."""
    tensors = {}
    for name, t in model.state_dict().items():
        if name == "lm_head.weight" and MODEL_CONFIG["tie_word_embeddings"]:
            continue
        tensors[name] = t.detach().to(torch.bfloat16).cpu().contiguous()
    path = os.path.join(mdir, "model.safetensors")
    save_file(tensors, path, metadata={"format": "pt"})
    return tensors, os.path.getsize(path)


def reload_and_compare(cls, mdir, tensors):
    model, info = cls.from_pretrained(mdir, dtype=torch.float32, attn_implementation="eager",
                                      output_loading_info=True)
    log(f"reload: missing={info.get('missing_keys')} unexpected={info.get('unexpected_keys')} "
        f"mismatched={info.get('mismatched_keys')}")
    if info.get("missing_keys") or info.get("unexpected_keys") or info.get("mismatched_keys"):
        raise RuntimeError("transformers did not load every tensor")
    sd = model.state_dict()
    for name, t in tensors.items():
        if not torch.equal(sd[name].float(), t.float()):
            raise RuntimeError(f"reloaded {name} differs from the saved bf16 tensor")
    emb = sd["model.embed_tokens.weight"]
    if not torch.equal(sd["lm_head.weight"], emb):
        raise RuntimeError("lm_head is not tied to the embedding after reload")
    log(f"reload check: all {len(tensors)} tensors identical to the saved bf16 values; "
        f"lm_head tied")
    return model.eval()


# ----------------------------------------------------------------------------------------
# Reference (CPU, float32)
# ----------------------------------------------------------------------------------------

def rel_l2(a, b):
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


@torch.inference_mode()
def greedy_cached(model, ids, steps):
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
    return toks, torch.stack(step_logits)


def make_reference(model, tok, out_dir):
    ref_dir = os.path.join(out_dir, "tests", "golden", "demo_model")
    os.makedirs(ref_dir, exist_ok=True)
    tensors, prompts = {}, []
    worst_cache = 0.0
    for i, text in enumerate(REFERENCE_PROMPTS):
        ids = tok.encode(text, add_special_tokens=True).ids
        x = torch.tensor([ids])
        with torch.inference_mode():
            logits = model(input_ids=x, use_cache=False).logits[0].float()
        toks, step_logits = greedy_cached(model, x, NUM_GREEDY)
        top2 = step_logits.log_softmax(-1).topk(2, dim=-1).values
        margins = (top2[:, 0] - top2[:, 1])
        full = torch.tensor([ids + toks[:-1]])
        with torch.inference_mode():
            full_logits = model(input_ids=full, use_cache=False).logits[0, len(ids) - 1:].float()
        cache_err = max(rel_l2(step_logits[j], full_logits[j]) for j in range(NUM_GREEDY))
        worst_cache = max(worst_cache, cache_err)
        tensors[f"prompt.{i}.last_logits"] = logits[-1].contiguous()
        tensors[f"prompt.{i}.decode_logits"] = step_logits[1].contiguous()
        low = [j for j in range(NUM_GREEDY) if margins[j] < MARGIN_THRESHOLD]
        prompts.append({
            "prompt": text,
            "prompt_token_ids": ids,
            "greedy_token_ids": toks,
            "greedy_margins": [round(float(m), 6) for m in margins],
            "greedy_text": tok.decode(toks, skip_special_tokens=False),
            "first_step_below_margin": low[0] if low else None,
        })
        log(f"reference {i}: {len(ids)} prompt tokens, margin min {float(margins.min()):.4g}, "
            f"cached-vs-full {cache_err:.1e}: {tok.decode(toks, skip_special_tokens=False)!r}")
    info = {
        "model": f"models/{MODEL_NAME}",
        "what": "transformers float32 on the CPU from the saved bf16 weights, eager attention, "
                "greedy through the model's own cache; prompts tokenized with tokenizer.json "
                "(add_special_tokens=True, which adds nothing for this tokenizer)",
        "num_greedy": NUM_GREEDY,
        "margin_threshold": MARGIN_THRESHOLD,
        "cached_vs_uncached_max_rel_l2": worst_cache,
        "versions": versions(),
        "blocked_optional_kernels": BLOCKED_MODULES,
        "prompts": prompts,
    }
    write_json(os.path.join(ref_dir, "reference.json"), info)
    save_file(tensors, os.path.join(ref_dir, "reference.safetensors"),
              metadata={"format": "pt", "transformers_version": transformers.__version__})
    return prompts


@torch.inference_mode()
def greedy_text(model, tok, text, steps, stop_ids=()):
    ids = tok.encode(text, add_special_tokens=True).ids
    toks, _ = greedy_cached(model, torch.tensor([ids]), steps)
    for j, t in enumerate(toks):
        if t in stop_ids:
            toks = toks[:j]
            break
    return tok.decode(toks, skip_special_tokens=True)


def versions():
    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
            "safetensors": safetensors.__version__}


# ----------------------------------------------------------------------------------------
# Model card
# ----------------------------------------------------------------------------------------

def plot_losses(history, baseline, eval_windows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    steps, losses = history["step"], history["train_loss"]
    k = 20
    smooth = [sum(losses[max(0, i - k + 1):i + 1]) / len(losses[max(0, i - k + 1):i + 1])
              for i in range(len(losses))]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    ax.plot(steps, losses, color="#9ecae1", linewidth=0.6, label="train (per step)")
    ax.plot(steps, smooth, color="#08519c", linewidth=1.4, label=f"train ({k}-step mean)")
    ax.plot(history["eval_step"], history["heldout_loss"], "o-", color="#d94801", markersize=3,
            label=f"held-out (first {eval_windows} windows)")
    ax.axhline(baseline, color="gray", linestyle="--", linewidth=1,
               label=f"unigram baseline ({baseline:.2f})")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats / token)")
    ax.set_ylim(0, max(baseline + 1.0, min(10.0, max(losses[:5] + [baseline]) + 0.5)))
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(f"{MODEL_NAME}: training on Python source")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_model_card(mdir, s):
    s = dict(s)
    s["steps_note"] = (f"; the schedule was set for {s['planned_steps']:,} steps and "
                       f"`--max-train-seconds {s['max_train_seconds']:g}` ended training at step "
                       f"{s['steps']:,}" if s["stopped_early"] else "")
    s["time_flag"] = (f" --max-train-seconds {s['max_train_seconds']:g}"
                      if s["max_train_seconds"] else "")
    s["source_rows"] = "\n".join(
        f"| `{x['label']}/` | {x['what']}, `{x['root']}` | {x['licence']} | "
        f"{s['source_bytes'][x['label']]:,} |" for x in s["sources"])
    s["vendored_rows"] = "\n".join(
        f"| `{v['prefix']}` | {v['what']} | {v['licence']} | {v['files']:,} | {v['bytes']:,} |"
        for v in s["vendored"])
    card = f"""# {MODEL_NAME}

A small model of the Qwen3.5 MoE hybrid architecture, trained from scratch by
`scripts/train_demo_model.py` so that vllm.cpp has a real model to run out of the box
(`vllm generate`, `vllm chat` and `vllm serve` use it when no model is given). It writes
Python-looking code; it knows nothing else. It is a demo and a test fixture, not a useful
assistant.

## Architecture

`Qwen3_5MoeForCausalLM` (`model_type` `qwen3_5_moe_text`), the text model of the Qwen3.5 MoE
family at toy size:

| | |
| --- | --- |
| parameters | {s['params']:,} ({s['active_params']:,} active per token) |
| file | `model.safetensors`, bfloat16, {s['file_bytes']:,} bytes |
| layers | 8: Gated DeltaNet x3, gated attention x1, twice (`layer_types`) |
| hidden size | 256; embeddings tied to the LM head |
| Gated DeltaNet | 2 key heads x 64, 4 value heads x 64, conv kernel 4 |
| attention | 4 query heads, 2 KV heads, head_dim 64, output gate, partial RoPE (16 dims, theta 1e7) |
| MoE (every layer) | 8 experts (intermediate 64), top-2, renormalised; shared expert (intermediate 64) with a sigmoid gate |
| vocabulary | {VOCAB_SIZE}: byte-level BPE trained here + `<|endoftext|>` ({s['ids']['<|endoftext|>']}), `<|im_start|>` ({s['ids']['<|im_start|>']}), `<|im_end|>` ({s['ids']['<|im_end|>']}) |
| context | trained on windows of {s['seq_len']} tokens; `max_position_embeddings` {MODEL_CONFIG['max_position_embeddings']} |

Tensor names are the shipped Qwen3.5 MoE layout (`model.layers.N...`, experts fused as
`mlp.experts.gate_up_proj` [8, 128, 256] and `mlp.experts.down_proj` [8, 256, 64]).
transformers {s['versions']['transformers']} loads the folder with `from_pretrained`; the script reloads it
and checks every tensor.

## Data

Python source files, as they are (code, comments and docstrings): every `.py` file under
each source below except `site-packages`, `dist-packages` and `__pycache__` folders, files
over 2 MB, empty files and files that are not UTF-8. `data_manifest.tsv` lists every file
with its size, SHA-256 and split.

| source | what, where | licence | bytes |
| --- | --- | --- | --- |
{s['source_rows']}

(`<site-packages>` is the folder the package was installed in, `<prefix>` the Python
installation.)

| | files | bytes | tokens |
| --- | --- | --- | --- |
| train | {s['train_files']:,} | {s['train_bytes']:,} | {s['train_tokens']:,} |
| held out | {s['heldout_files']:,} | {s['heldout_bytes']:,} | {s['heldout_tokens']:,} |

Skipped: {s['skipped']}. A file is held out when the SHA-1 of its path (as the manifest
writes it) is divisible by {HELD_OUT_MODULUS}.

Chat turns, also from these files: for each public module-level function with a docstring,
the user turn is `Write a Python function named NAME. <first paragraph of its docstring>`
and the assistant turn is the function's source in a ```python block; one or two such turns
per conversation, 30% after a system prompt ({' / '.join(repr(p) for p in SYSTEM_PROMPTS)}),
rendered with the ChatML template below. {s['chat_docs']:,} conversations
({s['chat_train_bytes']:,} bytes train, {s['chat_heldout_bytes']:,} held out; counted in the
token figures above), made from the same split as their file. Documents are joined with
`<|endoftext|>`.

### Licences of the data

Each source is under the licence in the table above, as its package metadata declares it
(the standard library is distributed under the Python Software Foundation License; sympy's
and pandas' "BSD License" is the 3-clause BSD licence of their LICENSE files). Python's
licence lists further permissive notices for code the standard library incorporates (among
the files here: parts of `asyncio` from uvloop, MIT; `http/cookies.py`, `trace.py`,
`xmlrpc/`), and `sympy/parsing/*/_antlr/` is generated by ANTLR from SymPy's grammars.

The packages also carry code from other projects, under those projects' licences; all of
it is in the data:

| path | from | licence | files | bytes |
| --- | --- | --- | --- | --- |
{s['vendored_rows']}

Nothing of these sources is stored in this repository apart from the manifest's paths and
hashes. The model can reproduce fragments of its training data; such text stays under the
licence of the file it came from.
The model itself (weights, tokenizer, configuration) is released with vllm.cpp under the
Apache License 2.0; `NOTICE` at the repository root repeats these licences.

## Tokenizer

`tokenizer.json`: byte-level BPE trained with Hugging Face `tokenizers` {s['versions']['tokenizers']} on the
training split (code and chat text, without the special tokens), NFC normaliser, byte-level
decoder. Pre-tokenizer: the Qwen2 / Qwen3 split pattern (digits one by one) with one change,
then byte-level mapping: punctuation does not take the newlines that follow it (Qwen's
` ?[^\\s\\p{{L}}\\p{{N}}]+[\\r\\n]*` is ` ?[^\\s\\p{{L}}\\p{{N}}]+` here), so `):` and the line break
after it are separate tokens and a prompt ending in `):`, such as `def fibonacci(n):`, ends on
a token boundary the model saw in training.
`tokenizer_config.json` holds the ChatML chat template (`<|im_start|>role\\n...<|im_end|>\\n`,
`add_generation_prompt` appends `<|im_start|>assistant\\n`), `eos_token` `<|im_end|>`, and
`pad_token` `<|endoftext|>`. `generation_config.json` stops at `<|im_end|>` and
`<|endoftext|>` and samples with temperature 0.7, top-p 0.9, top-k 20 by default.

## Training

| | |
| --- | --- |
| steps | {s['steps']:,} of batch {s['batch_size']} x {s['seq_len']} tokens (random windows of the train split, seeded){s['steps_note']} |
| tokens seen | {s['tokens_seen']:,} (about {s['epochs']:.1f} passes over the train split) |
| optimiser | AdamW, betas (0.9, 0.95), weight decay {s['weight_decay']} on matrices, peak LR {s['lr']}, {s['warmup']} warm-up steps, cosine to {s['min_lr_ratio']} x peak; gradient clip 1.0; router load-balancing loss x 0.001 |
| precision | float32 weights, bfloat16 autocast; shipped as bfloat16 |
| hardware | one {s['device_name']}, torch {s['versions']['torch']}, transformers {s['versions']['transformers']} (Gated DeltaNet through transformers' torch fallback, experts backend `{s['experts_impl']}`) |
| training wall time | {s['train_seconds']:.0f} s ({s['ms_per_step']:.0f} ms per step); the whole script {s['total_seconds']:.0f} s |
| seed | {s['seed']} |

## Results

Cross-entropy in nats per token, computed in float32 with the shipped bfloat16 weights:

| | loss | perplexity |
| --- | --- | --- |
| train (same number of windows of the train split) | {s['train_loss']:.3f} | {math.exp(s['train_loss']):.1f} |
| held out | **{s['heldout_loss']:.3f}** | {math.exp(s['heldout_loss']):.1f} |
| unigram baseline on held out (train-split token frequencies, add-one) | {s['unigram_loss']:.3f} | {math.exp(s['unigram_loss']):.1f} |

The held-out loss is {s['unigram_loss'] - s['heldout_loss']:.2f} nats per token below the unigram baseline
(over {s['heldout_eval_tokens']:,} held-out target tokens).

![loss curve](loss_curve.png)

(The curve's held-out points, taken during training with bfloat16 autocast, cover only the
first {s['eval_windows']} held-out windows of {s['seq_len']} tokens, so they differ from the
whole-set figure above.)

Greedy continuation of `def fibonacci(n):` (64 tokens, transformers):

```python
def fibonacci(n):{s['fib_text']}
```

Greedy reply (transformers, chat template) to "Write a Python function named
reverse_words. Return the words of a string in reverse order.":

````
{s['chat_text']}
````

`tests/golden/demo_model/` holds transformers' greedy output for 10 prompts;
`tests/unit/test_demo_model.cpp` checks that vllm.cpp produces the same tokens.

## Reproduce

On a machine with a GPU, torch, tokenizers and transformers:

```sh
PYTHONUNBUFFERED=1 python3 scripts/train_demo_model.py OUT_DIR \\
  --packages {s['packages']} --steps {s['planned_steps']} --batch-size {s['batch_size']} \\
  --experts-impl {s['experts_impl']}{s['time_flag']}
```
then copy `OUT_DIR/models/{MODEL_NAME}` and `OUT_DIR/tests/golden/demo_model` into the
repository. `training_log.json` has the per-step losses and every setting. On the same
machine image the data, the tokenizer and the initial weights are the same on every run;
the GPU's reductions are not bit-deterministic, and `--max-train-seconds` makes the step
count depend on the machine's speed, so a rerun lands near these figures rather than on
them.
"""
    with open(os.path.join(mdir, "README.md"), "w") as f:
        f.write(card)


# ----------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", metavar="OUT_DIR",
                    help="output folder (models/... and tests/golden/... are written under it)")
    ap.add_argument("--stdlib", default=sysconfig.get_paths()["stdlib"])
    ap.add_argument("--packages", default="networkx,sympy,sklearn,pandas,setuptools",
                    help="comma-separated installed packages whose .py files join the data")
    ap.add_argument("--survey", default="",
                    help="comma-separated packages to report the size and licence of")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--steps", type=int, default=2600)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--eval-windows", type=int, default=128,
                    help="held-out windows for the evaluations during training")
    ap.add_argument("--heldout-windows", type=int, default=1024,
                    help="held-out windows for the final held-out loss and the baseline")
    ap.add_argument("--max-train-seconds", type=float, default=460,
                    help="stop training after this long (0: never); bounds the whole run to "
                         "about 10 minutes")
    ap.add_argument("--experts-impl", default="grouped_mm",
                    help="transformers experts backend for training (eager, grouped_mm, ...)")
    ap.add_argument("--bench-experts", default="",
                    help="comma-separated experts backends to time before training")
    args = ap.parse_args()
    t_start = time.time()

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device != "cuda":
        raise SystemExit("needs a GPU")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    device_name = torch.cuda.get_device_name(0)
    log(f"versions {versions()}; device {device_name}; blocked kernels {BLOCKED_MODULES}")

    mdir = os.path.join(args.out, "models", MODEL_NAME)
    shutil.rmtree(mdir, ignore_errors=True)
    os.makedirs(mdir)

    # --- data
    if args.survey:
        survey_packages(args.survey.split(","))
    sources = [("stdlib", args.stdlib, f"Python {platform.python_version()} standard library",
                "PSF-2.0")]  # (label, folder, what, licence)
    for name in [n for n in args.packages.split(",") if n]:
        root, dist, lic = package_source(name)
        sources.append((name, root, dist, lic))
    files, skipped = [], []
    for label, root, what, lic in sources:
        f_, s_ = collect_sources(label, root)
        log(f"source {label}: {what} at {root}, licence {lic}: {len(f_)} files, "
            f"{sum(x['bytes'] for x in f_):,} bytes; skipped {len(s_)}")
        files += f_
        skipped += s_
    rng = random.Random(args.seed)
    chat_docs = make_chat_documents(files, rng)
    with open(os.path.join(mdir, "data_manifest.tsv"), "w") as f:
        for label, root, what, lic in sources:
            f.write(f"# {label}/ = {portable_location(root)} ({what}; licence {lic})\n")
        f.write("path\tbytes\tsha256\tsplit\n")
        for x in files:
            f.write(f"{x['path']}\t{x['bytes']}\t{x['sha256']}\t{x['split']}\n")
        for rel, why in skipped:
            f.write(f"{rel}\t-\t-\tskipped: {why}\n")
    by = {sp: [x for x in files if x["split"] == sp] for sp in ("train", "heldout")}
    chat_by = {sp: [d for d in chat_docs if d["split"] == sp] for sp in ("train", "heldout")}
    log(f"data: {len(files)} files ({sum(x['bytes'] for x in files):,} bytes); train "
        f"{len(by['train'])}, held out {len(by['heldout'])}; skipped {len(skipped)}; chat "
        f"conversations {len(chat_docs)} ({sum(len(d['text'].encode()) for d in chat_docs):,} "
        f"bytes)")

    # --- tokenizer
    t0 = time.time()
    plain_chat = ["\n".join(m["content"] for m in d["messages"]) for d in chat_by["train"]]
    tok, ids = train_tokenizer([x["text"] for x in by["train"]] + plain_chat)
    write_tokenizer_files(tok, ids, mdir)
    check_tokenizer(tok, mdir, chat_docs)
    log(f"tokenizer trained and checked in {time.time() - t0:.0f} s")

    eot = ids["<|endoftext|>"]
    streams = {}
    for sp in ("train", "heldout"):
        docs = [x["text"] for x in by[sp]] + [d["text"] for d in chat_by[sp]]
        random.Random(args.seed + (0 if sp == "train" else 1)).shuffle(docs)
        encoded = tok.encode_batch(docs, add_special_tokens=False)
        flat = []
        for e in encoded:
            flat += e.ids
            flat.append(eot)
        streams[sp] = torch.tensor(flat, dtype=torch.int64)
        log(f"{sp}: {len(docs)} documents, {streams[sp].numel():,} tokens "
            f"({sum(len(d.encode()) for d in docs) / streams[sp].numel():.2f} bytes/token)")
    heldout_wins = windows(streams["heldout"], args.seq_len, limit=args.heldout_windows)
    train_eval_wins = windows(streams["train"], args.seq_len, limit=heldout_wins.shape[0])
    targets = heldout_wins[:, 1:].reshape(-1)
    baseline = unigram_baseline(streams["train"], targets, VOCAB_SIZE)
    log(f"unigram baseline on {targets.numel():,} held-out targets: {baseline:.4f}")

    # --- model
    cfg = dict(MODEL_CONFIG)
    cfg["eos_token_id"] = ids["<|im_end|>"]
    cfg["transformers_version"] = transformers.__version__
    write_json(os.path.join(mdir, "config.json"), cfg)
    write_json(os.path.join(mdir, "generation_config.json"), {
        "do_sample": True,
        "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
        "pad_token_id": ids["<|endoftext|>"],
        "temperature": 0.7,
        "top_k": 20,
        "top_p": 0.9,
        "transformers_version": transformers.__version__,
    })
    try:
        config = transformers.AutoConfig.from_pretrained(mdir)
    except Exception as exc:  # model_type not registered with AutoConfig
        log(f"AutoConfig failed ({exc}); using the class's config_class")
        config = getattr(transformers, cfg["architectures"][0]).config_class.from_pretrained(mdir)
    cls = getattr(transformers, cfg["architectures"][0])
    log(f"config class {type(config).__name__}, model class {cls.__name__}")
    torch.manual_seed(args.seed)
    model = cls._from_config(config, attn_implementation="sdpa").to(device)
    n_params, n_active = count_params(model)
    tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    log(f"parameters {n_params:,} (active {n_active:,}); tied embeddings {tied}")
    if not tied:
        raise RuntimeError("expected tied embeddings")
    if args.bench_experts:
        bench_experts(model, streams["train"], args, device, args.bench_experts.split(","))
        torch.manual_seed(args.seed)
        model = cls._from_config(config, attn_implementation="sdpa").to(device)
    experts_impl = set_experts_impl(model, args.experts_impl)
    log(f"experts backend: {experts_impl}")

    history, train_seconds, steps_done, stopped_early = train(
        model, streams["train"], heldout_wins, args, device)
    log(f"trained {steps_done} steps in {train_seconds:.0f} s")

    # --- export, reload, evaluate the shipped weights
    tensors, file_bytes = export_checkpoint(model, mdir)
    log(f"model.safetensors: {file_bytes:,} bytes, {len(tensors)} tensors")
    del model
    torch.cuda.empty_cache()
    reloaded = reload_and_compare(cls, mdir, tensors)
    set_experts_impl(reloaded, "eager")
    gpu_model = reloaded.to(device)
    heldout_loss = mean_loss(gpu_model, heldout_wins, 32, device, autocast=False)
    train_loss = mean_loss(gpu_model, train_eval_wins, 32, device, autocast=False)
    log(f"shipped weights, float32: train {train_loss:.4f}, held-out {heldout_loss:.4f}, "
        f"unigram baseline {baseline:.4f}")
    ref_model = gpu_model.to("cpu").float().eval()
    del gpu_model
    torch.cuda.empty_cache()

    # --- reference and samples (CPU, float32)
    torch.set_num_threads(max(1, min(16, os.cpu_count() or 1)))
    make_reference(ref_model, tok, args.out)
    stops = (ids["<|im_end|>"], ids["<|endoftext|>"])
    fib = greedy_text(ref_model, tok, "def fibonacci(n):", 64, stops)
    chat_prompt = REFERENCE_PROMPTS[8]
    chat_reply = greedy_text(ref_model, tok, chat_prompt, 128, stops)
    log(f"fibonacci:\ndef fibonacci(n):{fib}")
    log(f"chat reply:\n{chat_reply}")

    plot_losses(history, baseline, args.eval_windows, os.path.join(mdir, "loss_curve.png"))
    train_tokens, heldout_tokens = streams["train"].numel(), streams["heldout"].numel()
    tokens_seen = steps_done * args.batch_size * args.seq_len
    summary = {
        "params": n_params, "active_params": n_active, "file_bytes": file_bytes, "ids": ids,
        "seq_len": args.seq_len, "batch_size": args.batch_size, "steps": steps_done,
        "stopped_early": stopped_early, "tokens_seen": tokens_seen,
        "planned_steps": args.steps, "max_train_seconds": args.max_train_seconds,
        "eval_windows": args.eval_windows,
        "epochs": tokens_seen / train_tokens, "lr": args.lr, "warmup": args.warmup,
        "min_lr_ratio": args.min_lr_ratio, "weight_decay": args.weight_decay, "seed": args.seed,
        "device_name": device_name, "versions": versions(), "experts_impl": args.experts_impl,
        "train_seconds": train_seconds, "ms_per_step": train_seconds / max(1, steps_done) * 1000,
        "total_seconds": time.time() - t_start,
        "packages": args.packages or '""',
        "stdlib_root": portable_location(args.stdlib),
        "stdlib_version": platform.python_version(),
        "sources": [{"label": a, "root": portable_location(b), "what": c, "licence": d}
                    for a, b, c, d in sources],
        "vendored": [{"prefix": p, "what": w, "licence": lic, "files": n, "bytes": b}
                     for p, w, lic, n, b in vendored_rows(files)],
        "source_bytes": {a: sum(x["bytes"] for x in files if x["path"].startswith(a + "/"))
                         for a, _, _, _ in sources},
        "train_files": len(by["train"]), "heldout_files": len(by["heldout"]),
        "train_bytes": sum(x["bytes"] for x in by["train"]),
        "heldout_bytes": sum(x["bytes"] for x in by["heldout"]),
        "train_tokens": train_tokens, "heldout_tokens": heldout_tokens,
        "skipped": "; ".join(f"{n} files ({w})" for w, n in sorted(collections.Counter(
            w for _, w in skipped).items())) or "none",
        "chat_docs": len(chat_docs),
        "chat_train_bytes": sum(len(d["text"].encode()) for d in chat_by["train"]),
        "chat_heldout_bytes": sum(len(d["text"].encode()) for d in chat_by["heldout"]),
        "train_loss": train_loss, "heldout_loss": heldout_loss, "unigram_loss": baseline,
        "heldout_eval_tokens": int(targets.numel()),
        "fib_text": fib, "chat_text": chat_reply,
    }
    write_model_card(mdir, summary)
    # The log keeps every setting, but no path of this machine.
    recorded_args = {k: v for k, v in vars(args).items() if k != "out"}
    recorded_args["stdlib"] = portable_location(args.stdlib)
    write_json(os.path.join(mdir, "training_log.json"),
               {"summary": summary, "args": recorded_args, "config": cfg, "history": history})
    log(f"done in {time.time() - t_start:.0f} s: params {n_params:,}, held-out {heldout_loss:.4f} "
        f"vs unigram {baseline:.4f}")


if __name__ == "__main__":
    main()
