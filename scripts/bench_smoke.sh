#!/usr/bin/env bash
# `vllm bench serve` against `vllm serve`, end to end, small: starts the server on a free
# port, waits for /health, runs the benchmark with --save-result and checks that the JSON
# has every vLLM key and the expected counts (build/tests/tools/check_bench_result), then
# stops the server with SIGTERM: it must exit 0 and its log must hold no sanitizer report
# (on a sanitizer build a leak or an error found at any point fails the run). ctest runs it
# as bench_serve_smoke.
#   scripts/bench_smoke.sh [MODEL_DIR] [BUILD_DIR]
# MODEL_DIR defaults to tests/golden/qwen3 (no tokenizer.json: the prompts go as token ids);
# BUILD_DIR to build. Needs the vllm and check_bench_result targets built.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model="${1:-$root/tests/golden/qwen3}"
build="${2:-$root/build}"
vllm="$build/src/cli/vllm"
check="$build/tests/tools/check_bench_result"
num_prompts=${BENCH_SMOKE_PROMPTS:-8}
input_len=16
output_len=8
for f in "$vllm" "$check"; do
  [ -x "$f" ] || { echo "bench_smoke: $f not built" >&2; exit 2; }
done

work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# A free port: ask the kernel for one, unless BENCH_SMOKE_PORT says.
port="${BENCH_SMOKE_PORT:-}"
if [ -z "$port" ]; then
  for candidate in $(shuf -i 20000-60000 -n 20); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then port=$candidate; break; fi
  done
fi

"$vllm" serve "$model" --port "$port" --max-model-len 256 >"$work/server.log" 2>&1 &
server_pid=$!

# Wait for GET /health -> 200 (bash's /dev/tcp: no curl needed).
healthy=0
for _ in $(seq 1 120); do
  if ! kill -0 "$server_pid" 2>/dev/null; then break; fi
  # (The braces keep 2>/dev/null to this exec: on a bare exec it would silence the script.)
  if { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null; then
    printf 'GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
    status_line="$(head -n1 <&3 || true)"
    exec 3<&- 3>&-
    if [[ "$status_line" == *" 200"* ]]; then healthy=1; break; fi
  fi
  sleep 1
done
if [ "$healthy" != 1 ]; then
  echo "bench_smoke: vllm serve did not become healthy; its log:" >&2
  cat "$work/server.log" >&2
  exit 1
fi

"$vllm" bench serve --base-url "http://127.0.0.1:$port" --model "$model" \
  --dataset-name random --random-input-len "$input_len" --random-output-len "$output_len" \
  --num-prompts "$num_prompts" --max-concurrency 4 --disable-tqdm \
  --save-result "$work/result.json"
"$check" "$work/result.json" "$num_prompts" "$output_len"

# A clean shutdown: SIGTERM drains and exits 0 (a sanitizer report at exit makes it fail).
kill -TERM "$server_pid"
server_status=0
wait "$server_pid" || server_status=$?
server_pid=""
if grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|SUMMARY: (Address|Leak|UndefinedBehavior)Sanitizer' "$work/server.log"; then
  echo "bench_smoke: the server reported sanitizer errors; its log:" >&2
  cat "$work/server.log" >&2
  exit 1
fi
if [ "$server_status" != 0 ]; then
  echo "bench_smoke: vllm serve exited with status $server_status after SIGTERM; its log:" >&2
  cat "$work/server.log" >&2
  exit 1
fi
echo "bench_smoke: vllm serve exited 0 after SIGTERM"
