#!/usr/bin/env python3
"""Generates the dequantization fixtures of tests/tensor and tests/model.

The reference is the python `gguf` package (gguf-py, maintained with llama.cpp):
`gguf.quants.quantize` / `gguf.quants.dequantize` and `gguf.GGUFReader`.

  tests/fixtures/model/dequant.json
      ggml's block geometry of every type (GGML_QUANT_SIZES), and
      for each supported type, a few blocks: raw bytes (hex) and their
      dequantized f32 values as hex bit patterns (so the C++ test compares bits).
      Legacy quants (Q4_0 .. Q8_0) get blocks quantized from random floats plus
      blocks of random bytes; k-quants (which gguf-py cannot quantize) get random
      bytes. f16 scale fields are always set to finite values.

  tests/fixtures/model/smollm2_rows.json  (only with --model PATH)
      For a few tensors of the default model, a sample of rows: the first values
      (hex bits), the FNV-1a 64 hash of the row's f32 bytes, and the row sum.

Usage: tools/gen_dequant_fixture.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
"""

import argparse
import json
import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "model")

# Byte offsets of the f16 scale fields inside one block of each type.
HALF_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}
QUANTIZABLE = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
K_QUANTS = [T.Q4_K, T.Q5_K, T.Q6_K]


def f32_hex(values):
    return np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(">u4").tobytes().hex()


def random_blocks(rng, qtype, n_blocks):
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for offset in HALF_FIELDS[qtype]:
        scales = (rng.standard_normal(n_blocks) * 0.05).astype(np.float16)
        raw[:, offset:offset + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
    return raw


def case(qtype, raw_bytes):
    raw = np.ascontiguousarray(raw_bytes, dtype=np.uint8).reshape(-1)
    values = dequantize(raw, qtype).reshape(-1)
    return {"type": qtype.name, "type_id": int(qtype), "n": int(values.size),
            "bytes": raw.tobytes().hex(), "expected": f32_hex(values)}


def dequant_cases(seed):
    rng = np.random.default_rng(seed)
    cases = []
    for qtype in QUANTIZABLE:
        floats = (rng.standard_normal((2, 32)) * rng.uniform(0.01, 2.0)).astype(np.float32)
        floats[1, 5] = 0.0  # one exact zero; the rest random
        cases.append(case(qtype, quantize(floats, qtype)))
        cases.append(case(qtype, random_blocks(rng, qtype, 2)))
    for qtype in K_QUANTS:
        cases.append(case(qtype, random_blocks(rng, qtype, 3)))
    # f16 and bf16: random bit patterns (subnormals included) plus special values.
    f16_bits = rng.integers(0, 1 << 16, size=256, dtype=np.uint16)
    f16_bits[:8] = [0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x7bff, 0x7c00, 0xfc00]
    f16_bits = f16_bits[((f16_bits & 0x7c00) != 0x7c00) | ((f16_bits & 0x03ff) == 0)]  # no NaN
    cases.append(case(T.F16, f16_bits.view(np.uint8)))
    bf16_bits = rng.integers(0, 1 << 16, size=256, dtype=np.uint16)
    bf16_bits[:4] = [0x0000, 0x8000, 0x0001, 0x7f80]
    bf16_bits = bf16_bits[((bf16_bits & 0x7f80) != 0x7f80) | ((bf16_bits & 0x007f) == 0)]
    cases.append(case(T.BF16, bf16_bits.view(np.uint8)))
    floats = rng.standard_normal(64).astype(np.float32)
    cases.append(case(T.F32, floats.view(np.uint8)))
    return cases


def type_sizes():
    return [{"type_id": int(t), "name": t.name.lower(), "block_size": b, "type_size": s}
            for t, (b, s) in GGML_QUANT_SIZES.items()]


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def model_rows(path):
    reader = GGUFReader(path)
    by_name = {t.name: t for t in reader.tensors}
    wanted = ["token_embd.weight", "blk.0.attn_norm.weight", "blk.0.attn_q.weight",
              "blk.0.ffn_down.weight", "blk.29.ffn_up.weight", "output_norm.weight"]
    tensors = []
    for name in wanted:
        t = by_name[name]
        values = dequantize(t.data, t.tensor_type)  # [rows, row_length]
        values = values.reshape(-1, int(t.shape[0]))
        n_rows = values.shape[0]
        rows = []
        for r in sorted({0, min(1, n_rows - 1), n_rows // 2, n_rows - 1}):
            row = np.ascontiguousarray(values[r], dtype=np.float32)
            rows.append({"row": r, "first": f32_hex(row[:8]), "fnv1a64": f"{fnv1a64(row.tobytes()):016x}",
                         "sum": float(row.astype(np.float64).sum())})
        tensors.append({"name": name, "type": t.tensor_type.name, "row_length": int(t.shape[0]),
                        "rows": n_rows, "samples": rows})
    return {"model": os.path.basename(path), "info": model_info(reader), "tensors": tensors}


def model_info(reader):
    """Facts ModelInfo must report, read with gguf-py."""
    def field(key):
        f = reader.fields[key]
        return f.contents()

    arch = field("general.architecture")
    n_head = field(f"{arch}.attention.head_count")
    n_kv = field(f"{arch}.attention.head_count_kv")
    n_embd = field(f"{arch}.embedding_length")
    n_layer = field(f"{arch}.block_count")
    types = {}
    for t in reader.tensors:
        types[t.tensor_type.name.lower()] = types.get(t.tensor_type.name.lower(), 0) + 1
    return {
        "architecture": arch,
        "name": field("general.name"),
        "context_length": field(f"{arch}.context_length"),
        "embedding_length": n_embd,
        "block_count": n_layer,
        "feed_forward_length": field(f"{arch}.feed_forward_length"),
        "head_count": n_head,
        "head_count_kv": n_kv,
        "head_dim": n_embd // n_head,
        "rope_freq_base": field(f"{arch}.rope.freq_base"),
        "rms_norm_eps": field(f"{arch}.attention.layer_norm_rms_epsilon"),
        "vocab_size": len(reader.fields["tokenizer.ggml.tokens"].data),
        "weight_bytes": int(sum(int(t.n_bytes) for t in reader.tensors)),
        "parameter_count": int(sum(int(t.n_elements) for t in reader.tensors)),
        "tensor_types": types,
        "kv_bytes_per_token": 2 * n_layer * n_kv * (n_embd // n_head) * 2,
        "has_chat_template": "tokenizer.chat_template" in reader.fields,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="also write smollm2_rows.json from this GGUF file")
    parser.add_argument("--seed", type=int, default=20240601)
    args = parser.parse_args()
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(os.path.join(OUT_DIR, "dequant.json"), "w") as f:
        json.dump({"generator": "tools/gen_dequant_fixture.py", "seed": args.seed,
                   "type_sizes": type_sizes(), "cases": dequant_cases(args.seed)}, f, indent=1)
        f.write("\n")
    if args.model:
        with open(os.path.join(OUT_DIR, "smollm2_rows.json"), "w") as f:
            json.dump(model_rows(args.model), f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
