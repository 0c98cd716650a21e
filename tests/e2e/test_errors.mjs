// The malformed-request battery: every case must get its 4xx status and an OpenAI-shaped
// error body {"error": {"message", "type", "param", "code"}}, and the server must keep
// serving (checked after every case with a real request at the end, and /health between).
import { base, apiKey, model, check, equal, finish, http } from "./lib.mjs";

const maxModelLen = Number(process.env.VLLM_E2E_MAX_MODEL_LEN ?? 512);
const maxRequestBytes = Number(process.env.VLLM_E2E_MAX_REQUEST_BYTES ?? 1048576);
const user = [{ role: "user", content: "hi" }];
const tools = [{ type: "function", function: { name: "f", parameters: { type: "object", properties: {} } } }];
const completions = "/v1/completions", chat = "/v1/chat/completions";

// [name, method, path, body (object, or string sent raw), expected status, options]
const cases = [
  ["malformed JSON", "POST", completions, "{\"prompt\": ", 400],
  ["JSON array body", "POST", completions, "[1, 2]", 400],
  ["empty body", "POST", completions, "", 400],
  ["invalid UTF-8", "POST", completions, Buffer.from([0x7b, 0x22, 0x70, 0x72, 0x6f, 0x6d, 0x70, 0x74, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d]), 400],
  ["missing prompt", "POST", completions, { model }, 400],
  ["prompt of wrong type", "POST", completions, { model, prompt: 42 }, 400],
  ["prompt list of mixed types", "POST", completions, { model, prompt: ["a", 1] }, 400],
  ["max_tokens as string", "POST", completions, { model, prompt: "x", max_tokens: "5" }, 400],
  ["max_tokens 0", "POST", completions, { model, prompt: "x", max_tokens: 0 }, 400],
  ["max_tokens negative", "POST", completions, { model, prompt: "x", max_tokens: -3 }, 400],
  ["max_tokens beyond the context", "POST", completions, { model, prompt: "x", max_tokens: 100000 }, 400],
  ["prompt longer than max_model_len", "POST", completions, { model, prompt: Array(maxModelLen + 8).fill(5) }, 400],
  ["token id outside the vocabulary", "POST", completions, { model, prompt: [1, 2, 99999] }, 400],
  ["negative token id", "POST", completions, { model, prompt: [1, -2] }, 400],
  ["temperature negative", "POST", completions, { model, prompt: "x", temperature: -1 }, 400],
  ["temperature as string", "POST", completions, { model, prompt: "x", temperature: "hot" }, 400],
  ["top_p above 1", "POST", completions, { model, prompt: "x", top_p: 1.5 }, 400],
  ["top_k -5", "POST", completions, { model, prompt: "x", top_k: -5 }, 400],
  ["min_p 2", "POST", completions, { model, prompt: "x", min_p: 2 }, 400],
  ["n 0", "POST", completions, { model, prompt: "x", n: 0 }, 400],
  ["presence_penalty 3", "POST", completions, { model, prompt: "x", presence_penalty: 3 }, 400],
  ["logprobs above the limit", "POST", completions, { model, prompt: "x", logprobs: 50 }, 400],
  ["seed as string", "POST", completions, { model, prompt: "x", seed: "7" }, 400],
  ["stop of wrong type", "POST", completions, { model, prompt: "x", stop: 5 }, 400],
  ["logit_bias with a bad key", "POST", completions, { model, prompt: "x", logit_bias: { abc: 1 } }, 400],
  ["stream_options without stream", "POST", completions, { model, prompt: "x", stream_options: { include_usage: true } }, 400],
  ["suffix", "POST", completions, { model, prompt: "x", suffix: "y" }, 400],
  ["unknown model (completions)", "POST", completions, { model: "no-such-model", prompt: "x" }, 404],
  ["unknown model (chat)", "POST", chat, { model: "no-such-model", messages: user }, 404],
  ["no API key", "POST", completions, { model, prompt: "x" }, 401, { auth: false }],
  ["wrong API key", "GET", "/v1/models", undefined, 401, { auth: false, headers: { authorization: "Bearer wrong" } }],
  ["oversized body", "POST", completions, JSON.stringify({ model, prompt: "x".repeat(maxRequestBytes + 1024) }), 413],
  ["chat without messages", "POST", chat, { model }, 400],
  ["chat messages not a list", "POST", chat, { model, messages: "hi" }, 400],
  ["chat empty messages", "POST", chat, { model, messages: [] }, 400],
  ["chat message without role", "POST", chat, { model, messages: [{ content: "hi" }] }, 400],
  ["chat image content", "POST", chat, { model, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "http://x" } }] }] }, 400],
  ["chat logprobs of wrong type", "POST", chat, { model, messages: user, logprobs: 2 }, 400],
  ["chat top_logprobs without logprobs", "POST", chat, { model, messages: user, top_logprobs: 2 }, 400],
  ["chat top_logprobs above the limit", "POST", chat, { model, messages: user, logprobs: true, top_logprobs: 30 }, 400],
  ["chat response_format json_schema with an unsupported keyword", "POST", chat, { model, messages: user, response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object", patternProperties: {} } } } }, 400],
  ["completions structured_outputs regex that does not parse", "POST", completions, { model, prompt: "x", structured_outputs: { regex: "a(b" } }, 400],
  ["completions structured_outputs grammar that does not parse", "POST", completions, { model, prompt: "x", structured_outputs: { grammar: "root ::= \"a" } }, 400],
  ["completions two structured output constraints", "POST", completions, { model, prompt: "x", structured_outputs: { regex: "a", choice: ["b"] } }, 400],
  ["chat tool_choice required beside response_format", "POST", chat, { model, messages: user, tools, tool_choice: "required", response_format: { type: "json_object" } }, 400],
  ["chat tool_choice naming an unknown tool", "POST", chat, { model, messages: user, tools, tool_choice: { type: "function", function: { name: "g" } } }, 400],
  ["chat tool_choice without tools", "POST", chat, { model, messages: user, tool_choice: "auto" }, 400],
  ["chat both continue_final_message and add_generation_prompt", "POST", chat, { model, messages: user, continue_final_message: true }, 400],
  ["chat max_completion_tokens beyond the context", "POST", chat, { model, messages: user, max_completion_tokens: maxModelLen }, 400],
  ["chat n of wrong type", "POST", chat, { model, messages: user, n: "2" }, 400],
  ["tokenize without prompt", "POST", "/tokenize", { model }, 400],
  ["detokenize an unknown id", "POST", "/detokenize", { model, tokens: [1, 99999] }, 400],
  ["unknown route", "POST", "/v1/embeddings", { model, input: "x" }, 404],
  ["GET on a POST endpoint", "GET", completions, undefined, 405],
];

let shaped = 0;
for (const [name, method, path, body, status, options = {}] of cases) {
  const raw = typeof body === "string" || Buffer.isBuffer(body);
  let res;
  try {
    res = await http(method, path, { body, raw, ...options });
  } catch (e) {
    check(false, `${name}: request failed`, String(e));
    continue;
  }
  const statusOk = check(res.status === status, `${name}: status`, `got ${res.status}, want ${status}: ${res.text.slice(0, 200)}`);
  const e = res.json?.error;
  const ok = e && typeof e.message === "string" && e.message.length > 0 && typeof e.type === "string" &&
             "param" in e && e.code === status;
  if (check(ok, `${name}: OpenAI error body`, res.text.slice(0, 300)) && statusOk) shaped++;
  if (process.env.VLLM_E2E_VERBOSE) console.log(`  ${res.status} ${name}: ${e?.type}: ${e?.message}`);
  check((await http("GET", "/health", { auth: false })).status === 200, `${name}: still healthy`);
}

// The server still serves real requests.
const after = await http("POST", completions, { body: { model, prompt: "still there?", max_tokens: 3, temperature: 0 } });
equal(after.status, 200, "a valid request after the battery");
equal(after.json?.choices?.[0]?.finish_reason !== undefined, true, "it has a choice");
console.log(`error battery: ${cases.length} cases, ${shaped} with the right status and an OpenAI error body`);
check(cases.length >= 30, "at least 30 cases");
finish("test_errors");
