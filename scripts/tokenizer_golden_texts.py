"""Test strings for the tokenizer goldens, and the benchmark corpus (pure Python, seeded).

Why: the C++ tokenizer must give exactly Hugging Face's ids for every kind of text a server
sees. These strings aim at the places where byte-level BPE and SentencePiece-style BPE
implementations usually diverge: the pre-tokenizer regexes (\\p{..} classes, lookahead,
contractions, digit grouping), normalizers (NFC vs NFD input), added / special tokens inside
plain text, whitespace runs, byte fallback, and very long words. Everything is deterministic
(fixed lists plus random.Random with fixed seeds), so a rerun writes the same files.

Used by scripts/make_tokenizer_golden.py; importable without tokenizers / transformers.
"""

import random
import unicodedata

SEED = 20240611

# Special-token text of every family we ship, plus malformed and partial variants. Each
# tokenizer sees all of them: one family's special token is plain text to another.
SPECIAL_TEXTS = [
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>user\nhi<|im_end|>",
    "<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<pad>", "<unk>", "<mask>",
    "<start_of_image>", "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
    "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|reserved_special_token_5|>",
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
    "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|call|>",
    "<|startoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<s>", "</s>",
    "[INST]", "[/INST]", "<|fim_prefix|>", "<unused7>", "<table>", "</div>",
]
MALFORMED_SPECIAL = [
    "<|im_start", "im_start|>", "<|im_start|", "< |im_start|>", "<|IM_START|>",
    "<<|im_start|>>", "<|im_start|><|im_end|>", "<|im_start|>>", "<||im_start|>",
    "<|begin_of_text|", "<|begin_of_text", "begin_of_text|>", "<｜begin of sentence｜>",
    "<|begin▁of▁sentence|>", "<start_of_turn", "start_of_turn>", "<start_of_turn >",
    "<|start|", "<|star|>", "<|endoftext|>|>", "<|endoftext|><|endoftext|>",
]

SCRIPTS = {
    "latin": ["Café crème brûlée", "naïve façade", "Ångström Øresund", "Łódź Źródło",
              "Straße Größe", "İstanbul ılık", "Đà Nẵng phở", "São João", "œuvre Æsir",
              "Ĳssel ĳs", "ﬁnancial ﬂow"],
    "cyrillic": ["Привет, как дела?", "Съешь же ещё этих мягких французских булок",
                 "Ёжик в тумане", "Україна, Ґанок, їжак", "Београд Љубљана"],
    "greek": ["Καλημέρα κόσμε", "ΑΒΓΔ αβγδ ςσ", "Ἀθῆναι ᾧ", "μῆνιν ἄειδε θεὰ"],
    "arabic": ["مرحبا بالعالم", "السَّلَامُ عَلَيْكُمْ", "١٢٣٤٥ ٦٧٨٩٠", "كتاب‌ها"],
    "hebrew": ["שלום עולם", "בְּרֵאשִׁית בָּרָא", "עברית English mixed"],
    "devanagari": ["नमस्ते दुनिया", "हिन्दी भाषा", "क्षत्रिय ज्ञान", "१२३४"],
    "thai": ["สวัสดีชาวโลก", "ภาษาไทยไม่มีการเว้นวรรค", "๑๒๓"],
    "cjk": ["你好，世界！", "中华人民共和国", "漢字と仮名", "简体中文和繁體中文",
            "𠀀𠀁𪚥", "一二三四五六七八九十"],
    "korean": ["안녕하세요 세계", "한국어 텍스트입니다", "ㄱㄴㄷ ㅏㅑ"],
    "japanese": ["こんにちは世界", "カタカナ ひらがな", "ｶﾀｶﾅ半角", "東京都渋谷区",
                 "ゔ ヴ ー〜"],
    "other": ["ქართული", "Հայերեն", "ᚠᚢᚦᚨᚱᚲ", "ܐܪܡܝܐ", "ᏣᎳᎩ", "ꦗꦮ", "መልካም", "བོད་ཡིག",
              "සිංහල", "தமிழ்", "ಕನ್ನಡ", "ગુજરાતી", "ਪੰਜਾਬੀ", "বাংলা", "ລາວ", "ខ្មែរ",
              "မြန်မာ"],
}

EMOJI = ["😀", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸", "🇯🇵🇰🇷", "❤️", "✊🏿",
         "🧑🏻‍🤝‍🧑🏿", "🐈‍⬛", "1️⃣", "#️⃣", "🫠", "🤷‍♀️", "👁️‍🗨️", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "©️®️™️",
         "⌚⌛", "🀄", "🅰️"]

