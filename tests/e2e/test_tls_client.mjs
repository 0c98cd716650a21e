// The official openai client over https (run_ops.sh's TLS server; NODE_EXTRA_CA_CERTS names
// its self-signed certificate): a chat completion and a stream; prints the finish reasons.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: `${process.env.VLLM_TLS_BASE}/v1`, apiKey: "none", maxRetries: 0 });
const model = process.env.VLLM_E2E_MODEL;
const chat = await client.chat.completions.create({ model, max_tokens: 4, messages: [{ role: "user", content: "hi" }] });
let streamed = null;
for await (const chunk of await client.completions.create({ model, prompt: "tls", max_tokens: 4, stream: true })) {
  streamed = chunk.choices[0]?.finish_reason ?? streamed;
}
console.log(`${chat.choices[0].finish_reason} ${streamed}`);
