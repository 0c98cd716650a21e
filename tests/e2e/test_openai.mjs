// The official `openai` client against `vllm serve`: completions and chat, streaming and
// not; greedy and seeded outputs must equal `vllm generate --json` on the same model.
import { client, model, check, equal, finish, generate, renderChat, http, splitReasoning, streamedChatText } from "./lib.mjs";

const close = (a, b) => Math.abs(a - b) <= 1e-4 * Math.max(1, Math.abs(b));

async function collectCompletion(params) {
  const stream = await client.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  const texts = {}, finish = {};
  let usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      texts[c.index] = (texts[c.index] ?? "") + c.text;
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  return { texts, finish, usage, chunks };
}

async function collectChat(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  const content = {}, reasoning = {}, finish = {}, roles = {};
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) roles[c.index] = c.delta.role;
      if (c.delta.content) content[c.index] = (content[c.index] ?? "") + c.delta.content;
      if (c.delta.reasoning_content) reasoning[c.index] = (reasoning[c.index] ?? "") + c.delta.reasoning_content;
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  return { content, reasoning, finish, usage, roles };
}

// /v1/models
const models = await client.models.list();
equal(models.data.map((m) => m.id), [model], "GET /v1/models lists the served name");

// Completions, greedy: non-streaming and streaming equal generate.
const prompt = "The quick brown fox";
const [ref] = await generate(["--prompt", prompt, "--max-tokens", "12", "--temperature", "0"]);
const greedy = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0 });
equal(greedy.choices[0].text, ref.text, "completion text equals vllm generate (greedy)");
equal(greedy.choices[0].finish_reason, ref.finish_reason, "completion finish_reason equals generate");
equal(greedy.usage.prompt_tokens, ref.prompt_token_ids.length, "usage.prompt_tokens");
equal(greedy.usage.completion_tokens, ref.token_ids.length, "usage.completion_tokens");
equal(greedy.object, "text_completion", "completion object");
check(greedy.id.startsWith("cmpl-"), "completion id", greedy.id);
const streamed = await collectCompletion({ model, prompt, max_tokens: 12, temperature: 0 });
equal(streamed.texts[0], ref.text, "streamed completion text equals generate (greedy)");
equal(streamed.finish[0], ref.finish_reason, "streamed completion finish_reason");
equal(streamed.usage?.completion_tokens, ref.token_ids.length, "stream_options.include_usage: completion_tokens");

// Seeded sampling with n = 2.
const seeded = (await generate(["--prompt", prompt, "--max-tokens", "10", "--temperature", "0.9", "--seed", "11", "--n", "2"]))[0];
const seededServer = await client.completions.create({ model, prompt, max_tokens: 10, temperature: 0.9, seed: 11, n: 2 });
equal(seededServer.choices.map((c) => c.text), seeded.outputs.map((o) => o.text), "seeded n=2 completions equal generate");
const seededStream = await collectCompletion({ model, prompt, max_tokens: 10, temperature: 0.9, seed: 11, n: 2 });
equal([seededStream.texts[0], seededStream.texts[1]], seeded.outputs.map((o) => o.text), "seeded n=2 streamed completions equal generate");

// Logprobs: the completions shape, values equal generate's.
const [lpRef] = await generate(["--prompt", prompt, "--max-tokens", "6", "--temperature", "0", "--logprobs", "2"]);
const lp = await client.completions.create({ model, prompt, max_tokens: 6, temperature: 0, logprobs: 2 });
const l = lp.choices[0].logprobs;
equal(l.tokens.length, lpRef.token_ids.length, "logprobs.tokens per generated token");
check(l.token_logprobs.every((v, i) => close(v, lpRef.logprobs[i].logprob)), "token_logprobs equal generate", { got: l.token_logprobs, want: lpRef.logprobs.map((x) => x.logprob) });
check(l.top_logprobs.every((t) => Object.keys(t).length >= 1 && Object.keys(t).length <= 3), "top_logprobs hold the token and its top 2", l.top_logprobs);
check(l.text_offset.every((v, i) => i === 0 || v >= l.text_offset[i - 1]), "text_offset grows", l.text_offset);
equal(l.text_offset[0], 0, "text_offset starts at 0");

// Echo (with prompt logprobs), stop strings, batches, token-id prompts.
const echo = await client.completions.create({ model, prompt, max_tokens: 4, temperature: 0, echo: true, logprobs: 1 });
check(echo.choices[0].text.startsWith(prompt), "echo prepends the prompt", echo.choices[0].text);
equal(echo.choices[0].logprobs.token_logprobs[0], null, "echo: the first prompt token has no logprob");
equal(echo.choices[0].logprobs.tokens.length, ref.prompt_token_ids.length + 4, "echo: logprobs cover prompt and output");
const stopAt = ref.text.length > 6 ? ref.text.slice(3, 5) : null;
if (stopAt) {
  const [stopRef] = await generate(["--prompt", prompt, "--max-tokens", "12", "--temperature", "0", "--stop", stopAt]);
  const stopped = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0, stop: [stopAt] });
  equal(stopped.choices[0].text, stopRef.text, "stop string: text equals generate");
  equal(stopped.choices[0].finish_reason, "stop", "stop string: finish_reason stop");
  equal(stopped.choices[0].stop_reason, stopAt, "stop string: stop_reason is the string");
}
const batchRef = await generate(["--prompt", "a", "--prompt", "bb", "--max-tokens", "5", "--temperature", "0"]);
const batch = await client.completions.create({ model, prompt: ["a", "bb"], max_tokens: 5, temperature: 0 });
equal(batch.choices.map((c) => [c.index, c.text]), batchRef.map((r, i) => [i, r.text]), "batched prompts equal generate");
const [idsRef] = await generate(["--prompt-ids", "1,2,3,4", "--max-tokens", "5", "--temperature", "0"]);
const ids = await client.completions.create({ model, prompt: [1, 2, 3, 4], max_tokens: 5, temperature: 0 });
equal(ids.choices[0].text, idsRef.text, "token-id prompt equals generate");

