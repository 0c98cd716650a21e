// 64 concurrent streaming clients (completions and chat), some disconnecting at random
// mid-stream: every other one must complete with exactly the text `vllm generate` gives for
// its prompt, and afterwards /metrics must show no running or waiting requests and an empty
// KV cache (every block back in the free pool), the disconnects counted as aborts.
import { client, model, check, equal, finish, generate, renderChat, metric, streamedChatText } from "./lib.mjs";

const numClients = Number(process.env.VLLM_E2E_CLIENTS ?? 64);
const maxTokens = 24;
let seed = 12345;
const random = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);

const jobs = [];
for (let i = 0; i < numClients; i++) {
  const kind = i % 2 === 0 ? "completion" : "chat";
  const text = `Client ${i} says ${"abcdefghij".slice(0, 1 + (i % 10))}`;
  const disconnectAfter = random() < 0.25 ? 1 + Math.floor(random() * 6) : null;  // chunks
  jobs.push({ i, kind, text, disconnectAfter });
}

// References: one `vllm generate` run over every prompt (chat prompts rendered first).
const prompts = jobs.map((j) => j.kind === "completion" ? j.text
  : renderChat({ messages: [{ role: "user", content: j.text }], add_generation_prompt: true }));
const refs = await generate([...prompts.flatMap((p) => ["--prompt", p]), "--max-tokens", String(maxTokens),
                       "--temperature", "0", "--ignore-eos"]);

async function run(job) {
  const controller = new AbortController();
  // Clients that will leave ask for many tokens, so they are surely still generating then.
  const common = { model, max_tokens: job.disconnectAfter === null ? maxTokens : 480, temperature: 0, ignore_eos: true, stream: true,
                   stream_options: { include_usage: true } };
  const stream = job.kind === "completion"
    ? await client.completions.create({ ...common, prompt: job.text }, { signal: controller.signal })
    : await client.chat.completions.create({ ...common, messages: [{ role: "user", content: job.text }] },
                                           { signal: controller.signal });
  let text = "", chunks = 0, finishReason = null, usage = null;
  try {
    for await (const chunk of stream) {
      chunks++;
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        text += job.kind === "completion" ? c.text : (c.delta.content ?? "") + (c.delta.reasoning_content ?? "");
        if (c.finish_reason) finishReason = c.finish_reason;
      }
      if (job.disconnectAfter !== null && chunks >= job.disconnectAfter) {
        controller.abort();
        return { job, disconnected: true };
      }
    }
  } catch (e) {
    if (job.disconnectAfter !== null) return { job, disconnected: true };
    throw e;
  }
  return { job, disconnected: false, text, finishReason, usage };
}

const finishedTotal = async () => (await Promise.all(["stop", "length", "abort"].map(
  (r) => metric("vllm:request_success_total", `finished_reason="${r}"`)))).reduce((a, b) => a + b, 0);
const abortsBefore = await metric("vllm:request_success_total", 'finished_reason="abort"');
const finishedBefore = await finishedTotal();
const started = Date.now();
const results = await Promise.allSettled(jobs.map(run));
let completed = 0, disconnected = 0;
for (const r of results) {
  if (r.status === "rejected") {
    check(false, "a client failed", String(r.reason));
    continue;
  }
  const { job, text, finishReason, usage } = r.value;
  if (r.value.disconnected) {
    disconnected++;
    continue;
  }
  const ref = refs[job.i];
  const want = job.kind === "completion" ? ref.text : streamedChatText(ref.text);
  const ok = check(text === want, `client ${job.i} (${job.kind}) text equals generate`, { got: text, want }) &
             check(finishReason === "length", `client ${job.i} finish_reason`, finishReason) &
             check(usage?.completion_tokens === maxTokens, `client ${job.i} usage`, usage);
  if (ok) completed++;
}
console.log(`concurrency: ${numClients} streaming clients, ${completed} completed correctly, ` +
            `${disconnected} disconnected on purpose, in ${Date.now() - started} ms`);
equal(completed + disconnected, numClients, "every client either completed correctly or left");
check(disconnected > 0, "some clients disconnected");

// The server drains: no requests left, every KV block free again.
let running = NaN, waiting = NaN, usage = NaN;
for (let t = 0; t < 100; t++) {
  [running, waiting, usage] = await Promise.all([metric("vllm:num_requests_running"),
    metric("vllm:num_requests_waiting"), metric("vllm:kv_cache_usage_perc")]);
  if (running === 0 && waiting === 0 && usage === 0) break;
  await new Promise((r) => setTimeout(r, 100));
}
console.log(`after: vllm:num_requests_running ${running}, vllm:num_requests_waiting ${waiting}, vllm:kv_cache_usage_perc ${usage}`);
equal([running, waiting, usage], [0, 0, 0], "no running or waiting requests and a free KV cache afterwards");
// A client that leaves after the server has already generated (and the kernel buffered) its
// whole answer is not an abort; every other one is.
const aborted = await metric("vllm:request_success_total", 'finished_reason="abort"') - abortsBefore;
console.log(`disconnected clients whose requests the server aborted: ${aborted} of ${disconnected}`);
check(aborted >= 1 && aborted <= disconnected, "disconnects abort their requests", { aborted, disconnected });
equal(await finishedTotal() - finishedBefore, numClients, "every request finished or was aborted (request_success_total)");
finish("test_concurrency");
