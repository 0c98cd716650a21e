#!/usr/bin/env bash
# Peer benchmark: vllm.cpp against llama.cpp on the same CPU cores, same weights, same
# prompt ids, greedy decoding. Prints one table (median over rounds) and checks that both
# engines give the same greedy tokens on the demo model.
#
#   bash benchmarks/peers/run.sh OUT_DIR
#
# OUT_DIR holds everything fetched and generated (npm packages, GGUF files, the random
# Qwen3-0.6B checkpoint, raw results); reruns reuse what is there. Environment:
#   VLLM_BUILD_DIR   configured build folder (default: build)
#   ROUNDS           timed rounds per case (default 3); engines alternate, order flips each round
#   GEN, PROMPT_LEN  tokens generated / prompt length (default 128 / 128)
#   QWEN_GEN         tokens generated on Qwen3-0.6B (default GEN)
#   CASES            which cases to run (default "demo qwen")
#   LLAMA_CPP_VERSION  node-llama-cpp release whose prebuilt CPU library is used (3.21.1)
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: bash benchmarks/peers/run.sh OUT_DIR" >&2
  exit 2
fi
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
out_dir="$(mkdir -p "$1" && cd "$1" && pwd)"
BUILD="${VLLM_BUILD_DIR:-$ROOT/build}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
ROUNDS="${ROUNDS:-3}"
GEN="${GEN:-128}"
PROMPT_LEN="${PROMPT_LEN:-128}"
QWEN_GEN="${QWEN_GEN:-$GEN}"
CASES="${CASES:-demo qwen}"
VERSION="${LLAMA_CPP_VERSION:-3.21.1}"

log() { echo "--- $*" >&2; }

# 1. llama.cpp: the prebuilt CPU libraries, and llama.h from the source bundle npm ships.
NPM="$out_dir/npm"
LIB="$NPM/linux-x64/package/bins/linux-x64"
if [ ! -f "$LIB/libllama.v0.4.0.so" ] && [ -z "$(ls "$LIB"/libllama*.so 2>/dev/null)" ]; then
  log "fetching @node-llama-cpp/linux-x64@$VERSION and node-llama-cpp@$VERSION from npm"
  mkdir -p "$NPM/linux-x64" "$NPM/main"
  (cd "$NPM" && npm pack --silent "@node-llama-cpp/linux-x64@$VERSION" "node-llama-cpp@$VERSION" >/dev/null)
  tar xzf "$NPM"/node-llama-cpp-linux-x64-"$VERSION".tgz -C "$NPM/linux-x64"
  tar xzf "$NPM"/node-llama-cpp-"$VERSION".tgz -C "$NPM/main"
fi
SRC="$NPM/llama-src"
if [ ! -f "$SRC/include/llama.h" ]; then
  log "unpacking llama.cpp's headers from the npm source bundle"
  rm -rf "$SRC"
  git -c advice.detachedHead=false clone -q "$NPM/main/package/llama/gitRelease.bundle" "$SRC"
fi
LIBLLAMA="$(ls "$LIB"/libllama*.so | grep -v common | head -1)"
LIBGGML="$(ls "$LIB"/libggml.*so | head -1)"
if [ ! -x "$out_dir/llama_driver" ] || [ "$ROOT/benchmarks/peers/llama_driver.cpp" -nt "$out_dir/llama_driver" ] ||
   [ "$ROOT/benchmarks/peers/workload.h" -nt "$out_dir/llama_driver" ]; then
  log "compiling llama_driver"
  g++ -O2 -std=c++17 -I "$ROOT/benchmarks/peers" -I "$SRC/include" -I "$SRC/ggml/include" \
    "$ROOT/benchmarks/peers/llama_driver.cpp" -o "$out_dir/llama_driver" \
    "$LIBLLAMA" "$LIBGGML" "$LIB/libggml-base.so" -Wl,-rpath,"$LIB"
fi

# 2. Our side: the converter, the random-checkpoint writer and the C-ABI driver.
log "building gguf_convert random_checkpoint vllm_peer_driver in $BUILD"
cmake --build "$BUILD" --target gguf_convert random_checkpoint vllm_peer_driver >/dev/null
TOOLS="$BUILD/benchmarks/peers"

DEMO="$ROOT/models/qwen35-moe-demo"
QWEN="$out_dir/qwen3-0.6b-random"
if [[ " $CASES " == *" demo "* ]]; then
  [ -f "$out_dir/demo-bf16.gguf" ] || "$TOOLS/gguf_convert" "$DEMO" "$out_dir/demo-bf16.gguf" --outtype bf16 >&2
  [ -f "$out_dir/demo-f32.gguf" ] || "$TOOLS/gguf_convert" "$DEMO" "$out_dir/demo-f32.gguf" --outtype f32 >&2
fi
if [[ " $CASES " == *" qwen "* ]]; then
  [ -f "$QWEN/model.safetensors" ] || "$TOOLS/random_checkpoint" "$ROOT/configs/Qwen3-0.6B" "$QWEN" --seed 0 >&2
  [ -f "$out_dir/qwen3-0.6b-bf16.gguf" ] || "$TOOLS/gguf_convert" "$QWEN" "$out_dir/qwen3-0.6b-bf16.gguf" --outtype bf16 >&2
fi

