#!/usr/bin/env bash
# First figures of the CUDA path on a GPU, with dummy weights of real configs (configs/):
# offline `vllm bench latency` for prefill (one step over the prompt) and decode (the step
# time from runs of 1 and N output tokens), then `vllm bench serve` against `vllm serve`.
#
#   bash scripts/device_bench.sh OUT_DIR [MODEL ...]     (default: Qwen3.5-4B Qwen3.5-27B)
#
# Environment: VLLM_BENCH_BATCHES, the decode batch sizes (default "1 64"); VLLM_BENCH_EAGER=1
# also times batch-1 decode with --enforce-eager (no CUDA graphs). VLLM_SERVE_MODEL names the
# config `vllm serve` runs (no serve runs without it), VLLM_SERVE_CONCURRENCY the client
# concurrencies (default "1 16"; 16 prompts at concurrency 1, 128 at 16, twice the
# concurrency above that) and VLLM_SERVE_ARGS extra server flags (default "--max-model-len
# 4096"), VLLM_SERVE_TIMEOUT the seconds one client run may take (default 900). Set
# VLLM_BENCH_BATCHES to "" for the serve runs alone.
#
# Needs build-device/ from scripts/device_test.sh. Writes OUT_DIR/figures.txt (the table
# printed at the end: per-step times and tokens/s) and OUT_DIR/bench_logs.tar.gz (each run's
# log and JSON). Exits non-zero if a run fails.
set -uo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 OUT_DIR [MODEL ...]" >&2
  exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
final="$(mkdir -p "$1" && cd "$1" && pwd)"
logs="$(mktemp -d)"
shift
models=("$@")
[ ${#models[@]} -eq 0 ] && models=(Qwen3.5-4B Qwen3.5-27B)
vllm="$root/build-device/src/cli/vllm"
prefix="${VLLM_DEB_PREFIX:-/tmp/vllm-debroot}"
if [ -d "$prefix/usr/lib/x86_64-linux-gnu" ]; then
  libdir="$prefix/usr/lib/x86_64-linux-gnu"
  export LD_LIBRARY_PATH="$libdir:$libdir/openblas-pthread:$prefix/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
[ -x "$vllm" ] || { echo "no $vllm: run scripts/device_test.sh first" >&2; exit 1; }
failed=0
rows=()

# Average latency (s) of one `vllm bench latency` configuration.
latency() {
  local name="$1" model="$2" batch="$3" input="$4" output="$5"
  shift 5
  local json="$logs/lat_${name}.json"
  local seqs=$((batch > 64 ? batch : 64))
  if ! timeout 300 "$vllm" bench latency --model "$root/configs/$model" --load-format dummy \
      --max-model-len 4096 --max-num-seqs "$seqs" --batch-size "$batch" --input-len "$input" --output-len "$output" "$@" \
      --num-iters-warmup 1 --num-iters 3 --output-json "$json" --disable-detokenize \
      >"$logs/lat_${name}.log" 2>&1; then
    echo "FAILED: $name" >&2
    tail -20 "$logs/lat_${name}.log" >&2
    failed=1
    echo 0
    return
  fi
  python3 -c "import json; print(json.load(open('$json'))['avg_latency'])"
}

for model in "${models[@]}"; do
  [ -z "${VLLM_BENCH_BATCHES-x}" ] && break  # set but empty: the serve runs alone
  m=${model//./_}
  prefill=$(latency "${m}_prefill2048" "$model" 1 2048 1)
  rows+=("$model prefill 2048 tokens, batch 1: $(python3 -c "print(f'{$prefill*1e3:.1f} ms, {2048/max($prefill,1e-9):.0f} tokens/s')")")
  for batch in ${VLLM_BENCH_BATCHES:-1 64}; do
    one=$(latency "${m}_b${batch}_o1" "$model" "$batch" 1024 1)
    many=$(latency "${m}_b${batch}_o129" "$model" "$batch" 1024 129)
    rows+=("$model decode at 1024 context, batch $batch: $(python3 -c "
d=($many-$one)/128
print(f'{d*1e3:.2f} ms/step, {$batch/max(d,1e-9):.1f} tokens/s')")")
  done
  if [ "${VLLM_BENCH_EAGER:-0}" = 1 ]; then
    one=$(latency "${m}_eager_b1_o1" "$model" 1 1024 1 --enforce-eager)
    many=$(latency "${m}_eager_b1_o129" "$model" 1 1024 129 --enforce-eager)
    rows+=("$model decode at 1024 context, batch 1, --enforce-eager: $(python3 -c "
d=($many-$one)/128
print(f'{d*1e3:.2f} ms/step, {1/max(d,1e-9):.1f} tokens/s')")")
  fi
done

# `vllm bench serve` against `vllm serve` on the GPU: 1024 tokens in, 128 out.
serve_model="${VLLM_SERVE_MODEL:-}"
if [ -n "$serve_model" ]; then
  port=18731
  # shellcheck disable=SC2086  # VLLM_SERVE_ARGS is a list of flags
  "$vllm" serve "$root/configs/$serve_model" --load-format dummy \
    ${VLLM_SERVE_ARGS:---max-model-len 4096} --port "$port" >"$logs/serve.log" 2>&1 &
  server=$!
  for _ in $(seq 1 180); do
    if exec 3<>"/dev/tcp/127.0.0.1/$port" 2>/dev/null; then
      printf 'GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
      status_line="$(head -n1 <&3 || true)"
      exec 3<&- 3>&-
      [[ "$status_line" == *" 200"* ]] && break
    fi
    kill -0 "$server" 2>/dev/null || break
    sleep 1
  done
  for conc in ${VLLM_SERVE_CONCURRENCY:-1 16}; do
    prompts=$((conc == 1 ? 16 : conc <= 16 ? 128 : 2 * conc))
    if timeout "${VLLM_SERVE_TIMEOUT:-900}" "$vllm" bench serve --base-url "http://127.0.0.1:$port" \
        --model "$root/configs/$serve_model" --dataset-name random --random-input-len 1024 \
        --random-output-len 128 --num-prompts "$prompts" --max-concurrency "$conc" \
        --disable-tqdm --save-result "$logs/serve_c$conc.json" >"$logs/serve_c$conc.log" 2>&1; then
      rows+=("$serve_model serve 1024/128 concurrency $conc: $(python3 -c "
import json; r = json.load(open('$logs/serve_c$conc.json'))
print(f\"TTFT {r['median_ttft_ms']:.1f} ms, TPOT {r['median_tpot_ms']:.2f} ms, {r['output_throughput']:.0f} output tok/s, {r['total_token_throughput']:.0f} total tok/s\")")")
    else
      echo "FAILED: serve concurrency $conc" >&2
      tail -20 "$logs/serve_c$conc.log" >&2
      failed=1
    fi
  done
  kill "$server" 2>/dev/null
  wait "$server" 2>/dev/null
fi

echo
echo "== figures"
printf '%s\n' "${rows[@]}" | tee "$final/figures.txt"
tar czf "$final/bench_logs.tar.gz" -C "$logs" .
exit $failed
