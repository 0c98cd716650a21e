#!/usr/bin/env bash
# End-to-end tests of `vllm serve`'s operational side, each with its own server on the tiny
# Qwen3.5 MoE model of run.sh:
#   1. A model given as a Hugging Face id, found in a Hugging Face cache made here
#      (HF_HUB_CACHE); a missing id and an unknown flag are refused with clear errors.
#   2. That server runs with --root-path, CORS flags, request logging, X-Request-Id headers
#      and vLLM flags that have no effect (each warned about once): test_http_ops.mjs.
#   3. TLS (--ssl-keyfile / --ssl-certfile, a certificate made with openssl): curl and the
#      openai client over https.
#   4. The engine dying (the VLLM_TEST_ENGINE_FAIL_AFTER_STEPS test hook): requests get 500,
#      /health 503 (VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1 keeps the server up for that), and the
#      process exits 1 -- by itself without that variable.
#   5. Tensor parallelism (-tp 2 --device cpu): the same greedy text as `vllm generate` on one
#      rank; then its worker process is killed mid-stream: /health answers 503 within
#      seconds and the server exits 1 (by itself, or on SIGTERM when kept alive).
#
#   bash tests/e2e/run_ops.sh            (VLLM_BUILD_DIR=build by default)
# Needs node + tests/e2e/node_modules (scripts/fetch_e2e_deps.sh), curl, jq and openssl.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
build=${VLLM_BUILD_DIR:-build}
bin="$root/$build/src/cli/vllm"
[ -x "$bin" ] || { echo "e2e-ops: $bin not built"; exit 1; }
[ -d tests/e2e/node_modules/openai ] || { echo "e2e-ops: run scripts/fetch_e2e_deps.sh first"; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/vllm-e2e-ops.XXXXXX")
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -9 "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
status=0
pass() { echo "e2e-ops: PASS $*"; }
fail() { echo "e2e-ops: FAIL $*"; status=1; }

# A Hugging Face cache holding the tiny model as "vllm-test/tiny-moe" at a made-up commit.
commit=0123456789abcdef0123456789abcdef01234567
snapshot="$work/hf/models--vllm-test--tiny-moe/snapshots/$commit"
mkdir -p "$snapshot" "$work/hf/models--vllm-test--tiny-moe/refs"
echo "$commit" >"$work/hf/models--vllm-test--tiny-moe/refs/main"
for f in tests/golden/qwen3_5_moe/*; do
  case "$(basename "$f")" in reference*) continue ;; esac
  ln -s "$root/$f" "$snapshot/"
done
cp tests/e2e/fixtures/tiny_qwen3_tokenizer/tokenizer.json tests/e2e/fixtures/tiny_qwen3_tokenizer/tokenizer_config.json "$snapshot/"
export HF_HUB_CACHE="$work/hf"
engine_flags=(--max-model-len 512 --max-num-seqs 16 --kv-cache-memory-bytes 67108864)

# Starts the server with the given arguments (log in $log); sets server_pid and base.
start_server() {
  log="$work/server-$1.log"; shift
  : >"$log"  # exists before the server opens it: the port poll reads it at once
  "$bin" serve "$@" --host 127.0.0.1 --port 0 "${engine_flags[@]}" >"$log" 2>&1 &
  server_pid=$!
  port=""
  for _ in $(seq 1 600); do
    port=$(sed -n 's|.*listening on https\{0,1\}://127.0.0.1:\([0-9]*\).*|\1|p' "$log" | head -n1)
    [ -n "$port" ] && break
    kill -0 "$server_pid" 2>/dev/null || { echo "e2e-ops: server exited"; cat "$log"; exit 1; }
    sleep 0.1
  done
  [ -n "$port" ] || { echo "e2e-ops: server did not start"; cat "$log"; exit 1; }
}
stop_server() {
  kill -TERM "$server_pid"
  local code=0
  wait "$server_pid" || code=$?
  server_pid=""
  return $code
}

# 1. Refusals: a Hugging Face id not in the cache, an unknown flag.
out=$("$bin" serve vllm-test/not-cached --port 0 2>&1) && code=0 || code=$?
if [ "$code" == 2 ] && grep -q "models--vllm-test--not-cached/refs/main does not exist" <<<"$out"; then
  pass "a Hugging Face id missing from the cache names where it looked (exit 2)"
else
  fail "missing Hugging Face id: exit $code: $out"
fi
out=$("$bin" serve vllm-test/tiny-moe --no-such-flag 2>&1) && code=0 || code=$?
if [ "$code" != 0 ] && grep -q "no-such-flag" <<<"$out"; then
  pass "an unknown flag is refused (exit $code)"
else
  fail "unknown flag: exit $code: $out"
fi

# 2. The operational surface, on the model found by its Hugging Face id.
export VLLM_E2E_KEY="ops-secret" VLLM_E2E_MODEL="vllm-test/tiny-moe" VLLM_E2E_MODEL_DIR="$snapshot"
export VLLM_E2E_BIN="$bin" VLLM_E2E_MAX_MODEL_LEN=512
VLLM_HTTP_TIMEOUT_KEEP_ALIVE=1 start_server ops vllm-test/tiny-moe --api-key "$VLLM_E2E_KEY" \
  --root-path /llm --allowed-origins '["http://ok.example"]' --allow-credentials \
  --enable-log-requests --enable-log-outputs --max-log-len 40 --enable-request-id-headers \
  --swap-space 4 --disable-log-stats --enable-chunked-prefill --disable-uvicorn-access-log
export VLLM_E2E_BASE="http://127.0.0.1:$port"
if node tests/e2e/test_http_ops.mjs; then pass "test_http_ops.mjs"; else fail "test_http_ops.mjs"; fi
for line in "--swap-space has no effect" "--disable-log-stats has no effect" \
            "--enable-chunked-prefill has no effect" "--disable-uvicorn-access-log has no effect" \
            "found in the Hugging Face cache" "Received request cmpl-" "params: SamplingParams(n=1" \
            "Added request cmpl-" "Aborted request cmpl-" "Generated response cmpl-"; do
  if grep -qF -- "$line" "$log"; then pass "log has '$line'"; else fail "log lacks '$line'"; fi
done
code=0; stop_server || code=$?
[ "$code" == 0 ] && pass "SIGTERM: exit 0" || fail "SIGTERM exit status $code"

# 3. TLS.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj "/CN=127.0.0.1" \
  -addext "subjectAltName=IP:127.0.0.1" -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
start_server tls vllm-test/tiny-moe --ssl-keyfile "$work/key.pem" --ssl-certfile "$work/cert.pem"
tls_base="https://127.0.0.1:$port"
health=$(curl -sS --cacert "$work/cert.pem" -o /dev/null -w '%{http_code}' "$tls_base/health" || true)
sse=$(curl -sS -N --cacert "$work/cert.pem" -H "Content-Type: application/json" "$tls_base/v1/completions" \
  -d '{"prompt": "over TLS", "max_tokens": 6, "temperature": 0, "stream": true}' || true)
plain=$(curl -sS -m 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" 2>/dev/null || true)
chat=$(NODE_EXTRA_CA_CERTS="$work/cert.pem" VLLM_TLS_BASE="$tls_base" node tests/e2e/test_tls_client.mjs 2>&1 || true)
if [ "$health" == 200 ] && [ "$(grep -v '^$' <<<"$sse" | tail -n1)" == "data: [DONE]" ] &&
   [ "$plain" != 200 ] && grep -qE '^(length|stop) (length|stop)$' <<<"$chat"; then
  pass "TLS: curl /health and a stream, the openai client's chat and stream; plain HTTP refused"
else
  fail "TLS: health=$health plain=$plain chat=$chat sse=$(tail -c 200 <<<"$sse")"
fi
stop_server || true

# 4. The engine dies on its 3rd step: 500s and /health 503 while kept alive, then exit 1.
VLLM_TEST_ENGINE_FAIL_AFTER_STEPS=3 VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1 start_server dead-kept vllm-test/tiny-moe
dead_base="http://127.0.0.1:$port"
health_before=$(curl -sS -o /dev/null -w '%{http_code}' "$dead_base/health")
body=$(curl -sS -w '\n%{http_code}' -H "Content-Type: application/json" "$dead_base/v1/completions" \
  -d '{"prompt": "die", "max_tokens": 20, "ignore_eos": true}')
health_after=$(curl -sS -o /dev/null -w '%{http_code}' "$dead_base/health")
ping_after=$(curl -sS -o /dev/null -w '%{http_code}' "$dead_base/ping")
code=0; stop_server || code=$?
if [ "$health_before" == 200 ] && [ "$(tail -n1 <<<"$body")" == 500 ] &&
   [ "$(head -n1 <<<"$body" | jq -r .error.type)" == InternalServerError ] &&
   [ "$health_after" == 503 ] && [ "$ping_after" == 503 ] && [ "$code" == 1 ]; then
  pass "engine death: 500, /health and /ping 503, exit 1 on SIGTERM"
else
  fail "engine death (kept alive): health $health_before -> $health_after, ping $ping_after, exit $code, body $body"
fi
VLLM_TEST_ENGINE_FAIL_AFTER_STEPS=2 start_server dead vllm-test/tiny-moe
dead_base="http://127.0.0.1:$port"
body=$(curl -sS -w '\n%{http_code}' -H "Content-Type: application/json" "$dead_base/v1/completions" \
  -d '{"prompt": "die", "max_tokens": 20, "ignore_eos": true, "stream": true}' || true)
code=0
for _ in $(seq 1 300); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
wait "$server_pid" || code=$?
server_pid=""
if grep -q '^data: {"error"' <<<"$body" && [ "$code" == 1 ]; then
  pass "engine death: the stream ends with an error event, the server exits 1 by itself"
else
  fail "engine death: exit $code, body $body"; tail -n 5 "$log"
fi

# 5. Tensor parallelism: rank 0 serves, one worker process holds the other shard.
worker_pid() { sed -n 's|.*started 1 worker processes (pids \([0-9]*\)).*|\1|p' "$log" | head -n1; }
# Waits up to 10 s for `cmd` to succeed; prints the milliseconds it took.
wait_for() {
  local start
  start=$(date +%s%N)
  for _ in $(seq 1 100); do
    "$@" && { echo $((($(date +%s%N) - start) / 1000000)); return 0; }
    sleep 0.1
  done
  return 1
}
model_dir="$snapshot"
reference=$("$bin" generate --model "$model_dir" --device cpu --prompt "Tensor parallel" \
  --max-tokens 12 --temperature 0 --ignore-eos --json 2>/dev/null | jq -r .text)
VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1 start_server tp-kept vllm-test/tiny-moe -tp 2 --device cpu
tp_base="http://127.0.0.1:$port"
text=$(curl -sS -H "Content-Type: application/json" "$tp_base/v1/completions" \
  -d '{"prompt": "Tensor parallel", "max_tokens": 12, "temperature": 0, "ignore_eos": true}' |
  jq -r '.choices[0].text')
wpid=$(worker_pid)
# A long stream, and the worker killed while it runs.
curl -sS -N -H "Content-Type: application/json" "$tp_base/v1/completions" \
  -d '{"prompt": "die", "max_tokens": 400, "ignore_eos": true, "stream": true}' >"$work/tp-stream.txt" &
curl_pid=$!
sleep 0.3
[ -n "$wpid" ] && kill -9 "$wpid"
unhealthy() { [ "$(curl -sS -o /dev/null -w '%{http_code}' "$tp_base/health")" == 503 ]; }
took=$(wait_for unhealthy) || took=none
wait "$curl_pid" || true
code=0; stop_server || code=$?
if [ -n "$wpid" ] && [ -n "$reference" ] && [ "$text" == "$reference" ] && [ "$took" != none ] &&
   [ "$code" == 1 ] &&
   grep -q "tensor-parallel worker rank 1 (pid $wpid) was killed by signal 9" "$log"; then
  pass "tensor parallelism: TP=2 text equals TP=1; a killed worker: /health 503 after ${took} ms, exit 1"
else
  fail "tensor parallelism: worker $wpid, text '$text' vs '$reference', 503 after $took ms, exit $code"
  tail -n 5 "$log"
fi
start_server tp-dead vllm-test/tiny-moe -tp 2 --device cpu
wpid=$(worker_pid)
[ -n "$wpid" ] && kill -9 "$wpid"
gone() { ! kill -0 "$server_pid" 2>/dev/null; }
took=$(wait_for gone) || took=none
code=0
wait "$server_pid" || code=$?
server_pid=""
if [ -n "$wpid" ] && [ "$took" != none ] && [ "$code" == 1 ]; then
  pass "tensor parallelism: an idle server whose worker is killed exits 1 by itself after ${took} ms"
else
  fail "tensor parallelism (idle): worker $wpid, exit $code after $took ms"; tail -n 5 "$log"
fi

[ $status == 0 ] && echo "e2e-ops: all passed"
exit $status
