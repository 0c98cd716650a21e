// The server's operational surface, over real sockets: /ping and HEAD /health, keep-alive
// (many requests on one connection), --root-path, CORS (--allowed-origins,
// --allow-credentials), --enable-request-id-headers, a non-streaming client that hangs up
// having its request aborted, and an idle keep-alive connection closed by the server
// (VLLM_HTTP_TIMEOUT_KEEP_ALIVE). run_ops.sh starts the server with those flags.
import http from "node:http";
import net from "node:net";
import { base, apiKey, model, check, equal, finish, metric } from "./lib.mjs";

const url = new URL(base);
const auth = { authorization: `Bearer ${apiKey}` };

// One request on `agent`; resolves with status, headers, body and whether the socket was reused.
function request(method, path, { headers = {}, body, agent } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: url.hostname, port: url.port, method, path, agent,
                               headers: { ...headers, ...(body ? { "content-type": "application/json" } : {}) } },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (d) => (text += d));
        res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, text, reused: req.reusedSocket }));
      });
    req.on("error", reject);
    if (body) req.write(JSON.stringify(body));
    req.end();
  });
}

// /ping and /health.
for (const method of ["GET", "POST"]) {
  equal((await request(method, "/ping")).status, 200, `${method} /ping`);
}
const head = await request("HEAD", "/health");
equal([head.status, head.text], [200, ""], "HEAD /health: 200, no body");
equal((await request("PUT", "/health")).status, 405, "PUT /health is 405");

// Keep-alive: twenty requests over one connection.
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
let reused = 0;
for (let i = 0; i < 20; i++) {
  const r = await request("POST", "/v1/completions", { agent, headers: auth,
    body: { model, prompt: `keep alive ${i}`, max_tokens: 2, temperature: 0 } });
  check(r.status === 200, `keep-alive request ${i}`, r.text);
  if (r.reused) reused++;
}
equal(reused, 19, "19 of 20 requests reused the first connection");
agent.destroy();

// --root-path /llm: routes answer with and without the prefix.
for (const path of ["/llm/v1/models", "/v1/models"]) {
  const r = await request("GET", path, { headers: auth });
  equal(r.status, 200, `GET ${path}`);
  equal(JSON.parse(r.text).data[0].id, model, `${path} names the served model`);
}

// CORS: a preflight for an allowed origin (no API key needed), one for another origin, and
// the headers on an ordinary response.
const preflight = await request("OPTIONS", "/llm/v1/chat/completions", { headers: {
  origin: "http://ok.example", "access-control-request-method": "POST",
  "access-control-request-headers": "authorization,content-type" } });
equal(preflight.status, 200, "allowed preflight");
equal(preflight.headers["access-control-allow-origin"], "http://ok.example", "preflight echoes the origin");
equal(preflight.headers["access-control-allow-credentials"], "true", "preflight allows credentials");
equal(preflight.headers["access-control-allow-headers"], "authorization,content-type", "preflight mirrors headers");
const denied = await request("OPTIONS", "/v1/models", { headers: {
  origin: "http://evil.example", "access-control-request-method": "GET" } });
equal([denied.status, denied.text], [400, "Disallowed CORS origin"], "preflight from another origin");
const simple = await request("GET", "/v1/models", { headers: { ...auth, origin: "http://ok.example" } });
equal(simple.headers["access-control-allow-origin"], "http://ok.example", "simple response names the origin");
equal(simple.headers.vary, "Origin", "simple response varies on Origin");

// X-Request-Id: echoed when sent, made up otherwise.
equal((await request("GET", "/health", { headers: { "x-request-id": "abc-123" } })).headers["x-request-id"],
      "abc-123", "X-Request-Id echoed");
check(/^[0-9a-f]{32}$/.test((await request("GET", "/health")).headers["x-request-id"] ?? ""),
      "X-Request-Id made up");

// A non-streaming request whose client hangs up is aborted, its blocks freed.
const abortsBefore = await metric("vllm:request_success_total", 'finished_reason="abort"');
const hungUp = http.request({ host: url.hostname, port: url.port, method: "POST", path: "/v1/completions",
                              headers: { ...auth, "content-type": "application/json" } });
hungUp.on("error", () => {});
hungUp.end(JSON.stringify({ model, prompt: "never read", max_tokens: 480, ignore_eos: true }));
let running = 0;
for (let t = 0; t < 400 && running !== 1; t++) {
  running = await metric("vllm:num_requests_running");
  if (running !== 1) await new Promise((r) => setTimeout(r, 25));
}
equal(running, 1, "the non-streaming request runs");
hungUp.destroy();
let after = null;
for (let t = 0; t < 400; t++) {
  after = await Promise.all([metric("vllm:num_requests_running"), metric("vllm:kv_cache_usage_perc"),
                             metric("vllm:request_success_total", 'finished_reason="abort"')]);
  if (after[0] === 0 && after[1] === 0 && after[2] === abortsBefore + 1) break;
  await new Promise((r) => setTimeout(r, 25));
}
equal(after, [0, 0, abortsBefore + 1], "hung-up non-streaming request aborted, KV cache free");
const generated = await metric("vllm:request_generation_tokens_sum");
check(Number.isFinite(generated), "generation tokens are counted");

// An idle keep-alive connection is closed by the server after VLLM_HTTP_TIMEOUT_KEEP_ALIVE.
const closedByServer = await new Promise((resolve) => {
  const socket = net.connect(Number(url.port), url.hostname, () => {
    socket.write("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  });
  let text = "";
  socket.on("data", (d) => (text += d));
  socket.on("end", () => resolve(text.startsWith("HTTP/1.1 200")));
  socket.on("error", () => resolve(false));
  setTimeout(() => { socket.destroy(); resolve(false); }, 30000);
});
check(closedByServer, "an idle keep-alive connection is closed by the server");

// The phase-time and per-step metrics are there.
for (const name of ["vllm:request_queue_time_seconds_count", "vllm:request_prefill_time_seconds_count",
                    "vllm:request_decode_time_seconds_count", "vllm:request_inference_time_seconds_count",
                    "vllm:iteration_tokens_total_count"]) {
  check((await metric(name)) > 0, `${name} counts requests`);
}
finish("test_http_ops");
