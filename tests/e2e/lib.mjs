// Shared helpers of the end-to-end tests. run.sh starts `vllm serve` and passes, in the
// environment: VLLM_E2E_BASE (http://127.0.0.1:PORT), VLLM_E2E_KEY (the --api-key),
// VLLM_E2E_MODEL (the served name), VLLM_E2E_MODEL_DIR (the model folder) and VLLM_E2E_BIN
// (the vllm binary, for `vllm generate --json` references).
import { execFile, execFileSync } from "node:child_process";
import fs from "node:fs";
import { promisify } from "node:util";
import OpenAI from "openai";

export const base = process.env.VLLM_E2E_BASE;
export const apiKey = process.env.VLLM_E2E_KEY;
export const model = process.env.VLLM_E2E_MODEL;
export const modelDir = process.env.VLLM_E2E_MODEL_DIR;
export const bin = process.env.VLLM_E2E_BIN;

export const client = new OpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 0, timeout: 120000 });

let failures = 0;
let passes = 0;
export function check(condition, what, detail) {
  if (condition) {
    passes++;
    return true;
  }
  failures++;
  console.log(`FAIL: ${what}${detail === undefined ? "" : `: ${typeof detail === "string" ? detail : JSON.stringify(detail)}`}`);
  return false;
}
export function equal(got, want, what) {
  const a = JSON.stringify(got), b = JSON.stringify(want);
  return check(a === b, what, `got ${a}, want ${b}`);
}
export function finish(name) {
  console.log(`${name}: ${passes} checks passed, ${failures} failed`);
  process.exit(failures === 0 ? 0 : 1);
}

// `vllm generate --json` on the same model: one parsed object per prompt. Asynchronous, so
// the client's idle keep-alive connections are managed while it runs.
export async function generate(args) {
  const { stdout } = await promisify(execFile)(
    bin, ["generate", "--model", modelDir, "--json", "--kv-cache-memory-bytes", String(64 << 20),
          "--max-model-len", process.env.VLLM_E2E_MAX_MODEL_LEN ?? "512", ...args],
    { encoding: "utf8", maxBuffer: 1 << 26 });
  return stdout.trim().split("\n").map((line) => JSON.parse(line));
}

// `vllm render-chat`: the chat template applied, as the server applies it.
export function renderChat(request) {
  const out = execFileSync(bin, ["render-chat", "--model", modelDir],
                           { input: JSON.stringify(request) + "\n", encoding: "utf8" });
  return JSON.parse(out.trim());
}

// Raw HTTP for what the client library hides (status codes, bodies, headers).
export async function http(method, path, { body, headers = {}, auth = true, raw = false } = {}) {
  const h = { ...headers };
  if (auth) h.authorization = `Bearer ${apiKey}`;
  if (body !== undefined && !h["content-type"]) h["content-type"] = "application/json";
  const res = await fetch(`${base}${path}`, {
    method, headers: h,
    body: body === undefined ? undefined : raw ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch {}
  return { status: res.status, text, json, headers: res.headers };
}

// The /metrics value of one series (first match of the name, labels ignored but extra).
export async function metric(name, extraLabel = "") {
  const res = await http("GET", "/metrics", { auth: false });
  for (const line of res.text.split("\n")) {
    if (line.startsWith(name + "{") && line.includes(extraLabel)) {
      return Number(line.slice(line.lastIndexOf(" ") + 1));
    }
  }
  return NaN;
}

// vLLM's qwen3 reasoning split of a whole output (mirrors src/server/reasoning_parser.cpp).
export function splitReasoning(text) {
  let out = text;
  const start = out.indexOf("<think>");
  const end0 = out.indexOf("</think>");
  if (start >= 0 && (end0 < 0 || start < end0)) out = out.slice(start + "<think>".length);
  const end = out.indexOf("</think>");
  if (end < 0) return { reasoning: null, content: out === "" ? null : out };
  const content = out.slice(end + "</think>".length);
  return { reasoning: out.slice(0, end), content: content === "" ? null : content };
}

// What a streamed chat's reasoning_content + content deltas add up to for a generated text:
// the streaming qwen3 parser starts in the reasoning part only when the output opens with
// <think>, and then drops that tag and the first </think>; otherwise the text is content as is.
export function streamedChatText(text) {
  if (!text.startsWith("<think>")) return text;
  return text.slice("<think>".length).replace("</think>", "");
}

// A process's thread count and resident memory, from /proc/PID/status.
export function processStats(pid) {
  const text = fs.readFileSync(`/proc/${pid}/status`, "utf8");
  const field = (name) => Number(text.match(new RegExp(`^${name}:\\s+(\\d+)`, "m"))[1]);
  return { threads: field("Threads"), rssMb: field("VmRSS") / 1024, hwmMb: field("VmHWM") / 1024 };
}
