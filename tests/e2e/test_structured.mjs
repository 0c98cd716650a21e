// Structured outputs end to end with the official client: response_format json_schema and
// json_object, structured_outputs regex / choice / grammar / json (and the older guided_*
// names), tool_choice "required" and named, whole and streamed, and `vllm generate` with the
// same constraints. The model has random weights, so sampling wanders; every output that
// finished with "stop" must conform, checked independently: JSON.parse plus the `ajv`
// validator for schemas, JavaScript regexes for regex / grammar / choice.
import { writeFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Ajv from "ajv";
import { client, model, check, equal, finish, generate } from "./lib.mjs";

const ajv = new Ajv({ strict: false, allErrors: true });
// The server runs --reasoning-parser qwen3: in chat, a grammar applies once reasoning has
// ended, so the chat prompts turn thinking off (the template then writes an empty
// <think></think>); completions prompts open no reasoning and are constrained at once.
const noThinking = { chat_template_kwargs: { enable_thinking: false } };
const messages = [{ role: "user", content: "Describe a person as JSON." }];
const seeds = [1, 2, 3, 4, 5, 6];

function validate(schema, text, what) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    return check(false, `${what}: output is JSON`, text);
  }
  const ok = ajv.validate(schema, value);
  return check(ok, `${what}: output validates against the schema (ajv)`, { text, errors: ajv.errors });
}

// Runs `make(seed)` for every seed; checks each output that finished with "stop" with `verify`
// and asks that enough of them did (random weights: some hit max_tokens).
async function sampled(what, make, verify, minStopped = 2) {
  let stopped = 0;
  const reasons = {};
  for (const seed of seeds) {
    const { text, finishReason } = await make(seed);
    reasons[finishReason] = (reasons[finishReason] ?? 0) + 1;
    if (finishReason !== "stop") continue;
    stopped++;
    verify(text, `${what} (seed ${seed})`);
  }
  console.log(`${what}: finish reasons ${JSON.stringify(reasons)}`);
  check(stopped >= minStopped, `${what}: at least ${minStopped} of ${seeds.length} outputs completed`, reasons);
}

const person = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: 8 },
    age: { type: "integer", minimum: 0, maximum: 120 },
    role: { enum: ["admin", "user", "guest"] },
    tags: { type: "array", items: { type: "string", maxLength: 3 }, maxItems: 2 },
    active: { type: "boolean" },
  },
  required: ["name", "age", "role", "active"],
};

// response_format json_schema (chat), compact and with free whitespace.
for (const compact of [false, true]) {
  await sampled(`chat response_format json_schema${compact ? " (compact)" : ""}`, async (seed) => {
    const r = await client.chat.completions.create({
      model, messages, seed, temperature: 1, max_tokens: 200, ...noThinking,
      response_format: { type: "json_schema", json_schema: { name: "person", schema: person, strict: true } },
      ...(compact ? { structured_outputs: { disable_any_whitespace: true } } : {}),
    });
    return { text: r.choices[0].message.content, finishReason: r.choices[0].finish_reason };
  }, (text, what) => validate(person, text, what));
}

// structured_outputs json on completions, without whitespace; keys come in schema order.
await sampled("completions structured_outputs json (disable_any_whitespace)", async (seed) => {
  const r = await client.completions.create({
    model, prompt: "{", seed, temperature: 1, max_tokens: 200,
    structured_outputs: { json: person, disable_any_whitespace: true },
  });
  return { text: r.choices[0].text, finishReason: r.choices[0].finish_reason };
}, (text, what) => {
  if (validate(person, text, what)) {
    check(!/[\n\t]/.test(text), `${what}: no free whitespace`, text);
    const keys = Object.keys(JSON.parse(text));
    const order = Object.keys(person.properties).filter((k) => keys.includes(k));
    equal(keys, order, `${what}: properties in schema order`);
  }
});

// response_format json_object: any JSON object or array.
await sampled("chat response_format json_object", async (seed) => {
  const r = await client.chat.completions.create({
    model, messages, seed, temperature: 1, max_tokens: 300, ...noThinking,
    response_format: { type: "json_object" },
  });
  return { text: r.choices[0].message.content, finishReason: r.choices[0].finish_reason };
}, (text, what) => {
  let value;
  try { value = JSON.parse(text); } catch { value = undefined; }
  check(value !== undefined && typeof value === "object", `${what}: a JSON object or array`, text);
}, 1);

