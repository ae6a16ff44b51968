#!/usr/bin/env python3
"""Converts a sentence-transformers BERT folder (all-MiniLM-L6-v2 and its kind) to GGUF.

    .venv/bin/python tools/convert_bert_to_gguf.py MODEL_DIR OUT.gguf --type f16|q8_0

Written for Pier with the `gguf` package only (no torch, no transformers): the safetensors file is
read with numpy (an 8-byte header length, a JSON header, raw little-endian tensors).

The file follows the conventions llama.cpp's converter writes for architecture `bert`, so Pier
reads llama.cpp's BERT GGUFs and llama.cpp reads these:
  * metadata `bert.context_length`, `bert.embedding_length`, `bert.feed_forward_length`,
    `bert.block_count`, `bert.attention.head_count`, `bert.attention.layer_norm_epsilon`,
    `bert.attention.causal = false`, `bert.pooling_type` (0 none, 1 mean, 2 cls, 3 last) from
    `1_Pooling/config.json`, `tokenizer.ggml.token_type_count`;
  * the WordPiece vocabulary in llama.cpp's "phantom space" form: a word-initial piece `w` is
    stored as "\u2581w", a continuation `##w` as "w", bracketed tokens ([CLS], [unused0]) as they
    are; `tokenizer.ggml.model = "bert"`, special ids (`cls`, `seperator` (sic, the gguf key),
    `unknown`, `padding`, `mask`);
  * tensors `token_embd`, `token_types`, `position_embd`, `token_embd_norm`, and per layer
    `attn_q`, `attn_k`, `attn_v`, `attn_output`, `attn_output_norm`, `ffn_up`, `ffn_down`,
    `layer_output_norm` (weights and biases).

The context length is the smaller of `max_position_embeddings` and sentence-transformers'
`max_seq_length` (what the model was trained and is evaluated with, as TEI uses it), and the
position table keeps that many rows (llama.cpp requires position_embd to match the context).

--type f16: every matrix f16, vectors f32. --type q8_0: the linear layers' matrices and the token
embedding Q8_0 except attn_v, which stays f16 (as llama.cpp's mixes give attn_v more bits): the
value path carries BERT's outlier features, and with it in Q8_0 (8-bit weights and 8-bit
activations) the embedding of a 2-token text lands at cosine 0.9985 from the float one, against
0.9992 with it in f16 (issue #19 asks 0.999); the position and token-type embeddings and the
vectors f32. The output is a pure
function of the input folder and the pinned gguf/numpy versions (bootstrap checks its SHA-256).
"""

import argparse
import json
import os
import struct
import sys

import numpy as np
import gguf

SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None, "I64": np.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        base = 8 + header_len
        out = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            dtype = SAFETENSORS_DTYPES.get(info["dtype"])
            if dtype is None:
                sys.exit(f"{path}: tensor {name} has dtype {info['dtype']}, not handled")
            begin, end = info["data_offsets"]
            f.seek(base + begin)
            data = np.frombuffer(f.read(end - begin), dtype=dtype).reshape(info["shape"])
            out[name] = data
    return out


