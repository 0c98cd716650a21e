// The load test: VLLM_LOAD_CONNECTIONS (default 2000) concurrent connections against
// `vllm serve` on the demo model, half streaming and half not, completions and chat
// alternating; a quarter of the clients hang up at random points (streams after a few
// events, others after a random delay). Checks:
//   - every response that was read to its end equals `vllm generate` for the same request
//     alone (text, finish_reason, usage);
//   - every hang-up was aborted by the server (request_success_total{abort} rises by their
//     number) and the rest finished normally;
//   - afterwards no request runs or waits, and every KV block and state slot is free;
//   - the server's thread count never rises above its idle count (no thread per connection)
//     and its resident memory stays within VLLM_LOAD_RSS_BOUND_MB (default 1024) of idle.
// The measured threads, memory and durations are printed. run_load.sh starts the server.
import http from "node:http";
import fs from "node:fs";
import { base, model, check, equal, finish, generate, renderChat, metric, processStats } from "./lib.mjs";

const numConnections = Number(process.env.VLLM_LOAD_CONNECTIONS ?? 2000);
const serverPid = Number(process.env.VLLM_LOAD_SERVER_PID);
const rssBoundMb = Number(process.env.VLLM_LOAD_RSS_BOUND_MB ?? 1024);
const url = new URL(base);
let seed = 20251130;
const random = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);

// Distinct requests: prompts x lengths; each client sends one of them.
const texts = ["def main():", "import os\nimport sys", "class Stack:", "# read a file",
               "for i in range(10):", "def add(a, b):", "while True:", "print('hello')",
               "from collections import deque", "try:", "if __name__ == '__main__':",
               "def fibonacci(n):", "x = [1, 2, 3]", "with open('a.txt') as f:", "return None",
               "async def fetch(url):", "lambda x: x", "import numpy as np", "def __init__(self):",
               "raise ValueError('bad')"];
const lengths = [8, 12, 16];
const kinds = ["completion", "chat"];
const variants = [];
for (const text of texts) for (const maxTokens of lengths) for (const kind of kinds) variants.push({ text, maxTokens, kind });

const jobs = [];
for (let i = 0; i < numConnections; i++) {
  const stream = i % 2 === 0;
  const variant = variants[Math.floor(random() * variants.length)];
  const leaves = random() < 0.25;
  jobs.push({ i, stream, ...variant, leaves,
              leaveAfterEvents: 1 + Math.floor(random() * 8),           // streams
              leaveAfterMs: 500 + Math.floor(random() * 4000) });        // the others
}

// References: each distinct request alone through `vllm generate` (chat prompts rendered).
const prompts = variants.map((v) => v.kind === "completion" ? v.text
  : renderChat({ messages: [{ role: "user", content: v.text }], add_generation_prompt: true }));
const refs = new Map();
for (const maxTokens of lengths) {
  const idx = variants.map((v, k) => k).filter((k) => variants[k].maxTokens === maxTokens);
  const out = await generate([...idx.flatMap((k) => ["--prompt", prompts[k]]), "--max-tokens", String(maxTokens),
                              "--temperature", "0", "--ignore-eos"]);
  idx.forEach((k, n) => refs.set(k, out[n]));
}
const refOf = (job) => refs.get(variants.findIndex((v) => v.text === job.text && v.maxTokens === job.maxTokens && v.kind === job.kind));

const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });

function send(job) {
  const path = job.kind === "completion" ? "/v1/completions" : "/v1/chat/completions";
  const body = { model, temperature: 0, ignore_eos: true, stream: job.stream,
                 max_tokens: job.leaves ? 400 : job.maxTokens };
  if (job.stream) body.stream_options = { include_usage: true };
  if (job.kind === "completion") body.prompt = job.text;
  else body.messages = [{ role: "user", content: job.text }];
  return new Promise((resolve) => {
    const req = http.request({ host: url.hostname, port: url.port, method: "POST", path, agent,
                               headers: { "content-type": "application/json" } });
    let left = false;
    const leave = () => { if (!left) { left = true; req.destroy(); resolve({ job, left: true }); } };
    req.on("error", (e) => { if (!left) resolve({ job, error: String(e) }); });
    req.on("response", (res) => {
      let raw = "", text = "", events = 0, finishReason = null, usage = null;
      res.setEncoding("utf8");
      res.on("data", (d) => {
        raw += d;
        if (!job.stream) return;
        let at;
        while ((at = raw.indexOf("\n\n")) >= 0) {
          const event = raw.slice(0, at);
          raw = raw.slice(at + 2);
          if (!event.startsWith("data: ") || event === "data: [DONE]") continue;
          const chunk = JSON.parse(event.slice(6));
          events++;
          if (chunk.usage) usage = chunk.usage;
          for (const c of chunk.choices ?? []) {
            text += job.kind === "completion" ? c.text : (c.delta.content ?? "") + (c.delta.reasoning_content ?? "");
            if (c.finish_reason) finishReason = c.finish_reason;
          }
          if (job.leaves && events >= job.leaveAfterEvents) return leave();
        }
      });
      res.on("end", () => {
        if (left) return;
        if (res.statusCode !== 200) return resolve({ job, error: `status ${res.statusCode}: ${raw.slice(0, 200)}` });
        if (!job.stream) {
          const json = JSON.parse(raw);
          const c = json.choices[0];
          text = job.kind === "completion" ? c.text : (c.message.reasoning_content ?? "") + (c.message.content ?? "");
          finishReason = c.finish_reason;
          usage = json.usage;
        }
        resolve({ job, text, finishReason, usage });
      });
      res.on("error", () => { if (!left) resolve({ job, error: "response error" }); });
    });
    req.end(JSON.stringify(body), () => {
      if (job.leaves && !job.stream) setTimeout(leave, job.leaveAfterMs);
    });
  });
}

