// A streamed response's first chunk arrives before generation ends: when the first token
// chunk is in, /metrics still shows the request running, and the rest follows in further
// chunks. Then the same for chat, whose stream opens with the role.
import { client, model, check, equal, finish, metric } from "./lib.mjs";

async function firstChunkWhileRunning(create, name) {
  const stream = await create();
  let chunks = 0, runningAtFirst = null, finishReason = null, tokensAtFirst = null;
  for await (const chunk of stream) {
    chunks++;
    const c = chunk.choices[0];
    const hasToken = c && ((c.text ?? "") !== "" || (c.delta?.content ?? "") !== "" || (c.delta?.reasoning_content ?? "") !== "");
    if (runningAtFirst === null && hasToken) {
      runningAtFirst = await metric("vllm:num_requests_running");
      tokensAtFirst = await metric("vllm:generation_tokens_total");
    }
    if (c?.finish_reason) finishReason = c.finish_reason;
  }
  const tokensAtEnd = await metric("vllm:generation_tokens_total");
  console.log(`${name}: ${chunks} chunks; at the first token chunk: vllm:num_requests_running ${runningAtFirst}, ` +
              `${tokensAtEnd - tokensAtFirst} of the request's tokens still to come`);
  equal(runningAtFirst, 1, `${name}: the request was still running when its first chunk arrived`);
  check(tokensAtEnd - tokensAtFirst > 100, `${name}: most tokens came after the first chunk`, tokensAtEnd - tokensAtFirst);
  check(chunks >= 2, `${name}: streamed in more than one chunk`, chunks);
  equal(finishReason, "length", `${name}: finished by length`);
}

const long = { model, max_tokens: 400, temperature: 0, ignore_eos: true, stream: true };
await firstChunkWhileRunning(() => client.completions.create({ ...long, prompt: "Once upon a time" }), "completions stream");
await firstChunkWhileRunning(() => client.chat.completions.create({ ...long, messages: [{ role: "user", content: "Tell a story" }] }),
                             "chat stream");
finish("test_streaming");