def phantom(token):
    if token.startswith("[") and token.endswith("]"):
        return token
    if token.startswith("##"):
        return token[2:]
    return "\u2581" + token


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--type", choices=["f16", "q8_0"], required=True)
    ap.add_argument("--name", default=None)
    args = ap.parse_args()

    d = args.model_dir
    config = json.load(open(os.path.join(d, "config.json")))
    if config.get("model_type") != "bert":
        sys.exit(f"{d}: model_type {config.get('model_type')!r} is not bert")
    if config.get("position_embedding_type", "absolute") != "absolute":
        sys.exit(f"{d}: only absolute position embeddings are handled")
    if config.get("hidden_act") != "gelu":
        sys.exit(f"{d}: hidden_act {config.get('hidden_act')!r} is not gelu")
    context = config["max_position_embeddings"]
    st_config_path = os.path.join(d, "sentence_bert_config.json")
    if os.path.exists(st_config_path):
        context = min(context, json.load(open(st_config_path)).get("max_seq_length", context))
    pooling = 1
    pooling_path = os.path.join(d, "1_Pooling", "config.json")
    if os.path.exists(pooling_path):
        p = json.load(open(pooling_path))
        if p.get("pooling_mode_mean_tokens"):
            pooling = 1
        elif p.get("pooling_mode_cls_token"):
            pooling = 2
        elif p.get("pooling_mode_lasttoken"):
            pooling = 3
        else:
            sys.exit(f"{pooling_path}: a pooling mode Pier does not handle")

    tensors = read_safetensors(os.path.join(d, "model.safetensors"))
    prefix = "bert." if any(k.startswith("bert.") for k in tensors) else ""

    def t(name):
        return tensors[prefix + name]

    name = args.name or os.path.basename(os.path.normpath(d))
    w = gguf.GGUFWriter(args.out, "bert")
    w.add_name(name)
    w.add_context_length(context)
    w.add_embedding_length(config["hidden_size"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_block_count(config["num_hidden_layers"])
    w.add_head_count(config["num_attention_heads"])
    w.add_layer_norm_eps(config["layer_norm_eps"])
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType(pooling))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if args.type == "f16"
                    else gguf.LlamaFileType.MOSTLY_Q8_0)

    # Vocabulary: vocab.txt in id order (tokenizer.json's model.vocab holds the same).
    with open(os.path.join(d, "vocab.txt"), encoding="utf-8") as f:
        vocab = [line.rstrip("\n") for line in f]
    tok_config = json.load(open(os.path.join(d, "tokenizer_config.json")))
    specials = {tok_config.get(k) for k in
                ("unk_token", "sep_token", "pad_token", "cls_token", "mask_token")}
    tokens = [phantom(v) for v in vocab]
    types = [gguf.TokenType.CONTROL if v in specials else gguf.TokenType.NORMAL for v in vocab]
    index = {v: i for i, v in enumerate(vocab)}
    w.add_token_type_count(config.get("type_vocab_size", 1))
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_unk_token_id(index[tok_config.get("unk_token", "[UNK]")])
    w.add_sep_token_id(index[tok_config.get("sep_token", "[SEP]")])
    w.add_pad_token_id(index[tok_config.get("pad_token", "[PAD]")])
    w.add_uint32("tokenizer.ggml.cls_token_id", index[tok_config.get("cls_token", "[CLS]")])
    w.add_mask_token_id(index[tok_config.get("mask_token", "[MASK]")])

    quantized = args.type == "q8_0"

    def add(gguf_name, array, kind):
        """kind: 'vector' (f32), 'table' (f16 always), 'matrix' (f16 or Q8_0)."""
        a = np.ascontiguousarray(array, dtype=np.float32)
        if kind == "vector":
            w.add_tensor(gguf_name, a)
        elif kind == "matrix" and quantized and ".attn_v." not in gguf_name:
            q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(gguf_name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(gguf_name, a.astype(np.float16))

    add("token_embd.weight", t("embeddings.word_embeddings.weight"), "matrix")
    # Position and token-type tables stay f32: llama.cpp adds them to the gathered rows as they
    # are stored, and its CPU add takes no f16 operand.
    add("token_types.weight", t("embeddings.token_type_embeddings.weight"), "vector")
    # Only the positions the context allows (llama.cpp checks position_embd against it).
    add("position_embd.weight", t("embeddings.position_embeddings.weight")[:context], "vector")
    add("token_embd_norm.weight", t("embeddings.LayerNorm.weight"), "vector")
    add("token_embd_norm.bias", t("embeddings.LayerNorm.bias"), "vector")
    for i in range(config["num_hidden_layers"]):
        src = f"encoder.layer.{i}."
        dst = f"blk.{i}."
        pairs = [
            ("attention.self.query", "attn_q"),
            ("attention.self.key", "attn_k"),
            ("attention.self.value", "attn_v"),
            ("attention.output.dense", "attn_output"),
            ("intermediate.dense", "ffn_up"),
            ("output.dense", "ffn_down"),
        ]
        for hf, ours in pairs:
            add(dst + ours + ".weight", t(src + hf + ".weight"), "matrix")
            add(dst + ours + ".bias", t(src + hf + ".bias"), "vector")
        add(dst + "attn_output_norm.weight", t(src + "attention.output.LayerNorm.weight"), "vector")
        add(dst + "attn_output_norm.bias", t(src + "attention.output.LayerNorm.bias"), "vector")
        add(dst + "layer_output_norm.weight", t(src + "output.LayerNorm.weight"), "vector")
        add(dst + "layer_output_norm.bias", t(src + "output.LayerNorm.bias"), "vector")

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