WHITESPACE = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n",
              "\r\n\r\n", "\r", " \n ", "\u00a0", "\u2003", "\u3000", "\u200b", "\u2028",
              "\u202f", "\ufeff", "\x0b", "\x0c", "\u0085", " \t \n"]

CODE = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "class Foo:\n\tdef __init__(self, x: int = 42) -> None:\n\t\tself.x = x  # comment\n",
    "import numpy as np\narr = np.zeros((3, 4), dtype=np.float32)\nprint(f\"{arr.shape=}\")",
    "#include <vector>\nint main() {\n  std::vector<int> v{1, 2, 3};\n  for (auto& x : v) x *= 2;\n"
    "  return v.size() > 2 ? 0 : 1;\n}\n",
    "template <typename T>\nauto add(T a, T b) -> decltype(a + b) { return a + b; }",
    "if (a && b || !c) { ptr->field++; arr[i] <<= 2; }",
    '{"name": "Alice", "age": 30, "tags": ["a", "b"], "nested": {"k": null, "v": true}}',
    '{\n  "key": "value",\n  "number": -1.5e10,\n  "list": [1, 2, 3]\n}',
    '<!DOCTYPE html>\n<html lang="en">\n<head><title>Test &amp; page</title></head>\n'
    '<body><div class="x"><p>Hello <b>world</b></p></div></body>\n</html>',
    "<table><tr><td>1</td><td>2</td></tr></table>",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;",
    "$ ls -la | grep '\\.py$' && echo \"done\" > /dev/null 2>&1",
    "fn main() { let x: Vec<u8> = vec![0xFF; 16]; println!(\"{:?}\", x); }",
    "const f = async (x) => { await fetch(`/api/${x}`); return x ?? null; };",
    "    indented with spaces\n        more\n\tand a tab\n",
    "x = [i**2 for i in range(10) if i % 2 == 0]",
    "// TODO: fix\n/* block\n   comment */\n#define MAX(a,b) ((a)>(b)?(a):(b))",
    "a==b!=c<=d>=e->f::g...h",
]

NUMBERS = ["0", "7", "42", "123", "1234", "12345", "123456", "1234567", "12345678901234567890",
           "3.14159", "-0.001", "1e-10", "6.022e23", "1,000,000", "1.000.000,50", "$1,234.56",
           "€99", "50%", "0x1F", "0b1010", "2024-06-11", "12:34:56", "+1 (555) 123-4567",
           "v1.2.3", "192.168.0.1", "１２３４", "½ ¾ ⅞", "Ⅻ", "²³", "٣.١٤"]

CONTRACTIONS = ["it's", "don't", "they're", "we've", "I'm", "you'll", "he'd", "IT'S", "DON'T",
                "THEY'RE", "WE'VE", "I'M", "YOU'LL", "HE'D", "It'S", "dOn'T", "can't won't",
                "rock'n'roll", "'s 't 're 've 'm 'll 'd", "O'Neill's", "students'", "’s curly",
                "don’t (curly)", "'''", "''"]

PUNCT = ["!!!", "???", "...", "…", "?!?!", "---", "___", "***", "###", "!@#$%^&*()",
         "[]{}<>", "«»„“”", "¿¡", "、。「」", "—–-", ";;;:::", "~`|\\", "((()))", "....\n....",
         ".,;:!?", "¡Hola!", "¿Qué?"]

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "model", "token",
         "attention", "server", "request", "batch", "cache", "kernel", "Hello", "World",
         "OpenAI", "Qwen", "LLaMA", "Gemma", "DeepSeek", "inference", "tokenizer", "a", "I",
         "an", "is", "was", "and", "or", "not", "HTTP", "JSON", "GPU", "naïve", "über",
         "résumé", "coöperate", "mañana", "Zürich", "ÉCOLE", "straße"]


def _nfc_nfd_texts():
    """Texts whose NFC and NFD forms differ (the Qwen3 normalizer is NFC)."""
    base = ["café", "Ångström", "naïve", "한국어", "ệ ử ỗ", "é", "ñandú", "Åå", "ḱṷṓn",
            "가나다", "が ぱ", "ﬃ ℌ Ⅸ", "Ω Å K"]
    out = []
    for s in base:
        out.append(unicodedata.normalize("NFC", s))
        out.append(unicodedata.normalize("NFD", s))
    out += ["e\u0301", "a\u0308\u0301", "\u0301\u0301\u0301 alone", "n\u0303o",
            "Z\u0351\u0352\u0357\u0350\u035b\u0304\u0358\u0308\u0306alg\u0334\u0315o",
            "\u0915\u094d\u200d\u0937", "i\u0307", "x\u20d7"]
    return out


