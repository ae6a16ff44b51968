#!/usr/bin/env python3
"""Generates the tokenizer fixtures under tests/fixtures/tokenizer/ from Hugging Face `tokenizers`.

Writes:
  smollm2_encodings.json  ids of ~250 varied strings for the default model, with and
                          without special-token parsing, from a Hugging Face tokenizer
  pre_tokenizer_splits.json  how Hugging Face pre-tokenizers split the same strings
                          (Llama-3 and Qwen2 `Split(Regex, "isolated")`, SmolLM2's
                          `Digits` + `ByteLevel` chain, GPT-2's `ByteLevel`)

Reference for SmolLM2: `transformers.AutoTokenizer.from_pretrained(dir, gguf_file=...)` needs
torch (absent here), so the tokenizer is built with the `tokenizers` library from the GGUF
vocabulary and merges, with the pipeline of SmolLM2's own tokenizer.json: no normalizer,
pre-tokenizer Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False,
use_regex=True)], BPE without ignore_merges, the 17 control tokens as special added tokens,
and a ByteLevel post-processor that adds no BOS/EOS (matching `add_bos_token = false`).

Usage: .venv/bin/python tools/gen_tokenizer_fixture.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
"""

import argparse
import json
import os

import gguf
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "tokenizer")

# Split regexes as written in the models' tokenizer.json files.
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def test_strings():
    s = [
        "", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\t\t\n  \n",
        "Hello", " Hello", "Hello world", "Hello World!", "Hello, world!", "  Hello  world  ",
        "hello\nworld", "hello\n\nworld", "hello \n world", "line1\r\nline2\r\n",
        "The quick brown fox jumps over the lazy dog.",
        "I'm sure it's fine, don't you think? We've seen they'll say I'd go.",
        "IT'S SHE'S WE'RE THEY'VE I'M YOU'LL HE'D", "it's", "It'S", "'s", "'re", "' era",
        "don't", "o'clock", "rock 'n' roll", "\"quoted\" and 'single'",
        "3", "33", "333", "3333", "33333", "333333", "3333333", "1234567890",
        "3.14159", "1,000,000", "$100.00", "-42", "+7", "1e10", "0x1F", "2024-01-31",
        "12:30:45", "v1.2.3", "100%", "10^6", "phone: 555-0100",
        "12345678901234567890123456789012345678901234567890",
        "٣٤٥ Arabic-Indic digits", "①②③ circled", "Ⅻ roman numeral", "½ ¾ ⅓",
        "你好，世界！", "我想在apple工作1314151天～", "这是一个测试。", "中文和English混合",
        "日本語のテキストとカタカナ", "こんにちは世界", "東京タワー", "ｶﾀｶﾅ半角",
        "한국어 텍스트입니다", "안녕하세요", "Россия и Україна", "нещо на Български",
        "مرحبا بالعالم", "שלום עולם", "Ελληνικά γράμματα", "हिन्दी पाठ", "ภาษาไทย",
        "កាន់តែពិសេសអាចខលចេញ", "Tiếng Việt có dấu", "Cửa Việt", "Äpfel", "Ångström",
        "Café naïve résumé façade", "e\u0301 combining acute", "Straße", "ﬁ ligature",
        "😀", "👍🏽", "🇺🇸🇯🇵", "❤️", "👨‍👩‍👧‍👦", "🏳️‍🌈", "😶‍🌫️", "🧑🏿‍💻 coding",
        "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ (only emoji that has its own token)",
        "Hello, y'all! How are you 😁 ?我想在apple工作1314151天～",
        " this is 🦙.cpp", "emoji😀in😀text", "⚡️🔥💯", "🦙🦙🦙",
        "def foo(x):\n    return x ** 2\n",
        "int main() {\n\tprintf(\"hi\\n\");\n\treturn 0;\n}\n",
        "for (int i = 0; i < n; ++i) { a[i] += b[i]; }",
        "if x == 1 and y != 2:\n        pass",
        "<div class=\"a\">text</div>", "SELECT * FROM users WHERE id = 42;",
        "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}", "#include <stdio.h>",
        "// comment\n/* block */", "x = y if z else w  # note", "a->b, c::d, e=>f",
        "    Hello", "    Hello\n    Hello", " (", "\n =", "!!!!!!", "???", "...", "---",
        "***bold***", "__init__", "snake_case_name", "camelCaseName", "PascalCaseName",
        "ALLCAPS", "MiXeD cAsE", "a", "ab", "abc", "z", "Z", ".", ",", "!", "?",
        "https://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\Windows\\System32",
        "/usr/local/bin", "~/projects", "@mention #hashtag", "[link](http://x.y)",
        "w048 7tuijk dsdfhu", " discards", "Hello\tworld", "tab\tseparated\tvalues",
        "trailing space ", "trailing spaces   ", "   leading", "a  b   c    d",
        "\u00a0non-breaking\u00a0space", "zero\u200bwidth", "em\u2003space", "ideo\u3000space",
        "<|im_start|>", "<|im_end|>", "<|endoftext|>",
        "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|>system\nYou are helpful.<|im_end|>",
        "text<|im_end|>more", "<|im_start|><|im_end|>", "<|im_start", "im_start|>",
        "<|im_start|> spaced <|im_end|>", "<repo_name>pier<file_sep>main.cpp",
        "<jupyter_code>print(1)<jupyter_output>1", "<<|im_end|>>", "<|im_end|><|endoftext|>",
        "Mr. Smith's car", "U.S.A.", "e.g., i.e.,", "naïve café", "über",
        "C++ and C#", "F# and Go", "x² + y² = z²", "∑ ∫ √ ∞ ≠ ≤", "α β γ δ",
        "€100 £50 ¥1000", "©®™", "→ ← ↑ ↓", "• bullet", "— em dash – en dash",
        "“smart quotes” ‘single’", "«guillemets»", "¿Qué? ¡Sí!", "ça va?",
        "Ünïcödé", "ǅ titlecase", "ß ẞ", "İstanbul ıi", "Ωmega", "µ micro",
        "A1B2C3", "abc123def456", "123abc", "a1", "1a", "9 lives", "2nd 3rd 4th",
        "\n\n\n\n", "\t\n", " \t ", "a\n", "\na", "a \n\n b", ".\n\n", "x\r\ny",
    ]
    # Programmatic variety: whitespace runs before words and digits, long words, repeats.
    for n in range(1, 9):
        s.append(" " * n + "word")
        s.append("word" + " " * n + "word")
    for n in (16, 64):
        s.append("x" * n)
        s.append("9" * n)
    s.append("The year 1999 and 2000; call 911. " * 3)
    s.append("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor.")
    s.append("Supercalifragilisticexpialidocious antidisestablishmentarianism")
    s.append("pneumonoultramicroscopicsilicovolcanoconiosis")
    s.append("मैं हिंदी बोलता हूँ। 我也说中文。 I speak English too.")
    s.append("Mixed: English, 中文, 日本語, 한국어, русский, العربية, 😀!")
    # Dedupe while keeping order.
    seen, out = set(), []
    for x in s:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