// Warm up (the BLAS threads start with the first request), then take the idle figures.
await send({ i: -1, stream: false, ...variants[0], leaves: false });
const idle = processStats(serverPid);
const finished = async (reason) => metric("vllm:request_success_total", `finished_reason="${reason}"`);
const before = { abort: await finished("abort"), stop: await finished("stop"), length: await finished("length") };

let maxThreads = idle.threads, maxRss = idle.rssMb, connectionsSeen = 0;
const sampler = setInterval(() => {
  try {
    const s = processStats(serverPid);
    maxThreads = Math.max(maxThreads, s.threads);
    maxRss = Math.max(maxRss, s.rssMb);
  } catch {}
}, 200);
const started = Date.now();
const results = await Promise.all(jobs.map(send));
const seconds = (Date.now() - started) / 1000;
clearInterval(sampler);

let exact = 0, left = 0, failed = 0;
for (const r of results) {
  if (r.left) { left++; continue; }
  if (r.error) { failed++; check(false, `client ${r.job.i} failed`, r.error); continue; }
  const want = refOf(r.job).text;  // (the server runs without a reasoning parser)
  const ok = check(r.text === want, `client ${r.job.i} (${r.job.kind}, stream ${r.job.stream}) text`, { got: r.text, want }) &
             check(r.finishReason === "length", `client ${r.job.i} finish_reason`, r.finishReason) &
             check(r.usage?.completion_tokens === r.job.maxTokens, `client ${r.job.i} usage`, r.usage);
  if (ok) exact++;
}
console.log(`load: ${numConnections} connections (${numConnections / 2} streaming), ${exact} answered exactly, ` +
            `${left} hung up on purpose, ${failed} failed, in ${seconds.toFixed(1)} s`);

// The server drains: nothing running or waiting, every block and slot free.
let state = null;
for (let t = 0; t < 600; t++) {
  state = await Promise.all([metric("vllm:num_requests_running"), metric("vllm:num_requests_waiting"),
                             metric("vllm:kv_cache_usage_perc"), metric("vllm:state_slot_usage_perc")]);
  if (state.every((v) => v === 0)) break;
  await new Promise((r) => setTimeout(r, 100));
}
console.log(`after: running ${state[0]}, waiting ${state[1]}, kv_cache_usage_perc ${state[2]}, state_slot_usage_perc ${state[3]}`);
equal(state, [0, 0, 0, 0], "no request left, every KV block and state slot free");
const aborted = await finished("abort") - before.abort;
const normal = (await finished("stop")) - before.stop + (await finished("length")) - before.length;
console.log(`server: ${aborted} requests aborted, ${normal} finished normally`);
equal(aborted, left, "every client that hung up had its request aborted");
equal(normal, exact, "every other request finished normally");
equal(exact + left, numConnections, "every client was answered exactly or hung up");

const end = processStats(serverPid);
console.log(`server threads: ${idle.threads} idle, at most ${maxThreads} under load; ` +
            `resident memory: ${idle.rssMb.toFixed(0)} MiB idle, at most ${maxRss.toFixed(0)} MiB under load, ` +
            `${end.rssMb.toFixed(0)} MiB after (peak ${end.hwmMb.toFixed(0)} MiB)`);
equal(maxThreads, idle.threads, "no thread per connection: the thread count never rose under load");
check(maxRss - idle.rssMb <= rssBoundMb, `resident memory grew by at most ${rssBoundMb} MiB`,
      `${(maxRss - idle.rssMb).toFixed(0)} MiB`);
fs.writeFileSync(process.env.VLLM_LOAD_SUMMARY ?? "/dev/null", JSON.stringify({
  connections: numConnections, exact, left, seconds, aborted, idle, maxThreads, maxRssMb: maxRss, end }) + "\n");
finish("test_load");
