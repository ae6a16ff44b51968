#!/usr/bin/env python3
"""Generates tests/fixtures/tokenizer/spm_llama_sentencepiece.json with Google's `sentencepiece`.

The reference is the SentencePiece library itself: a ModelProto is built from the
vocabulary of llama.cpp's `ggml-vocab-llama-spm.gguf` (pieces, scores and types as
stored there) with the Llama tokenizer's settings: BPE model, byte fallback, identity
normalizer, a dummy "▁" prefix, whitespace escaped to "▁" and extra whitespace kept.
The script first checks that this model reproduces every llama.cpp test vector of the
same vocabulary (so the setup is right), then records the ids of seeded random texts
(ASCII words, runs of spaces, tabs and newlines, digits, punctuation, accents, Cyrillic,
CJK, emoji and rare characters that need byte fallback).

Needs: .venv/bin/python -m pip install -r tools/requirements.txt (sentencepiece, protobuf, gguf)
Usage: .venv/bin/python tools/gen_spm_fixture.py [--vocab tests/fixtures/vendor/llama.cpp/ggml-vocab-llama-spm.gguf]
"""

import argparse
import json
import os
import random

import gguf
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as sp_pb2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_VOCAB = os.path.join(ROOT, "tests", "fixtures", "vendor", "llama.cpp",
                             "ggml-vocab-llama-spm.gguf")
OUT_PATH = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "spm_llama_sentencepiece.json")
SEED = 20240601
N_CASES = 300


def read_vocab(path):
    reader = gguf.GGUFReader(path)
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    scores = reader.fields["tokenizer.ggml.scores"].contents()
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    return tokens, scores, types


def build_processor(tokens, scores, types):
    model = sp_pb2.ModelProto()
    for piece, score, kind in zip(tokens, scores, types):
        entry = model.pieces.add()
        entry.piece = piece
        entry.score = score
        entry.type = kind  # GGUF token types use SentencePiece's numbering
    model.trainer_spec.model_type = sp_pb2.TrainerSpec.BPE
    model.trainer_spec.vocab_size = len(tokens)
    model.trainer_spec.byte_fallback = True
    model.trainer_spec.unk_id = 0
    model.trainer_spec.bos_id = 1
    model.trainer_spec.eos_id = 2
    model.trainer_spec.pad_id = -1
    model.normalizer_spec.name = "identity"
    model.normalizer_spec.add_dummy_prefix = True
    model.normalizer_spec.remove_extra_whitespaces = False
    model.normalizer_spec.escape_whitespaces = True
    processor = spm.SentencePieceProcessor()
    processor.LoadFromSerializedProto(model.SerializeToString())
    return processor


def read_llama_cpp_vectors(vocab_path):
    with open(vocab_path + ".inp", encoding="utf-8", newline="") as f:
        raw = f.read()
    texts = raw.split("\n__ggml_vocab_test__\n")
    if texts and texts[-1] == "":
        texts.pop()
    with open(vocab_path + ".out", encoding="utf-8") as f:
        outs = [[int(t) for t in line.split()] for line in f.read().split("\n")[: len(texts)]]
    assert len(texts) == len(outs), "inp/out length mismatch"
    return list(zip(texts, outs))


def random_texts(rng):
    words = ["Hello", "world", "the", "The", "tokenizer", "a", "I", "we're", "don't", "cpp",
             "llama", "inference", "GPU", "naïve", "café", "Äpfel", "straße", "über", "ﬁne",
             "нещо", "Български", "привет", "我想在", "工作", "日本語", "한국어", "مرحبا", "שלום",
             "कखग", "ក្រុម", "🦙", "🚀", "😶‍🌫️", "✅", "👍🏽", "𝔘𝔫𝔦", "ǅ", "Ω", "½", "～", "\u00a0",
             "\u200b", "\U0001f9ec", "\U00010348", "\ue000", "x86_64", "http://a.b/c?d=e",
             "3.14159", "1234567890", "''", "```", "......", "!!!!", "??", "((", "))", "--", "=="]
    separators = [" ", " ", " ", "  ", "   ", "\n", "\n\n", "\t", " \n ", "\r\n", "", ",", ". "]
    texts = []
    for _ in range(N_CASES):
        parts = []
        for _ in range(rng.randint(1, 24)):
            kind = rng.random()
            if kind < 0.7:
                parts.append(rng.choice(words))
            elif kind < 0.85:
                parts.append(str(rng.randint(0, 10 ** rng.randint(1, 9))))
            else:
                parts.append("".join(chr(rng.choice([rng.randint(0x20, 0x7e),
                                                    rng.randint(0xa0, 0x2fff),
                                                    rng.randint(0x3000, 0xd7ff),
                                                    rng.randint(0x10000, 0x1faff)]))
                                     for _ in range(rng.randint(1, 4))))
            parts.append(rng.choice(separators))
        text = "".join(parts)
        if rng.random() < 0.2:
            text = rng.choice([" ", "  ", "\n", "\t"]) + text
        texts.append(text)
    return texts


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--vocab", default=DEFAULT_VOCAB)
    args = parser.parse_args()

    tokens, scores, types = read_vocab(args.vocab)
    processor = build_processor(tokens, scores, types)

    vectors = read_llama_cpp_vectors(args.vocab)
    for text, expected in vectors:
        got = processor.EncodeAsIds(text)
        if got != expected:
            raise SystemExit(f"sentencepiece disagrees with llama.cpp's vector {text!r}: "
                             f"{got} != {expected}")
    print(f"sentencepiece reproduces all {len(vectors)} llama.cpp vectors")

    rng = random.Random(SEED)
    cases = []
    for text in random_texts(rng):
        ids = processor.EncodeAsIds(text)
        cases.append({"text": text, "ids": ids})

    fixture = {
        "generator": "tools/gen_spm_fixture.py",
        "reference": f"sentencepiece {spm.__version__}, BPE model built from the vocabulary of "
                     "ggml-vocab-llama-spm.gguf (byte fallback, add_dummy_prefix, identity "
                     "normalizer, extra whitespace kept)",
        "vocab": "tests/fixtures/vendor/llama.cpp/ggml-vocab-llama-spm.gguf",
        "seed": SEED,
        "cases": cases,
    }
    os.makedirs(os.path.dirname(OUT_PATH), exist_ok=True)
    with open(OUT_PATH, "w", encoding="utf-8") as f:
        # One case per line keeps diffs readable.
        head = {k: v for k, v in fixture.items() if k != "cases"}
        f.write(json.dumps(head, ensure_ascii=False, indent=1)[:-2] + ',\n "cases": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
        f.write("\n ]\n}\n")
    print(f"wrote {len(cases)} cases to {os.path.relpath(OUT_PATH, ROOT)} "
          f"({os.path.getsize(OUT_PATH)} bytes)")


if __name__ == "__main__":
    main()
