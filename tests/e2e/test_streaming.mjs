// Long streamed responses, completions and chat: what a stream carries is what the engine
// computed, however the HTTP layer groups tokens into chunks. The chunks' texts add up to
// `vllm generate`'s greedy text for the same prompt; usage counts every generated token;
// the chat stream opens with the role before any text; and the server's metrics record one
// time-to-first-token and (tokens - 1) inter-token latencies for the request (they count
// engine outputs, not HTTP chunks). Nothing here depends on how fast the server runs.
import { client, model, check, equal, finish, generate, metric, renderChat, streamedChatText } from "./lib.mjs";

const maxTokens = 400;
const counts = async () => ({
  ttft: await metric("vllm:time_to_first_token_seconds_count"),
  itl: await metric("vllm:inter_token_latency_seconds_count"),
  tokens: await metric("vllm:generation_tokens_total"),
});

async function checkStream(create, name, wantText) {
  const before = await counts();
  const stream = await create();
  let text = "", chunks = 0, textBeforeRole = false, role = null, finishReason = null, usage = null;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.delta?.role) role = c.delta.role;
    const piece = c.text ?? (c.delta?.reasoning_content ?? "") + (c.delta?.content ?? "");
    if (piece !== "" && c.delta !== undefined && role === null) textBeforeRole = true;
    text += piece;
    if (c.finish_reason) finishReason = c.finish_reason;
  }
  const after = await counts();
  console.log(`${name}: ${chunks} chunks, ${usage?.completion_tokens} tokens, ` +
              `metrics: +${after.ttft - before.ttft} TTFT, +${after.itl - before.itl} inter-token latencies`);
  equal(text, wantText, `${name}: the chunks add up to generate's greedy text`);
  equal(usage?.completion_tokens, maxTokens, `${name}: usage.completion_tokens`);
  equal(finishReason, "length", `${name}: finished by length`);
  equal(after.tokens - before.tokens, maxTokens, `${name}: vllm:generation_tokens_total grew by the tokens streamed`);
  equal(after.ttft - before.ttft, 1, `${name}: one time-to-first-token observation`);
  equal(after.itl - before.itl, maxTokens - 1, `${name}: one inter-token latency per token after the first`);
  return { role, textBeforeRole };
}

const long = { model, max_tokens: maxTokens, temperature: 0, ignore_eos: true, stream: true,
               stream_options: { include_usage: true } };
const flags = ["--max-tokens", String(maxTokens), "--temperature", "0", "--ignore-eos"];

const prompt = "Once upon a time";
const [ref] = await generate(["--prompt", prompt, ...flags]);
await checkStream(() => client.completions.create({ ...long, prompt }), "completions stream", ref.text);

const messages = [{ role: "user", content: "Tell a story" }];
const [chatRef] = await generate(["--prompt", renderChat({ messages, add_generation_prompt: true }), ...flags]);
const chat = await checkStream(() => client.chat.completions.create({ ...long, messages }), "chat stream",
                               streamedChatText(chatRef.text));
equal(chat.role, "assistant", "chat stream: the role is assistant");
check(!chat.textBeforeRole, "chat stream: the role comes before any text");
finish("test_streaming");
