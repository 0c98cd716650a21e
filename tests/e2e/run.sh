#!/usr/bin/env bash
# End-to-end tests of `vllm serve`: builds nothing. Makes a model folder from the golden
# Qwen3.5 MoE checkpoint (tests/golden/qwen3_5_moe, symlinked) plus the small Qwen3-derived
# tokenizer in tests/e2e/fixtures/, starts build/src/cli/vllm serve on 127.0.0.1 with a free
# port, waits for /health, then runs the official-client tests (test_*.mjs), the curl tests
# and finally the SIGTERM test (a stream in flight finishes, the server exits 0). On a
# sanitizer build (VLLM_BUILD_DIR=build-asan) a sanitizer report in the server's log fails
# the run, as does the non-zero exit status it causes. The server is always killed on the
# way out.
#
#   bash tests/e2e/run.sh            (VLLM_BUILD_DIR=build by default)
# Needs node + tests/e2e/node_modules (scripts/fetch_e2e_deps.sh), curl and jq.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
build=${VLLM_BUILD_DIR:-build}
bin="$root/$build/src/cli/vllm"
[ -x "$bin" ] || { echo "e2e: $bin not built"; exit 1; }
[ -d tests/e2e/node_modules/openai ] && [ -d tests/e2e/node_modules/ajv ] || { echo "e2e: run scripts/fetch_e2e_deps.sh first"; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/vllm-e2e.XXXXXX")
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -9 "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# A model folder that is not there: a clear error, exit status 2, nothing served. (With no
# model at all, serve finds the demo model like generate and chat: tests/unit/test_cli_chat.)
status=0
no_model=$(cd "$work" && "$bin" serve "$work/no-such-model" --port 0 2>&1) && no_model_status=0 || no_model_status=$?
if [ "$no_model_status" == 2 ] && grep -q "does not exist" <<<"$no_model"; then
  echo "e2e: PASS serve with a missing model folder explains itself (exit 2)"
else
  echo "e2e: FAIL serve with a missing model folder: exit $no_model_status: $no_model"; status=1
fi

model="$work/tiny-qwen3.5-moe"
mkdir -p "$model"
for f in tests/golden/qwen3_5_moe/*; do
  case "$(basename "$f")" in reference*) continue ;; esac
  ln -s "$root/$f" "$model/"
done
cp tests/e2e/fixtures/tiny_qwen3_tokenizer/tokenizer.json tests/e2e/fixtures/tiny_qwen3_tokenizer/tokenizer_config.json "$model/"

max_model_len=1024  # room for the tool definitions the chat template writes into prompts
max_request_bytes=1048576
export VLLM_E2E_KEY="e2e-secret"
export VLLM_E2E_MODEL="tiny"
export VLLM_E2E_MODEL_DIR="$model"
export VLLM_E2E_BIN="$bin"
export VLLM_E2E_MAX_MODEL_LEN=$max_model_len
export VLLM_E2E_MAX_REQUEST_BYTES=$max_request_bytes

log="$work/server.log"
: >"$log"  # exists before the server starts, so the port poll below can read it at once
"$bin" serve "$model" --host 127.0.0.1 --port 0 --served-model-name "$VLLM_E2E_MODEL" \
  --api-key "$VLLM_E2E_KEY" --max-model-len $max_model_len --max-num-seqs 96 --kv-cache-memory-bytes 67108864 \
  --max-request-bytes $max_request_bytes --enable-auto-tool-choice --tool-call-parser hermes \
  --reasoning-parser qwen3 >"$log" 2>&1 &
server_pid=$!

port=""
for _ in $(seq 1 600); do
  port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$log" | head -n1)
  [ -n "$port" ] && break
  kill -0 "$server_pid" 2>/dev/null || { echo "e2e: server exited"; cat "$log"; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "e2e: server did not start"; cat "$log"; exit 1; }
export VLLM_E2E_BASE="http://127.0.0.1:$port"
for _ in $(seq 1 100); do
  curl -sf "$VLLM_E2E_BASE/health" >/dev/null && break
  sleep 0.1
done
echo "e2e: vllm serve up on $VLLM_E2E_BASE"

run() {
  local started=$SECONDS
  if "$@"; then echo "e2e: PASS $* ($((SECONDS - started))s)"; else echo "e2e: FAIL $*"; status=1; fi
}
run node tests/e2e/test_openai.mjs
run node tests/e2e/test_errors.mjs
run node tests/e2e/test_streaming.mjs
run node tests/e2e/test_concurrency.mjs
run node tests/e2e/test_structured.mjs
run bash tests/e2e/test_curl.sh

# SIGTERM: a stream in flight completes, new connections are refused, exit status 0.
sigterm_out="$work/sigterm.sse"
curl -sS -N -H "Authorization: Bearer $VLLM_E2E_KEY" -H "Content-Type: application/json" \
  "$VLLM_E2E_BASE/v1/completions" -o "$sigterm_out" \
  -d "{\"model\": \"$VLLM_E2E_MODEL\", \"prompt\": \"last words\", \"max_tokens\": 300, \"temperature\": 0, \"ignore_eos\": true, \"stream\": true}" &
curl_pid=$!
for _ in $(seq 1 100); do
  grep -q '^data: {' "$sigterm_out" 2>/dev/null && break
  sleep 0.05
done
kill -TERM "$server_pid"
sleep 0.2
refused=0
curl -sS -m 5 -o /dev/null "$VLLM_E2E_BASE/health" 2>/dev/null || refused=1
server_status=0
wait "$server_pid" || server_status=$?
server_pid=""
wait "$curl_pid" || true
finish_reason=$(grep '^data: {' "$sigterm_out" | tail -n1 | sed 's/^data: //' | jq -r '.choices[0].finish_reason')
tokens=$(grep -c '^data: {' "$sigterm_out" || true)
echo "e2e: SIGTERM: server exit status $server_status, stream in flight ended with finish_reason=$finish_reason after $tokens chunks, [DONE]=$(grep -c '^data: \[DONE\]' "$sigterm_out"), new connection refused=$refused"
if [ "$server_status" == 0 ] && [ "$finish_reason" == "length" ] && [ "$refused" == 1 ] &&
   grep -q '^data: \[DONE\]' "$sigterm_out"; then
  echo "e2e: PASS SIGTERM drains and exits 0"
else
  echo "e2e: FAIL SIGTERM"; tail -n 20 "$log"; status=1
fi

sanitizer_report='ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|SUMMARY: (Address|Leak|UndefinedBehavior)Sanitizer'
if grep -qE "$sanitizer_report" "$log"; then
  echo "e2e: FAIL the server reported sanitizer errors:"
  grep -E -A 30 "$sanitizer_report" "$log" | head -n 80
  status=1
fi

[ $status == 0 ] && echo "e2e: all passed" || { echo "e2e: server log tail:"; tail -n 30 "$log"; }
exit $status