def _long_texts():
    return [
        "a" * 1000,
        "abc" * 300,
        "Pneumonoultramicroscopicsilicovolcanoconiosis" * 8,
        "supercalifragilisticexpialidocious",
        "x" * 257 + " " + "y" * 129,
        "😀" * 200,
        "中" * 300,
        " " * 300,
        "\n" * 100,
        "\t" * 64 + "tabbed",
        "0123456789" * 50,
        "-" * 200,
        "a\u0301" * 100,
        "".join(chr(0x4E00 + (i * 37) % 2000) for i in range(400)),
        "ab " * 200,
    ]


def _fixed_texts():
    t = [
        "", " ", "  ", "a", "A", "Hello world", "Hello, world!", " Hello world",
        "Hello world ", "  leading and trailing  ", "\nnewline first", "last newline\n",
        "\n", "\t", "\r\n", " \n", "multiple   spaces   here", "tabs\tand\tmore\t\ttabs",
        "line1\nline2\r\nline3\rline4", "trailing spaces   \n  next", "word\u00a0nbsp",
        "ideographic\u3000space", "zero\u200bwidth", "bom\ufeffinside", "\u2028sep\u2029",
        "▁already▁meta▁space", "▁▁double", " ▁ mix ▁▁ ", "<0x41> byte-looking token",
        "Ġ Ċ ĉ byte-level chars", "\x00\x01\x02 control \x7f", "\u0085next line",
        "mixed English 中文 한국어 日本語 русский",
        "The year 1984 had 365 days and 12345 mistakes.",
        "Emoji: 👨‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 👍🏽 thumb",
        "email: john.doe+tag@example.co.uk, url: https://example.com/a?b=c&d=e#f",
        "C:\\Users\\name\\file.txt and /usr/local/bin/python3",
        "@user #hashtag $TICKER %20 &amp; *bold* _italic_ ~strike~",
        "UPPERCASE lowercase CamelCase snake_case kebab-case SCREAMING_SNAKE",
        "XMLHttpRequest getElementById iOS macOS JavaScript",
        "He said \"hello\" and 'goodbye'.",
    ]
    t += SPECIAL_TEXTS + MALFORMED_SPECIAL
    t += [f"text before {s} text after" for s in SPECIAL_TEXTS[:24]]
    t += [f"{s}no spaces{s}" for s in ("<|im_start|>", "<bos>", "<|begin_of_text|>",
                                       "<｜begin▁of▁sentence｜>", "<|start|>")]
    t += [f" {s} " for s in ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>")]
    t += [f"\n{s}\n" for s in ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|return|>")]
    for name, items in SCRIPTS.items():
        t += items
    t += EMOJI + [" ".join(EMOJI), "".join(EMOJI)]
    t += [f"a{w}b" for w in WHITESPACE] + ["".join(WHITESPACE)]
    t += CODE + NUMBERS + [" ".join(NUMBERS)] + CONTRACTIONS + PUNCT
    t += _nfc_nfd_texts() + _long_texts()
    return t


def _random_text(rng):
    """One random mix of fragments from every pool above."""
    pools = [WORDS, WORDS, WORDS, NUMBERS, CONTRACTIONS, PUNCT, EMOJI, WHITESPACE,
             SPECIAL_TEXTS, MALFORMED_SPECIAL, [s for v in SCRIPTS.values() for s in v],
             _nfc_nfd_texts()]
    n = rng.randint(1, 24)
    parts = []
    for _ in range(n):
        pool = rng.choice(pools)
        parts.append(rng.choice(pool))
        parts.append(rng.choice(["", " ", " ", " ", "\n", "  ", "\t", ",", ". "]))
    if rng.random() < 0.15:
        parts.insert(0, rng.choice([" ", "  ", "\n", "\t"]))
    if rng.random() < 0.1:
        parts.append(rng.choice(CODE)[: rng.randint(5, 80)])
    if rng.random() < 0.1:
        # random code points from assorted blocks (valid scalars only)
        blocks = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
                  (0x900, 0x97F), (0xE00, 0xE7F), (0x3040, 0x30FF), (0x4E00, 0x9FFF),
                  (0xAC00, 0xD7A3), (0x1F300, 0x1FAFF), (0x300, 0x36F), (0x2000, 0x206F)]
        for _ in range(rng.randint(1, 30)):
            lo, hi = rng.choice(blocks)
            parts.append(chr(rng.randint(lo, hi)))
    return "".join(parts)


def added_token_texts(added_tokens, seed):
    """Strings around a tokenizer's own added tokens (from its tokenizer.json added_tokens).

    Huge families (reserved / unused / placeholder ids) contribute a few members only.
    """
    rng = random.Random(seed)
    contents = [a.get("content", "") for a in added_tokens]
    common = [c for c in contents
              if not any(k in c for k in ("reserved", "unused", "place▁holder"))]
    rare = [c for c in contents if c not in common]
    picked = rng.sample(common, min(14, len(common))) + rng.sample(rare, min(4, len(rare)))
    out = []
    for i, c in enumerate(picked):
        form = i % 4
        if form == 0:
            out.append(c)
        elif form == 1:
            out.append(f"before {c} after")
        elif form == 2:
            out.append(f"x{c}{c}y")
        else:
            out.append(f"  {c}\n{rng.choice(WORDS)}")
    return out


def golden_texts(added_tokens, tokenizer_index):
    """All test strings for one tokenizer: fixed ones, seeded random mixes, its added tokens."""
    rng = random.Random(SEED)
    texts = _fixed_texts()
    texts += [_random_text(rng) for _ in range(110)]
    texts += added_token_texts(added_tokens, SEED + 1000 * (tokenizer_index + 1))
    seen = set()
    unique = []
    for s in texts:
        if s not in seen:
            seen.add(s)
            unique.append(s)
    return unique


# ---------------------------------------------------------------------------------------
# Benchmark corpus: ~2 MB of mixed text, split into documents separated by "\n\n".

CORPUS_SEED = 7
CORPUS_TARGET_BYTES = 2_000_000

PROSE_WORDS = (WORDS + ["time", "people", "year", "way", "day", "thing", "world", "life",
                        "hand", "part", "child", "eye", "woman", "place", "work", "week",
                        "case", "point", "government", "company", "number", "group",
                        "problem", "fact", "be", "have", "do", "say", "get", "make", "go",
                        "know", "take", "see", "come", "think", "look", "want", "give",
                        "use", "find", "tell", "ask", "seem", "feel", "try", "leave",
                        "call", "good", "new", "first", "last", "long", "great", "little",
                        "own", "other", "old", "right", "big", "high", "different", "small",
                        "large", "next", "early", "young", "important", "few", "public",
                        "bad", "same", "able", "of", "in", "to", "for", "with", "on", "at",
                        "from", "by", "about", "as", "into", "like", "through", "after",
                        "between", "out", "against", "during", "without", "before",
                        "under", "around", "among"])


def _sentence(rng):
    n = rng.randint(4, 22)
    words = [rng.choice(PROSE_WORDS) for _ in range(n)]
    if rng.random() < 0.3:
        words.insert(rng.randint(0, n), rng.choice(NUMBERS))
    if rng.random() < 0.2:
        words.insert(rng.randint(0, n), rng.choice(CONTRACTIONS))
    s = " ".join(words)
    return s[0].upper() + s[1:] + rng.choice([".", ".", ".", "!", "?", ";", ":"])


def _document(rng):
    kind = rng.random()
    if kind < 0.55:  # English-like prose
        return " ".join(_sentence(rng) for _ in range(rng.randint(3, 15)))
    if kind < 0.75:  # code
        return "\n".join(rng.choice(CODE) for _ in range(rng.randint(1, 4)))
    if kind < 0.9:  # another script
        items = rng.choice(list(SCRIPTS.values()))
        return " ".join(rng.choice(items) for _ in range(rng.randint(5, 40)))
    return _random_text(rng)  # mixed with emoji, whitespace, special-token text


def bench_corpus():
    """The benchmark corpus text: documents joined with "\n\n" (deterministic)."""
    rng = random.Random(CORPUS_SEED)
    docs = []
    size = 0
    while size < CORPUS_TARGET_BYTES:
        d = _document(rng).strip("\n")
        if not d:
            continue
        docs.append(d)
        size += len(d.encode("utf-8")) + 2
    return "\n\n".join(docs)
