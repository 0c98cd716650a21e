#!/usr/bin/env bash
# TPOT with and without structured outputs: starts `vllm serve MODEL_DIR` on a free port and
# runs `vllm bench serve` (random dataset, --max-concurrency C) three times -- unconstrained,
# structured_outputs json_object, and the 20-property JSON Schema of
# benchmarks/data/structured_schema_20.json -- saving each result JSON in OUT_DIR, then prints
# TPOT, ITL and output throughput side by side.
#
#   scripts/bench_structured_tpot.sh OUT_DIR MODEL_DIR [BUILD_DIR] [-- extra `vllm serve` flags]
#
# Env: CONCURRENCY (16), NUM_PROMPTS (64), INPUT_LEN (128), OUTPUT_LEN (128). The random
# dataset sends ignore_eos, so unconstrained outputs have exactly OUTPUT_LEN tokens; a
# constrained one may end earlier, when its JSON is complete (its grammar then allows only
# EOS). MODEL_DIR needs tokenizer.json (the prompts are built with it).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -ge 2 ] || { echo "usage: $0 OUT_DIR MODEL_DIR [BUILD_DIR] [-- serve flags]" >&2; exit 2; }
results="$1"
model="$2"
shift 2
build="$root/build"
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
  build="$1"
  shift
fi
[ $# -gt 0 ] && [ "$1" == "--" ] && shift
vllm="$build/src/cli/vllm"
[ -x "$vllm" ] || { echo "bench_structured_tpot: $vllm not built" >&2; exit 2; }
concurrency=${CONCURRENCY:-16}
num_prompts=${NUM_PROMPTS:-64}
input_len=${INPUT_LEN:-128}
output_len=${OUTPUT_LEN:-128}
mkdir -p "$results"

log="$results/server.log"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT
"$vllm" serve "$model" --host 127.0.0.1 --port 0 --served-model-name bench \
  --max-num-seqs "$concurrency" "$@" >"$log" 2>&1 &
server_pid=$!
port=""
for _ in $(seq 1 3000); do
  port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$log" | head -n1)
  [ -n "$port" ] && break
  kill -0 "$server_pid" 2>/dev/null || { echo "bench_structured_tpot: server exited" >&2; cat "$log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "bench_structured_tpot: server did not start" >&2; exit 1; }

schema=$(tr -d '\n' <"$root/benchmarks/data/structured_schema_20.json")
run() {
  local name="$1" extra="$2"
  "$vllm" bench serve --base-url "http://127.0.0.1:$port" --model bench --tokenizer "$model" \
    --dataset-name random --random-input-len "$input_len" --random-output-len "$output_len" \
    --num-prompts "$num_prompts" --max-concurrency "$concurrency" --temperature 1 --seed 1 \
    --disable-tqdm --extra-body "$extra" --save-result "$results/$name.json" >"$results/$name.txt" 2>&1
}
run unconstrained '{}'
run json_object '{"structured_outputs": {"json_object": true}}'
run schema_20 "{\"structured_outputs\": {\"json\": $schema}}"

printf '| run | mean TPOT ms | median TPOT ms | p99 TPOT ms | mean ITL ms | output tok/s | output tokens |\n'
printf '|---|---|---|---|---|---|---|\n'
for name in unconstrained json_object schema_20; do
  jq -r --arg n "$name" '"| \($n) | \(.mean_tpot_ms|.*100|round/100) | \(.median_tpot_ms|.*100|round/100) | \(.p99_tpot_ms|.*100|round/100) | \(.mean_itl_ms|.*100|round/100) | \(.output_throughput|.*10|round/10) | \(.total_output_tokens) |"' \
    "$results/$name.json"
done
