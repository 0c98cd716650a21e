#!/usr/bin/env bash
# The server at scale, on the demo model (models/qwen35-moe-demo, CPU): starts `vllm serve`
# with room for 256 requests at a time, then runs
#   test_load.mjs         2,000 concurrent connections (half streaming, a quarter hanging up)
#   test_slow_reader.mjs  clients reading one byte per second beside normal ones
# and stops the server with SIGTERM (exit 0 expected). The measured figures (threads, memory,
# durations) are printed; VLLM_LOAD_SUMMARY=FILE also writes test_load's as JSON.
#
#   bash tests/e2e/run_load.sh             (VLLM_BUILD_DIR=build by default)
#   VLLM_BUILD_DIR=build-asan bash tests/e2e/run_load.sh
# Needs node + tests/e2e/node_modules (scripts/fetch_e2e_deps.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
build=${VLLM_BUILD_DIR:-build}
bin="$root/$build/src/cli/vllm"
[ -x "$bin" ] || { echo "e2e-load: $bin not built"; exit 1; }
[ -d tests/e2e/node_modules/openai ] || { echo "e2e-load: run scripts/fetch_e2e_deps.sh first"; exit 1; }
# 2,000 client sockets in one process (and as many in the server, which raises its own limit).
ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)"

work=$(mktemp -d "${TMPDIR:-/tmp}/vllm-e2e-load.XXXXXX")
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -9 "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

model=models/qwen35-moe-demo
max_model_len=1024
log="$work/server.log"
: >"$log"  # exists before the server opens it: the port poll reads it at once
"$bin" serve "$model" --host 127.0.0.1 --port 0 --max-num-seqs 256 --max-model-len $max_model_len \
  --kv-cache-memory-bytes 268435456 >"$log" 2>&1 &
server_pid=$!
port=""
for _ in $(seq 1 600); do
  port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$log" | head -n1)
  [ -n "$port" ] && break
  kill -0 "$server_pid" 2>/dev/null || { echo "e2e-load: server exited"; cat "$log"; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "e2e-load: server did not start"; cat "$log"; exit 1; }

export VLLM_E2E_BASE="http://127.0.0.1:$port" VLLM_E2E_KEY="unused" VLLM_E2E_MODEL="$model"
export VLLM_E2E_MODEL_DIR="$root/$model" VLLM_E2E_BIN="$bin" VLLM_E2E_MAX_MODEL_LEN=$max_model_len
export VLLM_LOAD_SERVER_PID=$server_pid
status=0
run() {
  local started=$SECONDS
  if "$@"; then echo "e2e-load: PASS $* ($((SECONDS - started))s)"; else echo "e2e-load: FAIL $*"; status=1; fi
}
run node tests/e2e/test_load.mjs
run node tests/e2e/test_slow_reader.mjs

kill -TERM "$server_pid"
code=0
wait "$server_pid" || code=$?
server_pid=""
if [ "$code" == 0 ]; then echo "e2e-load: PASS SIGTERM: exit 0"; else echo "e2e-load: FAIL SIGTERM: exit $code"; status=1; fi
if grep -q "ERROR: AddressSanitizer\|runtime error:\|ERROR: LeakSanitizer" "$log"; then
  echo "e2e-load: FAIL sanitizer report:"; grep -A 30 "Sanitizer\|runtime error" "$log" | head -n 60; status=1
fi
[ $status == 0 ] && echo "e2e-load: all passed" || { echo "e2e-load: server log tail:"; tail -n 30 "$log"; }
exit $status
