// Slow readers: VLLM_SLOW_READERS (default 10) streaming clients each ask for a long
// answer with logprobs (about 1.5 MB of events each) and then read one byte per second.
// While they crawl for VLLM_SLOW_SECONDS (default 20):
//   - the server's resident memory stays within VLLM_SLOW_RSS_BOUND_MB (default 64) of what
//     it was before they came: it does not buffer their answers as text;
//   - other clients are served as usual: VLLM_SLOW_OTHERS (default 40) requests complete
//     correctly while the slow ones have read almost nothing (their latency is printed next
//     to the same requests' latency without slow readers, not asserted).
// Then the slow readers hang up and everything is freed.
import net from "node:net";
import { base, model, check, equal, finish, metric, processStats, client } from "./lib.mjs";

const numSlow = Number(process.env.VLLM_SLOW_READERS ?? 10);
const crawlSeconds = Number(process.env.VLLM_SLOW_SECONDS ?? 20);
const numOthers = Number(process.env.VLLM_SLOW_OTHERS ?? 40);
const rssBoundMb = Number(process.env.VLLM_SLOW_RSS_BOUND_MB ?? 64);
const serverPid = Number(process.env.VLLM_LOAD_SERVER_PID);
const url = new URL(base);

async function others() {
  const started = Date.now();
  const results = await Promise.all(Array.from({ length: numOthers }, (_, i) =>
    client.completions.create({ model, prompt: `def other_${i % 8}():`, max_tokens: 8, temperature: 0,
                                ignore_eos: true })));
  const ok = results.filter((r) => r.choices[0].finish_reason === "length" && r.usage.completion_tokens === 8);
  return { ok: ok.length, texts: results.map((r) => r.choices[0].text), ms: Date.now() - started };
}

const baseline = await others();
const before = processStats(serverPid);

// The slow readers: a raw socket each; after the request, one byte per second is taken from
// the socket (Node stops reading from the kernel once its own small buffer is full).
const slow = [];
for (let i = 0; i < numSlow; i++) {
  const socket = net.connect(Number(url.port), url.hostname);
  socket.pause();
  const body = JSON.stringify({ model, prompt: `slow reader ${i}`, max_tokens: 900, ignore_eos: true,
                                stream: true, logprobs: 5, temperature: 0 });
  socket.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
               `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  socket.on("error", () => {});
  slow.push({ socket, received: 0 });
}
const crawl = setInterval(() => {
  for (const s of slow) {
    const byte = s.socket.read(1);
    if (byte) s.received += byte.length;
  }
}, 1000);

let maxRss = before.rssMb;
const sampler = setInterval(() => {
  try { maxRss = Math.max(maxRss, processStats(serverPid).rssMb); } catch {}
}, 250);
// Let the slow requests generate (and their answers pile up) while the others run.
await new Promise((r) => setTimeout(r, 2000));
const during = await others();
await new Promise((r) => setTimeout(r, Math.max(0, crawlSeconds * 1000 - 2000 - during.ms)));
clearInterval(sampler);
clearInterval(crawl);

const slowBytes = slow.map((s) => s.received);
console.log(`slow readers: ${numSlow}, each read ${Math.min(...slowBytes)}-${Math.max(...slowBytes)} bytes in ` +
            `${crawlSeconds} s; server resident memory ${before.rssMb.toFixed(1)} MiB before, at most ` +
            `${maxRss.toFixed(1)} MiB while they crawled`);
console.log(`other clients: ${numOthers} requests in ${baseline.ms} ms without slow readers, ` +
            `${during.ms} ms with them`);
equal(during.ok, numOthers, "every other client was served while the slow readers crawled");
equal(during.texts, baseline.texts, "and got the same answers as without them");
check(Math.max(...slowBytes) <= crawlSeconds + 1, "the slow readers really read one byte per second", slowBytes);
check(maxRss - before.rssMb <= rssBoundMb,
      `resident memory grew by at most ${rssBoundMb} MiB while ${numSlow} slow readers held ` +
      `${numSlow} x ~1.5 MB answers`, `${(maxRss - before.rssMb).toFixed(1)} MiB`);

// They hang up: everything is freed.
for (const s of slow) s.socket.destroy();
let state = null;
for (let t = 0; t < 600; t++) {
  state = await Promise.all([metric("vllm:num_requests_running"), metric("vllm:kv_cache_usage_perc"),
                             metric("vllm:state_slot_usage_perc")]);
  if (state.every((v) => v === 0)) break;
  await new Promise((r) => setTimeout(r, 100));
}
equal(state, [0, 0, 0], "after the slow readers left: nothing running, every block and slot free");
finish("test_slow_reader");