RESULTS="$out_dir/results.txt"
: > "$RESULTS"
# Each prints its RESULT line on stdout.
run_llama() {  # gguf label threads seqs gen [workload flags]
  "$out_dir/llama_driver" --lib-dir "$LIB" --model "$1" --label "$2" --threads "$3" --seqs "$4" \
    --gen "$5" --prompt-len "$PROMPT_LEN" "${@:6}" | grep '^RESULT'
}
run_ours() {  # dir label threads seqs gen [workload flags]
  VLLM_LOGGING_LEVEL="${VLLM_LOGGING_LEVEL:-warning}" "$TOOLS/vllm_peer_driver" --model "$1" \
    --label "$2" --threads "$3" --seqs "$4" --gen "$5" --prompt-len "$PROMPT_LEN" "${@:6}" |
    grep '^RESULT'
}
pair() {  # round gguf dir label threads seqs gen
  if [ $(($1 % 2)) -eq 0 ]; then
    run_llama "$2" "$4" "$5" "$6" "$7" | tee -a "$RESULTS" >&2
    run_ours "$3" "$4" "$5" "$6" "$7" | tee -a "$RESULTS" >&2
  else
    run_ours "$3" "$4" "$5" "$6" "$7" | tee -a "$RESULTS" >&2
    run_llama "$2" "$4" "$5" "$6" "$7" | tee -a "$RESULTS" >&2
  fi
}

log "load before timing: $(uptime)"
for round in $(seq 1 "$ROUNDS"); do
  for threads in 1 2; do
    if [[ " $CASES " == *" demo "* ]]; then
      pair "$round" "$out_dir/demo-bf16.gguf" "$DEMO" demo-bf16 "$threads" 1 "$GEN"
      pair "$round" "$out_dir/demo-bf16.gguf" "$DEMO" demo-bf16 "$threads" 8 "$GEN"
    fi
    if [[ " $CASES " == *" qwen "* ]]; then
      pair "$round" "$out_dir/qwen3-0.6b-bf16.gguf" "$QWEN" qwen3-0.6b-bf16 "$threads" 1 "$QWEN_GEN"
    fi
  done
done
log "load after timing: $(uptime)"

# 3. The table: median per case and engine.
echo
echo "| model | threads | seqs | llama.cpp prefill tok/s | vllm.cpp prefill tok/s | llama.cpp decode tok/s | vllm.cpp decode tok/s |"
echo "|---|---|---|---|---|---|---|"
awk '
  function field(name,   i, kv) {
    for (i = 2; i <= NF; ++i) { split($i, kv, "="); if (kv[1] == name) return kv[2] }
    return ""
  }
  {
    key = field("model") SUBSEP field("threads") SUBSEP field("seqs")
    e = field("engine")
    if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    np = ++cnt[key, e]
    pre[key, e, np] = field("prefill_tok_s"); dec[key, e, np] = field("decode_tok_s")
  }
  function median(arr, key, e, m,   i, j, t, v) {
    for (i = 1; i <= m; ++i) v[i] = arr[key, e, i] + 0
    for (i = 1; i <= m; ++i) for (j = i + 1; j <= m; ++j) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return (m % 2) ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
  }
  END {
    for (k = 1; k <= n; ++k) {
      key = order[k]; split(key, p, SUBSEP)
      ml = cnt[key, "llama.cpp"]; mv = cnt[key, "vllm.cpp"]
      printf "| %s | %s | %s | %.0f | %.0f | %.1f | %.1f |\n", p[1], p[2], p[3],
        median(pre, key, "llama.cpp", ml), median(pre, key, "vllm.cpp", mv),
        median(dec, key, "llama.cpp", ml), median(dec, key, "vllm.cpp", mv)
    }
  }' "$RESULTS"

# 4. Greedy tokens on the demo model, on a Python prompt (the text it was trained on): ours
# against llama.cpp on the same weights in f32 (exact f32 math on both sides) and in bf16
# (llama.cpp rounds activations to bf16 there, so a difference is not an error).
if [[ " $CASES " == *" demo "* ]]; then
  echo
  cmake --build "$BUILD" --target vllm >/dev/null
  prompt='"import os\nimport sys\n\n\ndef read_lines(path):\n    \"\"\"Return the lines of a file.\"\"\"\n"'
  ids="$(echo "$prompt" | VLLM_LOGGING_LEVEL=warning "$BUILD/src/cli/vllm" tokenize --model "$DEMO" |
    tr -d '[] ')"
  ours="$(run_ours "$DEMO" demo 1 1 "$GEN" --prompt-ids "$ids" | sed 's/.*tokens=//')"
  status=0
  for kind in f32 bf16; do
    theirs="$(run_llama "$out_dir/demo-$kind.gguf" demo 1 1 "$GEN" --prompt-ids "$ids" |
      sed 's/.*tokens=//')"
    if [ "$ours" = "$theirs" ]; then
      echo "greedy tokens on the demo model, llama.cpp $kind GGUF: equal ($GEN of $GEN) after the prompt $ids"
    else
      same=$(paste -d'\n' <(tr ',' '\n' <<<"$ours") <(tr ',' '\n' <<<"$theirs") | paste - - |
        awk '$1 != $2 { print NR - 1; found = 1; exit } END { if (!found) print NR }')
      echo "greedy tokens on the demo model, llama.cpp $kind GGUF: DIFFER from token $same"
      [ "$kind" = f32 ] && status=1
    fi
  done
  exit $status
fi