// regex, choice and grammar, through structured_outputs and the older guided_* names.
const email = "[a-z]{2,6}@[a-z]{2,6}\\.(com|org)";
await sampled("completions structured_outputs regex", async (seed) => {
  const r = await client.completions.create({ model, prompt: "Email:", seed, temperature: 1, max_tokens: 40,
                                              structured_outputs: { regex: email } });
  return { text: r.choices[0].text, finishReason: r.choices[0].finish_reason };
}, (text, what) => check(new RegExp(`^(?:${email})$`).test(text), `${what}: matches ${email}`, text));

await sampled("chat guided_regex", async (seed) => {
  const r = await client.chat.completions.create({ model, messages, seed, temperature: 1, max_tokens: 40,
                                                   guided_regex: "(yes|no|maybe) [0-9]{1,3}%", ...noThinking });
  return { text: r.choices[0].message.content, finishReason: r.choices[0].finish_reason };
}, (text, what) => check(/^(yes|no|maybe) [0-9]{1,3}%$/.test(text), `${what}: matches`, text));

const colors = ["red", "green", "light blue", "\"quoted\""];
await sampled("chat structured_outputs choice", async (seed) => {
  const r = await client.chat.completions.create({ model, messages, seed, temperature: 1, max_tokens: 20,
                                                   structured_outputs: { choice: colors }, ...noThinking });
  return { text: r.choices[0].message.content, finishReason: r.choices[0].finish_reason };
}, (text, what) => check(colors.includes(text), `${what}: one of the choices`, text), seeds.length);

await sampled("completions guided_choice", async (seed) => {
  const r = await client.completions.create({ model, prompt: "Pick:", seed, temperature: 1, max_tokens: 20,
                                              guided_choice: ["alpha", "beta"] });
  return { text: r.choices[0].text, finishReason: r.choices[0].finish_reason };
}, (text, what) => check(text === "alpha" || text === "beta", `${what}: one of the choices`, text), seeds.length);

const sql = `
  root ::= "SELECT " columns " FROM " table (" WHERE " condition)? ";"
  columns ::= column (", " column){0,2}
  column ::= "id" | "name" | "age"
  table ::= "users" | "orders"
  condition ::= column " " ("=" | "<" | ">") " " [0-9]{1,3}
`;
const sqlRegex = /^SELECT (id|name|age)(, (id|name|age)){0,2} FROM (users|orders)( WHERE (id|name|age) [=<>] [0-9]{1,3})?;$/;
await sampled("chat structured_outputs grammar", async (seed) => {
  const r = await client.chat.completions.create({ model, messages, seed, temperature: 1, max_tokens: 60,
                                                   structured_outputs: { grammar: sql }, ...noThinking });
  return { text: r.choices[0].message.content, finishReason: r.choices[0].finish_reason };
}, (text, what) => check(sqlRegex.test(text), `${what}: a sentence of the grammar`, text));

// Streaming: the deltas add up to a conforming output.
await sampled("chat stream json_schema", async (seed) => {
  const stream = await client.chat.completions.create({
    model, messages, seed, temperature: 1, max_tokens: 200, stream: true, ...noThinking,
    response_format: { type: "json_schema", json_schema: { name: "person", schema: person } },
  });
  let text = "", finishReason = null;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    text += c.delta?.content ?? "";
    if (c.finish_reason) finishReason = c.finish_reason;
  }
  return { text, finishReason };
}, (text, what) => validate(person, text, what));

// tool_choice named and "required": the calls' arguments satisfy the tools' parameters.
const weather = { type: "object", properties: { city: { type: "string", maxLength: 10 },
                                                unit: { enum: ["celsius", "fahrenheit"] } },
                  required: ["city", "unit"] };
const time = { type: "object", properties: { zone: { enum: ["UTC", "CET", "PST"] } }, required: ["zone"] };
const tools = [
  { type: "function", function: { name: "get_weather", description: "Weather in a city", parameters: weather } },
  { type: "function", function: { name: "get_time", description: "Time in a zone", parameters: time } },
];
const params = { get_weather: weather, get_time: time };

await sampled("chat tool_choice named", async (seed) => {
  const r = await client.chat.completions.create({ model, messages, seed, temperature: 1, max_tokens: 100, tools,
                                                   tool_choice: { type: "function", function: { name: "get_time" } },
                                                   ...noThinking });
  const m = r.choices[0].message;
  equal(m.tool_calls?.length, 1, `named (seed ${seed}): one tool call`);
  equal(m.tool_calls?.[0]?.function?.name, "get_time", `named (seed ${seed}): the named function`);
  check(m.tool_calls?.[0]?.id?.startsWith("chatcmpl-tool-"), `named (seed ${seed}): a call id`);
  return { text: m.tool_calls?.[0]?.function?.arguments ?? "", finishReason: r.choices[0].finish_reason };
}, (text, what) => validate(time, text, what));