// Chat: the template applied as render-chat applies it; outputs equal generate.
const messages = [{ role: "system", content: "You are terse." }, { role: "user", content: "Say hi." }];
const chatPrompt = renderChat({ messages, add_generation_prompt: true });
const [chatRef] = await generate(["--prompt", chatPrompt, "--max-tokens", "12", "--temperature", "0"]);
const want = splitReasoning(chatRef.text);
const chat = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0 });
const msg = chat.choices[0].message;
equal(msg.role, "assistant", "chat message role");
equal(msg.content, want.content, "chat content equals generate (greedy)");
equal(msg.reasoning_content ?? null, want.reasoning, "chat reasoning_content equals generate's <think> part");
equal(chat.choices[0].finish_reason, chatRef.finish_reason, "chat finish_reason equals generate");
equal(chat.usage.prompt_tokens, chatRef.prompt_token_ids.length, "chat usage.prompt_tokens");
equal(chat.object, "chat.completion", "chat object");
const chatStream = await collectChat({ model, messages, max_tokens: 12, temperature: 0 });
equal(chatStream.roles[0], "assistant", "chat stream opens with the assistant role");
equal((chatStream.reasoning[0] ?? "") + (chatStream.content[0] ?? ""), streamedChatText(chatRef.text),
      "streamed chat text equals generate (greedy)");
equal(chatStream.finish[0], chatRef.finish_reason, "streamed chat finish_reason");
equal(chatStream.usage?.completion_tokens, chatRef.token_ids.length, "streamed chat usage");

const seededChatRef = (await generate(["--prompt", chatPrompt, "--max-tokens", "8", "--temperature", "1.0", "--seed", "5", "--n", "2"]))[0];
const seededChat = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 1.0, seed: 5, n: 2 });
equal(seededChat.choices.map((c) => c.index), [0, 1], "seeded chat n=2 has two choices");
seededChat.choices.forEach((c, i) => {
  const w = splitReasoning(seededChatRef.outputs[i].text);
  equal([c.message.reasoning_content ?? null, c.message.content], [w.reasoning, w.content], `seeded chat choice ${i} equals generate`);
});

// Chat logprobs.
const [chatLpRef] = await generate(["--prompt", chatPrompt, "--max-tokens", "5", "--temperature", "0", "--logprobs", "2"]);
const chatLp = await client.chat.completions.create({ model, messages, max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 2 });
const entries = chatLp.choices[0].logprobs.content;
equal(entries.length, chatLpRef.token_ids.length, "chat logprobs per token");
check(entries.every((e, i) => close(e.logprob, chatLpRef.logprobs[i].logprob) && e.top_logprobs.length === 2 && Array.isArray(e.bytes)),
      "chat logprobs equal generate, 2 top each, bytes", entries);

// Tools pass through the chat template (what the model sees equals render-chat with tools).
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
const toolPrompt = renderChat({ messages, tools, add_generation_prompt: true });
check(toolPrompt.includes("get_weather") && toolPrompt.includes("<tools>"), "render-chat puts the tools in the prompt");
const [toolRef] = await generate(["--prompt", toolPrompt, "--max-tokens", "6", "--temperature", "0"]);
const toolChat = await client.chat.completions.create({ model, messages, tools, max_tokens: 6, temperature: 0 });
equal(toolChat.usage.prompt_tokens, toolRef.prompt_token_ids.length, "tools reach the template (prompt length equals render-chat's)");
check(Array.isArray(toolChat.choices[0].message.tool_calls), "tool_calls is a list");
const tokenized = await http("POST", "/tokenize", { body: { model, messages, tools } });
equal(tokenized.json?.tokens, toolRef.prompt_token_ids, "/tokenize of messages + tools equals the rendered prompt's ids");

// response_format json_object is accepted.
const jsonMode = await client.chat.completions.create({ model, messages, max_tokens: 2, response_format: { type: "json_object" } });
equal(jsonMode.choices.length, 1, "response_format json_object accepted");

// Tokenizer endpoints, health, version.
const tok = await http("POST", "/tokenize", { body: { prompt } });
equal(tok.json?.tokens, ref.prompt_token_ids, "/tokenize equals generate's prompt ids");
equal(tok.json?.count, ref.prompt_token_ids.length, "/tokenize count");
const detok = await http("POST", "/detokenize", { body: { tokens: ref.prompt_token_ids } });
equal(detok.json?.prompt, prompt, "/detokenize round trip");
equal((await http("GET", "/health", { auth: false })).status, 200, "/health");
equal((await http("GET", "/version", { auth: false })).json?.version, "0.1.0", "/version");

finish("test_openai");