def read_gguf_vocab(path):
    reader = gguf.GGUFReader(path)
    field = lambda key: reader.fields[key].contents() if key in reader.fields else None
    return {
        "tokens": field("tokenizer.ggml.tokens"),
        "types": field("tokenizer.ggml.token_type"),
        "merges": field("tokenizer.ggml.merges"),
        "pre": field("tokenizer.ggml.pre"),
        "add_bos": field("tokenizer.ggml.add_bos_token"),
    }


def build_smollm2_tokenizer(vocab):
    assert vocab["pre"] == "smollm", vocab["pre"]
    assert vocab["add_bos"] is False, vocab["add_bos"]
    ids = {tok: i for i, tok in enumerate(vocab["tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in vocab["merges"]]
    tok = Tokenizer(models.BPE(ids, merges, ignore_merges=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    control = [t for t, ty in zip(vocab["tokens"], vocab["types"]) if ty == 3]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
    for t in control:
        assert tok.token_to_id(t) == ids[t]
    return tok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=os.path.join(ROOT, "models",
                                                        "SmolLM2-135M-Instruct.Q4_1.gguf"))
    args = parser.parse_args()
    os.makedirs(OUT_DIR, exist_ok=True)
    strings = test_strings()

    vocab = read_gguf_vocab(args.model)
    tok = build_smollm2_tokenizer(vocab)
    cases = []
    for text in strings:
        tok.encode_special_tokens = False
        with_special = tok.encode(text, add_special_tokens=True).ids
        assert tok.encode(text, add_special_tokens=False).ids == with_special  # no BOS/EOS added
        tok.encode_special_tokens = True
        without_special = tok.encode(text, add_special_tokens=True).ids
        cases.append({"text": text, "ids": with_special, "ids_no_special": without_special})
    encodings = {
        "source": "tokenizers " + __import__("tokenizers").__version__ +
                  " BPE built from the GGUF vocab/merges with SmolLM2's tokenizer.json pipeline "
                  "(tools/gen_tokenizer_fixture.py)",
        "model": os.path.basename(args.model),
        "add_bos": False,
        "cases": cases,
    }
    with open(os.path.join(OUT_DIR, "smollm2_encodings.json"), "w", encoding="utf-8") as f:
        json.dump(encodings, f, ensure_ascii=False, indent=0)
        f.write("\n")

    splitters = {
        "llama-bpe": (pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated"), False),
        "qwen2": (pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated"), False),
        "smollm": (pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]), True),
        "gpt2": (pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), True),
    }
    splits = {
        "source": "tokenizers " + __import__("tokenizers").__version__ +
                  " pre_tokenize_str (tools/gen_tokenizer_fixture.py)",
        "pre_tokenizers": {},
    }
    for name, (splitter, byte_level) in splitters.items():
        splits["pre_tokenizers"][name] = {
            "byte_level": byte_level,  # pieces are in GPT-2's byte alphabet
            "cases": [{"text": t, "pieces": [p for p, _ in splitter.pre_tokenize_str(t)]}
                      for t in strings],
        }
    with open(os.path.join(OUT_DIR, "pre_tokenizer_splits.json"), "w", encoding="utf-8") as f:
        json.dump(splits, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"{len(strings)} strings -> {OUT_DIR}")


if __name__ == "__main__":
    main()