await sampled("chat tool_choice required", async (seed) => {
  const r = await client.chat.completions.create({ model, messages, seed, temperature: 1, max_tokens: 200, tools,
                                                   tool_choice: "required", ...noThinking });
  const c = r.choices[0];
  const calls = c.message.tool_calls ?? [];
  return { text: JSON.stringify(calls), finishReason: c.finish_reason === "tool_calls" ? "stop" : c.finish_reason };
}, (text, what) => {
  const calls = JSON.parse(text);
  check(calls.length >= 1, `${what}: at least one call`, text);
  for (const call of calls) {
    check(call.function.name in params, `${what}: a known tool`, call.function.name);
    if (call.function.name in params) validate(params[call.function.name], call.function.arguments, `${what} ${call.function.name}`);
  }
});

await sampled("chat stream tool_choice named", async (seed) => {
  const stream = await client.chat.completions.create({ model, messages, seed, temperature: 1, max_tokens: 100, tools,
                                                        tool_choice: { type: "function", function: { name: "get_weather" } },
                                                        stream: true, ...noThinking });
  let args = "", names = [], finishReason = null;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    for (const call of c.delta?.tool_calls ?? []) {
      if (call.function?.name) names.push(call.function.name);
      args += call.function?.arguments ?? "";
    }
    if (c.finish_reason) finishReason = c.finish_reason;
  }
  equal(names, ["get_weather"], `stream named (seed ${seed}): the name comes once`);
  return { text: args, finishReason };
}, (text, what) => validate(weather, text, what));

await sampled("chat stream tool_choice required", async (seed) => {
  const stream = await client.chat.completions.create({ model, messages, seed, temperature: 1, max_tokens: 200, tools,
                                                        tool_choice: "required", stream: true, ...noThinking });
  const calls = [];
  let finishReason = null;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    for (const call of c.delta?.tool_calls ?? []) calls.push(call);
    if (c.finish_reason) finishReason = c.finish_reason;
  }
  return { text: JSON.stringify(calls), finishReason: finishReason === "tool_calls" ? "stop" : finishReason };
}, (text, what) => {
  const calls = JSON.parse(text);
  check(calls.length >= 1, `${what}: at least one call`, text);
  calls.forEach((call, i) => {
    equal(call.index, i, `${what}: call indexes count up`);
    if (call.function.name in params) validate(params[call.function.name], call.function.arguments, `${what} ${call.function.name}`);
    else check(false, `${what}: a known tool`, call.function.name);
  });
});

// `vllm generate`: the same constraints from flags and from --input lines.
const dir = mkdtempSync(join(tmpdir(), "vllm-structured-"));
try {
  writeFileSync(join(dir, "person.json"), JSON.stringify(person));
  writeFileSync(join(dir, "in.jsonl"), [
    JSON.stringify({ prompt: "a", structured_outputs: { choice: ["left", "right"] } }),
    JSON.stringify({ prompt: "b", structured_outputs: { regex: "[0-9]{3}-[0-9]{4}" } }),
    JSON.stringify({ prompt: "c", guided_json: person }),
  ].join("\n") + "\n");
  const fromFlags = await generate(["--prompt", "x", "--prompt", "y", "--json-schema", `@${join(dir, "person.json")}`,
                                    "--max-tokens", "200", "--temperature", "1", "--seed", "7", "--n", "3"]);
  let completed = 0;
  for (const line of fromFlags) {
    for (const out of line.outputs ?? [line]) {
      if (out.finish_reason !== "stop") continue;
      completed++;
      validate(person, out.text, "generate --json-schema");
    }
  }
  check(completed >= 1, "generate --json-schema: some outputs completed", completed);
  const fromInput = await generate(["--input", join(dir, "in.jsonl"), "--max-tokens", "200", "--temperature", "1", "--seed", "3"]);
  equal(fromInput.length, 3, "generate --input: one result per line");
  if (fromInput[0].finish_reason === "stop") check(["left", "right"].includes(fromInput[0].text), "generate --input choice", fromInput[0].text);
  if (fromInput[1].finish_reason === "stop") check(/^[0-9]{3}-[0-9]{4}$/.test(fromInput[1].text), "generate --input regex", fromInput[1].text);
  if (fromInput[2].finish_reason === "stop") validate(person, fromInput[2].text, "generate --input guided_json");
} finally {
  rmSync(dir, { recursive: true, force: true });
}

finish("test_structured");
