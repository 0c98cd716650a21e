#!/usr/bin/env bash
# curl against `vllm serve`: a completion, a chat completion and their streamed forms, raw
# SSE framing checked ("data: {...}" events, "data: [DONE]" last), texts equal to
# `vllm generate --json`. Environment as tests/e2e/lib.mjs describes.
set -euo pipefail
fail=0
pass=0
expect() {  # expect WHAT GOT WANT
  if [ "$2" == "$3" ]; then pass=$((pass + 1)); else echo "FAIL: $1: got [$2], want [$3]"; fail=1; fi
}
auth=(-H "Authorization: Bearer $VLLM_E2E_KEY" -H "Content-Type: application/json")
prompt="Hello curl"
want=$("$VLLM_E2E_BIN" generate --kv-cache-memory-bytes 67108864 --max-model-len "$VLLM_E2E_MAX_MODEL_LEN" --model "$VLLM_E2E_MODEL_DIR" --prompt "$prompt" --max-tokens 8 \
        --temperature 0 --json | jq -r .text)

body=$(curl -sS "${auth[@]}" "$VLLM_E2E_BASE/v1/completions" \
  -d "{\"model\": \"$VLLM_E2E_MODEL\", \"prompt\": \"$prompt\", \"max_tokens\": 8, \"temperature\": 0}")
expect "curl completion text" "$(jq -r '.choices[0].text' <<<"$body")" "$want"
expect "curl completion usage" "$(jq -r '.usage.completion_tokens' <<<"$body")" \
  "$("$VLLM_E2E_BIN" generate --kv-cache-memory-bytes 67108864 --max-model-len "$VLLM_E2E_MAX_MODEL_LEN" --model "$VLLM_E2E_MODEL_DIR" --prompt "$prompt" --max-tokens 8 --temperature 0 --json | jq '.token_ids | length')"

sse=$(curl -sS -N "${auth[@]}" "$VLLM_E2E_BASE/v1/completions" \
  -d "{\"model\": \"$VLLM_E2E_MODEL\", \"prompt\": \"$prompt\", \"max_tokens\": 8, \"temperature\": 0, \"stream\": true}")
expect "SSE ends with data: [DONE]" "$(grep -v '^$' <<<"$sse" | tail -n1)" "data: [DONE]"
expect "SSE events are data: lines" "$(grep -v '^$' <<<"$sse" | grep -vc '^data: ')" "0"
streamed=$(grep '^data: {' <<<"$sse" | sed 's/^data: //' | jq -j '.choices[0].text')
expect "curl streamed completion text" "$streamed" "$want"
headers=$(curl -sS -N -D - -o /dev/null "${auth[@]}" "$VLLM_E2E_BASE/v1/completions" \
  -d "{\"model\": \"$VLLM_E2E_MODEL\", \"prompt\": \"x\", \"max_tokens\": 2, \"stream\": true}")
expect "SSE content type" "$(grep -ic '^content-type: text/event-stream' <<<"$headers")" "1"

messages='[{"role": "user", "content": "Hi from curl"}]'
# (the x keeps the prompt's final newline from $(...))
chat_prompt=$(echo "{\"messages\": $messages, \"add_generation_prompt\": true}" \
  | "$VLLM_E2E_BIN" render-chat --model "$VLLM_E2E_MODEL_DIR" | jq -r .; echo x)
chat_prompt=${chat_prompt%x}
chat_prompt=${chat_prompt%$'\n'}  # jq -r's own newline
chat_want=$("$VLLM_E2E_BIN" generate --kv-cache-memory-bytes 67108864 --max-model-len "$VLLM_E2E_MAX_MODEL_LEN" --model "$VLLM_E2E_MODEL_DIR" --prompt "$chat_prompt" --max-tokens 8 \
             --temperature 0 --json | jq -r '.text')
# The streaming reasoning parser's view (lib.mjs streamedChatText); non-streaming splits at </think>.
chat_stream_want=$(jq -rn --arg t "$chat_want" '$t | if startswith("<think>") then .[7:] | sub("</think>"; "") else . end')
chat_whole_want=$(jq -rn --arg t "$chat_want" '$t | (if contains("</think>") then (split("</think>")[0] | contains("<think>")) else contains("<think>") end) as $strip | (if $strip then sub("<think>"; "") else . end) | sub("</think>"; "")')
chat=$(curl -sS "${auth[@]}" "$VLLM_E2E_BASE/v1/chat/completions" \
  -d "{\"model\": \"$VLLM_E2E_MODEL\", \"messages\": $messages, \"max_tokens\": 8, \"temperature\": 0}")
expect "curl chat text" "$(jq -j '.choices[0].message | (.reasoning_content // "") + (.content // "")' <<<"$chat")" "$chat_whole_want"
chat_sse=$(curl -sS -N "${auth[@]}" "$VLLM_E2E_BASE/v1/chat/completions" \
  -d "{\"model\": \"$VLLM_E2E_MODEL\", \"messages\": $messages, \"max_tokens\": 8, \"temperature\": 0, \"stream\": true}")
expect "chat SSE ends with [DONE]" "$(grep -v '^$' <<<"$chat_sse" | tail -n1)" "data: [DONE]"
expect "chat SSE opens with the role" "$(grep '^data: {' <<<"$chat_sse" | head -n1 | sed 's/^data: //' | jq -r '.choices[0].delta.role')" "assistant"
expect "curl streamed chat text" \
  "$(grep '^data: {' <<<"$chat_sse" | sed 's/^data: //' | jq -j '.choices[] | .delta | (.reasoning_content // "") + (.content // "")')" "$chat_stream_want"

status=$(curl -sS -o /dev/null -w '%{http_code}' "$VLLM_E2E_BASE/v1/models")
expect "curl without the API key gets 401" "$status" "401"
metrics=$(curl -sS "$VLLM_E2E_BASE/metrics")
expect "metrics has vllm:num_requests_running" "$(grep -c '^vllm:num_requests_running{model_name="'"$VLLM_E2E_MODEL"'",engine="0"}' <<<"$metrics")" "1"

echo "test_curl: $pass checks passed, $fail failed"
exit $fail
