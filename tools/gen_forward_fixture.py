#!/usr/bin/env python3
"""Independent numpy reference for the Llama and Gemma 3 forward passes; writes the fixture.

    .venv/bin/python tools/gen_forward_fixture.py --model models/gemma-3-270m-q4_k_m.gguf
        (-> tests/fixtures/engine/gemma3_forward_reference.json; forward_gemma3 below says what
        it computes; --check there compares it with transformers' Gemma3ForCausalLM, which
        needs torch: run it with the benchmark environment's python)

    .venv/bin/python tools/gen_forward_fixture.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
                                         [--out tests/fixtures/engine/forward_reference.json]
                                         [--check] [--simulate-q8]

Reads the GGUF with the `gguf` package (GGUFReader + gguf.quants.dequantize), dequantizes every
tensor once, and runs the Llama architecture as llama.cpp runs `general.architecture == llama`
(SmolLM2 is a plain llama): token embedding; per layer RMSNorm -> Q/K/V -> RoPE -> causal GQA
attention -> output projection -> residual -> RMSNorm -> SwiGLU FFN -> residual; final RMSNorm;
output head (tied to token_embd when the file has no output.weight).

Arithmetic is float64 throughout (the dequantized weights are exact in float64), so the fixture is
the exact-arithmetic logits of the dequantized model: any difference a C++ engine shows against it
is that engine's own rounding (float32 accumulation, activations quantized to 8 bits for the
quantized dot products, ...), not the reference's.

Token ids come from the tokenizer that `transformers` builds from a GGUF (its own
`gguf_tokenizer_mapping` converter, the code `AutoTokenizer.from_pretrained(..., gguf_file=...)`
uses; we call it directly because transformers' GGUF *file reader* imports torch, which is not
installed here). The ids are written into the fixture, so the C++ test needs no tokenizer.

--check additionally runs two cross-checks (a few seconds):
  * our own block decoder for Q4_1 / Q8_0 (written from the ggml block layout) against
    gguf.quants.dequantize on two tensors: must be bit-identical;
  * the RoPE layout: undo llama.cpp's Q/K row permutation (back to the Hugging Face layout) and run
    the first prompt with HF's rotate_half ("neox") RoPE: the logits must equal ours to ~1e-9.

--simulate-q8 writes nothing: it reruns the prompts with every matmul input rounded to 8-bit
blocks of 32 (what llama.cpp's Q4_1/Q8_0 dot products see) and prints how far that lands from
the fixture, which sizes the tolerance a C++ test can justify.
"""

import argparse
import hashlib
import json
import os
import sys
import time

import numpy as np
import gguf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_OUT = os.path.join(REPO, "tests", "fixtures", "engine", "forward_reference.json")
GEMMA3_MODEL = os.path.join(REPO, "models", "gemma-3-270m-q4_k_m.gguf")
GEMMA3_OUT = os.path.join(REPO, "tests", "fixtures", "engine", "gemma3_forward_reference.json")

N_GREEDY = 64  # tokens generated greedily after each prompt
N_TOP = 5  # top-k ids and logits recorded per prompt position
N_SUBSET = 64  # vocab ids whose logits are recorded at every position
SUBSET_SEED = 20250214

# Three prompts: short plain text, a ChatML chat turn, a long plain text. No digits, so the
# tokenization does not depend on how a tokenizer splits numbers.
PROMPTS = [
    {"name": "short_text", "kind": "text",
     "text": "The quick brown fox jumps over the lazy dog. The"},
    {"name": "chat_turn", "kind": "chat",
     "messages": [{"role": "user", "content": "Explain how photosynthesis works in plants."}]},
    {"name": "long_text", "kind": "text",
     "text": ("The history of the printing press begins in the middle of the fifteenth century, "
              "when Johannes Gutenberg, a goldsmith from Mainz, combined several existing "
              "technologies into a single machine. Movable metal type, oil-based ink and a screw "
              "press adapted from those used to make wine allowed a small workshop to produce "
              "hundreds of identical pages in a day. Within a few decades, printers had set up "
              "shops in every major city of Europe, and the price of books fell so quickly that "
              "reading, once a privilege of monks and nobles, became part of the daily life of "
              "merchants and craftsmen. Historians still debate how much")},
]


# Gemma 3 270M is a base model and its GGUF has no chat template: three plain texts, the last
# longer than the sliding window (512 positions), so that the local layers' window matters.
WINDOW_TEXT = " ".join([
    PROMPTS[2]["text"] + " the press changed the way people thought, and how much it only "
    "reflected changes that were already under way.",
    "Rivers shaped the first cities as much as any king did. Farmers settled where the water "
    "rose and fell with the seasons, leaving behind a layer of rich soil that fed their crops. "
    "To share that water fairly they needed rules, and to keep the rules they needed people who "
    "could count, write and remember, so the first scribes appeared beside the first canals. "
    "Granaries were built to store the harvest, walls to protect the granaries, and temples to "
    "thank the gods who were believed to send the flood. Trade followed the rivers too: boats "
    "carried grain downstream and brought back timber, stone and metal from the hills.",
    "Bridges tell a similar story in a smaller space. A fallen tree across a stream was the "
    "first of them, and for a long time rope and wood were all that travellers could expect. "
    "Stone arches lasted longer and carried heavier loads, but they took years to build and "
    "needed skilled masons who knew how to cut each block so that the weight pressed the arch "
    "together instead of pulling it apart. Iron, and later steel, let engineers span wide "
    "valleys with slender frames, while cables hung from tall towers carried roads over bays "
    "that no arch could cross. Each new material brought its own failures, and engineers "
    "learned as much from the bridges that fell as from those that stood.",
    "Gardens, finally, show how people try to hold nature in place. A walled garden keeps the "
    "wind out and the warmth in, so that fruit ripens earlier than it would in an open field. "
    "Paths divide the beds, and the beds divide the plants by their needs: sun or shade, wet "
    "soil or dry, rich ground or poor. Gardeners prune, graft and water, and every year the "
    "weeds return, the birds take their share and the weather refuses to follow any plan. "
    "Still, a well kept garden gives more than food; it gives a place to walk slowly, to "
    "notice the change of the seasons and to think about the work of the hands that made it.",
    "Taken together, these stories suggest that the tools people build are never only tools. "
    "They carry the habits, the hopes and the fears of the people who made them, and they "
    "change the lives of everyone who uses them long after their makers are forgotten. When we"])
GEMMA3_PROMPTS = [PROMPTS[0], PROMPTS[2],
                  {"name": "past_window", "kind": "text", "text": WINDOW_TEXT}]


# ----------------------------------------------------------------------------------------------
# Reading the model


def field(reader, key, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def load_model(path):
    reader = gguf.GGUFReader(path)
    arch = field(reader, "general.architecture")
    assert arch in ("llama", "qwen3", "phi3", "gemma2", "gemma3"), f"no reference for {arch}"
    assert field(reader, f"{arch}.rope.scaling.type") in (None, "none"), "rope scaling not handled"
    cfg = {
        "arch": arch,
        "n_layer": field(reader, f"{arch}.block_count"),
        "n_embd": field(reader, f"{arch}.embedding_length"),
        "n_ff": field(reader, f"{arch}.feed_forward_length"),
        "n_head": field(reader, f"{arch}.attention.head_count"),
        "n_head_kv": field(reader, f"{arch}.attention.head_count_kv"),
        "rope_theta": float(field(reader, f"{arch}.rope.freq_base", 10000.0)),
        "rms_eps": float(field(reader, f"{arch}.attention.layer_norm_rms_epsilon")),
    }
    cfg["head_dim"] = field(reader, f"{arch}.attention.key_length",
                            cfg["n_embd"] // cfg["n_head"])
    cfg["n_rot"] = field(reader, f"{arch}.rope.dimension_count", cfg["head_dim"])
    if arch not in ("gemma2", "gemma3") and \
            field(reader, f"{arch}.attention.sliding_window") is not None:
        cfg["sliding_window"] = field(reader, f"{arch}.attention.sliding_window")  # every layer
    if arch == "gemma3":
        # Hugging Face's Gemma3TextConfig: every 6th layer (5, 11, ...) attends globally with
        # rope_theta (1e6 here); the others see the last `sliding_window` positions (their own
        # included) with rope_local_base_freq 10,000. The GGUF stores the window and the global
        # base; the pattern and the local base are the architecture's constants (llama.cpp's
        # loader hard-codes the same two).
        cfg["sliding_window"] = field(reader, "gemma3.attention.sliding_window")
        cfg["sliding_window_pattern"] = 6
        cfg["rope_theta_local"] = 10000.0
        # query_pre_attn_scalar: head_dim for every size but 27B (62 layers: n_embd / n_head).
        cfg["attn_scalar"] = (cfg["n_embd"] // cfg["n_head"] if cfg["n_layer"] == 62
                              else cfg["head_dim"])
    if arch == "gemma2":
        # Hugging Face's Gemma2Config: layers 0, 2, ... slide, all with rope_theta; scores and
        # logits soft-capped; query_pre_attn_scalar n_embd / n_head for the 46-layer 27B.
        cfg["sliding_window"] = field(reader, "gemma2.attention.sliding_window")
        cfg["sliding_window_pattern"] = 2
        cfg["rope_theta_local"] = cfg["rope_theta"]
        cfg["attn_scalar"] = (cfg["n_embd"] // cfg["n_head"] if cfg["n_layer"] == 46
                              else cfg["head_dim"])
        cfg["attn_softcap"] = field(reader, "gemma2.attn_logit_softcapping")
        cfg["final_softcap"] = field(reader, "gemma2.final_logit_softcapping")

    # Every tensor dequantized to float64, numpy row-major: a GGUF matrix of ne = [n_in, n_out]
    # becomes W[n_out, n_in], and y = W @ x.
    w = {}
    for t in reader.tensors:
        w[t.name] = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
    if "output.weight" not in w:
        w["output.weight"] = w["token_embd.weight"]  # tied embeddings
    cfg["n_vocab"] = w["token_embd.weight"].shape[0]
    return reader, cfg, w


# ----------------------------------------------------------------------------------------------
# The forward pass


def rmsnorm(x, weight, eps):
    # x: [n_tok, n_embd], weight: [n_embd]
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rope_norm(x, pos, n_rot, theta, factors=None):
    # x: [n_tok, n_heads, head_dim], pos: [n_tok]. llama.cpp "normal" RoPE: rotates adjacent pairs
    # (x[2i], x[2i+1]) by angle pos * theta^(-2i/n_rot), i < n_rot/2; dims >= n_rot untouched.
    #
    # Why adjacent pairs: Hugging Face's Llama rotates (x[i], x[i + head_dim/2]) ("rotate_half").
    # llama.cpp's convert_hf_to_gguf.py (LlamaModel.modify_tensors -> permute) reorders the rows of
    # q_proj/k_proj per head with reshape(n_head, 2, head_dim/2, n_in).swapaxes(1, 2), which moves
    # HF row i to 2i and row i + head_dim/2 to 2i+1; llama_model_rope_type() returns
    # LLAMA_ROPE_TYPE_NORM ("a normal RoPE, operating on pairs of consecutive head values") for
    # LLM_ARCH_LLAMA; transformers' GGUF loader undoes the same permutation
    # (LlamaTensorProcessor._reverse_permute_weights). --check verifies the equivalence numerically.
    i = np.arange(n_rot // 2)
    freq = theta ** (-2.0 * i / n_rot)  # [n_rot/2]
    if factors is not None:  # rope_freqs.weight (Llama 3's scaling): theta_i / factor_i
        freq = freq / factors
    ang = pos[:, None].astype(np.float64) * freq[None, :]  # [n_tok, n_rot/2]
    cos = np.cos(ang)[:, None, :]  # [n_tok, 1, n_rot/2]
    sin = np.sin(ang)[:, None, :]
    x0 = x[..., 0:n_rot:2]  # [n_tok, n_heads, n_rot/2]
    x1 = x[..., 1:n_rot:2]
    out = x.copy()
    out[..., 0:n_rot:2] = x0 * cos - x1 * sin
    out[..., 1:n_rot:2] = x0 * sin + x1 * cos
    return out


def rope_neox(x, pos, n_rot, theta, factors=None):
    # Hugging Face "rotate_half" RoPE: pairs (x[i], x[i + n_rot/2]) (qwen3, phi3, gemma3; for
    # llama files only by --check).
    half = n_rot // 2
    freq = theta ** (-2.0 * np.arange(half) / n_rot)
    if factors is not None:
        freq = freq / factors
    ang = pos[:, None].astype(np.float64) * freq[None, :]
    cos = np.cos(ang)[:, None, :]
    sin = np.sin(ang)[:, None, :]
    x0 = x[..., :half]
    x1 = x[..., half:n_rot]
    out = x.copy()
    out[..., :half] = x0 * cos - x1 * sin
    out[..., half:n_rot] = x0 * sin + x1 * cos
    return out


def q8_round(x):
    # Rounds activations the way llama.cpp feeds them to Q4_1/Q8_0 dot products (Q8_1/Q8_0
    # blocks of 32: scale = max|x| / 127, values rounded to int8). Used only by --simulate-q8.
    n_tok, n = x.shape
    b = x.reshape(n_tok, n // 32, 32).astype(np.float32)
    d = np.abs(b).max(axis=-1, keepdims=True) / 127.0
    q = np.round(b / np.where(d == 0, 1, d))
    return (q * d).reshape(n_tok, n).astype(np.float64)


SIMULATE_Q8 = False  # set by --simulate-q8


def linear(x, weight):
    # x: [n_tok, n_in], weight: [n_out, n_in] -> [n_tok, n_out]
    if SIMULATE_Q8:
        x = q8_round(x)
    return x @ weight.T


def new_cache(cfg):
    # Per layer K and V of all positions so far: [n_pos, n_head_kv, head_dim] each.
    shape = (0, cfg["n_head_kv"], cfg["head_dim"])
    return [{"k": np.zeros(shape), "v": np.zeros(shape)} for _ in range(cfg["n_layer"])]


def gelu_tanh(x):
    # Hugging Face's gelu_pytorch_tanh (and ggml's gelu): the tanh approximation.
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def attention(q, kk, vv, pos, scale, window=None, softcap=None):
    """Causal GQA attention: q [n_tok, n_head, hd], kk/vv [n_pos, n_head_kv, hd], pos [n_tok];
    with `window`, a token sees only the last `window` positions (its own included); with
    `softcap`, scores become softcap * tanh(score / softcap) (Gemma 2)."""
    n_tok, n_head, hd = q.shape
    group = n_head // kk.shape[1]
    keys = np.arange(kk.shape[0])[None, :]
    visible = pos[:, None] >= keys  # [n_tok, n_pos]
    if window is not None:
        visible &= keys > pos[:, None] - window
    out = np.empty((n_tok, n_head, hd))
    for hq in range(n_head):
        hk = hq // group
        scores = q[:, hq, :] @ kk[:, hk, :].T * scale  # [n_tok, n_pos]
        if softcap:
            scores = softcap * np.tanh(scores / softcap)
        scores = np.where(visible, scores, -np.inf)
        scores -= scores.max(axis=-1, keepdims=True)
        prob = np.exp(scores)
        prob /= prob.sum(axis=-1, keepdims=True)
        out[:, hq, :] = prob @ vv[:, hk, :]
    return out


def forward_gemma3(cfg, w, tokens, cache):
    """Gemma 3 as Hugging Face's Gemma3ForCausalLM computes it (and llama.cpp's gemma3 graph):

    x = token_embd[tokens] * sqrt(n_embd)
    per layer: h = RMSNorm(x) * attn_norm; q, k, v = h Wq, h Wk, h Wv;
               q, k = RMSNorm per head * attn_{q,k}_norm, then NeoX RoPE (local or global base);
               a = attention (sliding window on 5 of every 6 layers), scale attn_scalar^-1/2;
               x += RMSNorm(a Wo) * post_attention_norm
               h = RMSNorm(x) * ffn_norm; x += RMSNorm(down(gelu_tanh(h Wgate) * h Wup)) * post_ffw_norm
    logits = RMSNorm(x) * output_norm @ token_embd^T
    The GGUF's norm weights already hold Hugging Face's (1 + weight) (llama.cpp's converter adds
    the 1), so every norm here is a plain RMSNorm times the stored weight.
    """
    n_tok = len(tokens)
    n_head, n_head_kv, hd = cfg["n_head"], cfg["n_head_kv"], cfg["head_dim"]
    eps = cfg["rms_eps"]
    start = cache[0]["k"].shape[0]
    pos = np.arange(start, start + n_tok)
    x = w["token_embd.weight"][np.asarray(tokens)] * np.sqrt(cfg["n_embd"])
    scale = cfg["attn_scalar"] ** -0.5
    for il in range(cfg["n_layer"]):
        p = f"blk.{il}."
        is_global = (il + 1) % cfg["sliding_window_pattern"] == 0
        theta = cfg["rope_theta"] if is_global else cfg["rope_theta_local"]
        h = rmsnorm(x, w[p + "attn_norm.weight"], eps)
        q = linear(h, w[p + "attn_q.weight"]).reshape(n_tok, n_head, hd)
        k = linear(h, w[p + "attn_k.weight"]).reshape(n_tok, n_head_kv, hd)
        v = linear(h, w[p + "attn_v.weight"]).reshape(n_tok, n_head_kv, hd)
        if p + "attn_q_norm.weight" in w:  # Gemma 3's; Gemma 2 has none
            q = rmsnorm(q, w[p + "attn_q_norm.weight"], eps)
            k = rmsnorm(k, w[p + "attn_k_norm.weight"], eps)
        q = rope_neox(q, pos, cfg["n_rot"], theta)
        k = rope_neox(k, pos, cfg["n_rot"], theta)
        cache[il]["k"] = np.concatenate([cache[il]["k"], k])
        cache[il]["v"] = np.concatenate([cache[il]["v"], v])
        a = attention(q, cache[il]["k"], cache[il]["v"], pos, scale,
                      None if is_global else cfg["sliding_window"], cfg.get("attn_softcap"))
        o = linear(a.reshape(n_tok, n_head * hd), w[p + "attn_output.weight"])
        x = x + rmsnorm(o, w[p + "post_attention_norm.weight"], eps)
        h = rmsnorm(x, w[p + "ffn_norm.weight"], eps)
        act = gelu_tanh(linear(h, w[p + "ffn_gate.weight"])) * linear(h, w[p + "ffn_up.weight"])
        x = x + rmsnorm(linear(act, w[p + "ffn_down.weight"]), w[p + "post_ffw_norm.weight"], eps)
    x = rmsnorm(x, w["output_norm.weight"], eps)
    logits = linear(x, w["output.weight"])
    if cfg.get("final_softcap"):
        logits = cfg["final_softcap"] * np.tanh(logits / cfg["final_softcap"])
    return logits


def forward(cfg, w, tokens, cache, rope=rope_norm):
    """Runs tokens (positions len(cache k) ...) through the model; appends their K/V to cache.

    Returns logits [n_tok, n_vocab] for every token given.
    """
    if cfg["arch"] in ("gemma2", "gemma3"):
        return forward_gemma3(cfg, w, tokens, cache)
    if cfg["arch"] in ("qwen3", "phi3"):
        rope = rope_neox  # llama.cpp converts them without permuting Q/K rows
    factors = w.get("rope_freqs.weight")
    n_tok = len(tokens)
    n_head, n_head_kv, hd = cfg["n_head"], cfg["n_head_kv"], cfg["head_dim"]
    group = n_head // n_head_kv  # query heads per K/V head (GQA)
    start = cache[0]["k"].shape[0]
    pos = np.arange(start, start + n_tok)  # [n_tok]

    x = w["token_embd.weight"][np.asarray(tokens)]  # [n_tok, n_embd]
    for il in range(cfg["n_layer"]):
        p = f"blk.{il}."
        # --- attention
        h = rmsnorm(x, w[p + "attn_norm.weight"], cfg["rms_eps"])  # [n_tok, n_embd]
        # q: [n_tok, n_head, hd]; k, v: [n_tok, n_head_kv, hd]
        if p + "attn_qkv.weight" in w:  # phi3: Q|K|V rows in one matrix
            qkv = linear(h, w[p + "attn_qkv.weight"])
            q_dim, kv_dim = n_head * hd, n_head_kv * hd
            q, k, v = qkv[:, :q_dim], qkv[:, q_dim:q_dim + kv_dim], qkv[:, q_dim + kv_dim:]
        else:
            q = linear(h, w[p + "attn_q.weight"])
            k = linear(h, w[p + "attn_k.weight"])
            v = linear(h, w[p + "attn_v.weight"])
        q = q.reshape(n_tok, n_head, hd)
        k = k.reshape(n_tok, n_head_kv, hd)
        v = v.reshape(n_tok, n_head_kv, hd)
        if p + "attn_q_norm.weight" in w:  # qwen3: RMSNorm of each head before RoPE
            q = rmsnorm(q, w[p + "attn_q_norm.weight"], cfg["rms_eps"])
            k = rmsnorm(k, w[p + "attn_k_norm.weight"], cfg["rms_eps"])
        q = rope(q, pos, cfg["n_rot"], cfg["rope_theta"], factors)
        k = rope(k, pos, cfg["n_rot"], cfg["rope_theta"], factors)
        cache[il]["k"] = np.concatenate([cache[il]["k"], k])  # [n_pos, n_head_kv, hd]
        cache[il]["v"] = np.concatenate([cache[il]["v"], v])
        assert group * n_head_kv == n_head
        att_out = attention(q, cache[il]["k"], cache[il]["v"], pos, 1.0 / np.sqrt(hd),
                            cfg.get("sliding_window"))
        x = x + linear(att_out.reshape(n_tok, n_head * hd), w[p + "attn_output.weight"])

        # --- feed-forward (SwiGLU)
        h = rmsnorm(x, w[p + "ffn_norm.weight"], cfg["rms_eps"])  # [n_tok, n_embd]
        if p + "ffn_gate.weight" in w:
            gate = linear(h, w[p + "ffn_gate.weight"])  # [n_tok, n_ff]
            up = linear(h, w[p + "ffn_up.weight"])  # [n_tok, n_ff]
        else:  # phi3: gate|up rows in one matrix
            gate, up = np.split(linear(h, w[p + "ffn_up.weight"]), 2, axis=-1)
        act = gate / (1.0 + np.exp(-gate)) * up  # silu(gate) * up
        x = x + linear(act, w[p + "ffn_down.weight"])  # [n_tok, n_embd]

    x = rmsnorm(x, w["output_norm.weight"], cfg["rms_eps"])  # [n_tok, n_embd]
    return linear(x, w["output.weight"])  # [n_tok, n_vocab]


# ----------------------------------------------------------------------------------------------
# Tokenizer (transformers' GGUF converter, fed from gguf.GGUFReader)


def build_tokenizer(reader, path):
    if field(reader, "general.architecture") == "gemma3":
        # transformers' own GGUF loading (its reader needs torch: the benchmark environment).
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(path)),
                                             gguf_file=os.path.basename(path))
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        add_gguf_special_tokens, select_tokenizer_builder, set_split_regex)
    d = {
        "tokenizer_type": field(reader, "tokenizer.ggml.model"),
        "pre_tokenizer_type": field(reader, "tokenizer.ggml.pre"),
        "tokens": field(reader, "tokenizer.ggml.tokens"),
        "token_type": field(reader, "tokenizer.ggml.token_type"),
        "merges": field(reader, "tokenizer.ggml.merges"),
    }
    tok = select_tokenizer_builder(field(reader, "general.architecture"), d["tokenizer_type"])(d)
    tok = add_gguf_special_tokens(tok, d)
    tok = set_split_regex(tok, d)
    tok.chat_template = field(reader, "tokenizer.chat_template")
    return tok


def prompt_ids(tok, prompt, reader):
    if prompt["kind"] == "chat":
        text = tok.apply_chat_template(prompt["messages"], add_generation_prompt=True,
                                       tokenize=False)
    else:
        text = prompt["text"]
    ids = [int(i) for i in tok(text, add_special_tokens=False)["input_ids"]]
    if prompt["kind"] == "text" and field(reader, "tokenizer.ggml.add_bos_token", False):
        ids = [int(field(reader, "tokenizer.ggml.bos_token_id"))] + ids  # as llama.cpp does
    return text, ids


# ----------------------------------------------------------------------------------------------
# Cross-checks (--check)


def own_dequant(t):
    """Block decoder written from ggml's layouts, independent of gguf.quants."""
    raw = np.asarray(t.data).view(np.uint8).reshape(-1)
    name = t.tensor_type.name
    if name == "Q8_0":  # block of 32: f16 d, int8 q[32]; x = d * q
        blk = raw.reshape(-1, 34)
        d = blk[:, 0:2].copy().view(np.float16).astype(np.float32)
        q = blk[:, 2:].copy().view(np.int8).astype(np.float32)
        out = d * q
    elif name == "Q4_1":  # block of 32: f16 d, f16 m, 16 bytes: low nibbles x[0:16], high x[16:32]
        blk = raw.reshape(-1, 20)
        d = blk[:, 0:2].copy().view(np.float16).astype(np.float32)
        m = blk[:, 2:4].copy().view(np.float16).astype(np.float32)
        qs = blk[:, 4:]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)
        out = d * q + m
    else:
        raise ValueError(name)
    return out.reshape(np.asarray(t.data).shape[0], -1)


def check_gemma3_against_transformers(cfg, w, ids):
    """Hugging Face's own Gemma3ForCausalLM, built from a config with this file's weights (norm
    weights minus the 1 the converter added), in float64, on `ids` and on `ids` followed by 600
    more tokens (past the sliding window). Needs torch, which only the benchmark's environment
    has (PIER_ST_PYTHON in scripts/bench-embeddings); never bootstrap's."""
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    conf = Gemma3TextConfig(
        vocab_size=cfg["n_vocab"], hidden_size=cfg["n_embd"], intermediate_size=cfg["n_ff"],
        num_hidden_layers=cfg["n_layer"], num_attention_heads=cfg["n_head"],
        num_key_value_heads=cfg["n_head_kv"], head_dim=cfg["head_dim"],
        sliding_window=cfg["sliding_window"], rope_theta=cfg["rope_theta"],
        rope_local_base_freq=cfg["rope_theta_local"], query_pre_attn_scalar=cfg["attn_scalar"],
        rms_norm_eps=cfg["rms_eps"], tie_word_embeddings=True, attn_implementation="eager")
    model = Gemma3ForCausalLM(conf).to(torch.float64).eval()
    tensor = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    sd = {"model.embed_tokens.weight": tensor(w["token_embd.weight"]),
          "model.norm.weight": tensor(w["output_norm.weight"] - 1)}
    mats = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
            "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
            "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    norms = {"attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
             "attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
             "ffn_norm": "pre_feedforward_layernorm",
             "post_ffw_norm": "post_feedforward_layernorm"}
    for il in range(cfg["n_layer"]):
        for ours, theirs in mats.items():
            sd[f"model.layers.{il}.{theirs}.weight"] = tensor(w[f"blk.{il}.{ours}.weight"])
        for ours, theirs in norms.items():
            sd[f"model.layers.{il}.{theirs}.weight"] = tensor(w[f"blk.{il}.{ours}.weight"] - 1)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert missing == ["lm_head.weight"] and not unexpected, (missing, unexpected)  # tied
    extra = [int(i) for i in np.random.default_rng(7).integers(1000, 50000, 600)]
    for name, x in (("prompt", ids), ("prompt + 600 tokens", ids + extra)):
        with torch.no_grad():
            theirs = model(torch.tensor([x])).logits[0].numpy()
        ours = forward(cfg, w, x, new_cache(cfg))
        rms = np.sqrt(np.mean(ours * ours))
        err = np.abs(theirs - ours).max()
        print(f"check: transformers' Gemma3ForCausalLM vs ours, {name} ({len(x)} tokens): max "
              f"|d logit| {err:.2e} (RMS logit {rms:.2f}); argmax equal at "
              f"{np.mean(theirs.argmax(-1) == ours.argmax(-1)):.0%} of positions")
        assert err < 1e-3 * rms, "Gemma 3 reference disagrees with transformers"


def run_checks(reader, cfg, w, ids):
    if cfg["arch"] == "gemma3":
        return check_gemma3_against_transformers(cfg, w, ids)
    for name in ("token_embd.weight", "blk.0.ffn_down.weight"):
        t = next(t for t in reader.tensors if t.name == name)
        ours = own_dequant(t)
        theirs = gguf.quants.dequantize(t.data, t.tensor_type)
        assert np.array_equal(ours, theirs), f"dequantization mismatch on {name}"
        print(f"check: own {t.tensor_type.name} decoder == gguf.quants.dequantize on {name}")

    def unpermute(m, n_heads):  # GGUF rows back to HF rows (inverse of convert_hf_to_gguf permute)
        return m.reshape(n_heads, m.shape[0] // n_heads // 2, 2, m.shape[1]).swapaxes(1, 2) \
                .reshape(m.shape)

    w_hf = dict(w)
    for il in range(cfg["n_layer"]):
        p = f"blk.{il}."
        w_hf[p + "attn_q.weight"] = unpermute(w[p + "attn_q.weight"], cfg["n_head"])
        w_hf[p + "attn_k.weight"] = unpermute(w[p + "attn_k.weight"], cfg["n_head_kv"])
    a = forward(cfg, w, ids, new_cache(cfg))
    b = forward(cfg, w_hf, ids, new_cache(cfg), rope=rope_neox)
    c = forward(cfg, w, ids, new_cache(cfg), rope=rope_neox)  # the wrong pairing, for contrast
    print(f"check: max |logits(norm RoPE, GGUF rows) - logits(neox RoPE, HF rows)| = "
          f"{np.abs(a - b).max():.3e}; with the wrong pairing: {np.abs(a - c).max():.3e}")
    assert np.abs(a - b).max() < 1e-8, "RoPE layout cross-check failed"


# ----------------------------------------------------------------------------------------------
# Fixture


def f7(x):
    return float(f"{float(x):.7g}")


def position_record(row, subset):
    # row: [n_vocab] float64 logits of one position
    top = np.argsort(-row, kind="stable")[:N_TOP]
    mx = row.max()
    return {
        "argmax": int(np.argmax(row)),
        "top_ids": [int(i) for i in top],
        "top_logits": [f7(row[i]) for i in top],
        "subset_logits": [f7(row[i]) for i in subset],
        "logsumexp": f7(mx + np.log(np.sum(np.exp(row - mx)))),
        "l2_norm": f7(np.sqrt(np.sum(row * row))),
    }


def greedy(cfg, w, ids, cache, last_logits):
    """Greedy continuation from a prefilled cache; never stops at an end-of-generation token."""
    steps = []
    row = last_logits
    for _ in range(N_GREEDY):
        order = np.argsort(-row, kind="stable")[:2]
        t1, t2 = int(order[0]), int(order[1])
        steps.append({"id": t1, "second_id": t2, "logit": f7(row[t1]),
                      "second_logit": f7(row[t2]), "gap": f7(row[t1] - row[t2])})
        row = forward(cfg, w, [t1], cache)[0]
    return steps


def write_fixture(path, fixture):
    """The fixture as compact JSON (one line and a newline), its folder made if needed."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(fixture, f, separators=(",", ":"))
        f.write("\n")


def simulate_q8(args):
    """How far an engine that quantizes activations (as llama.cpp does) lands from the fixture."""
    global SIMULATE_Q8
    with open(args.out) as f:
        fixture = json.load(f)
    reader, cfg, w = load_model(args.model)
    subset = fixture["subset_ids"]
    SIMULATE_Q8 = True
    for ref in fixture["prompts"]:
        cache = new_cache(cfg)
        logits = forward(cfg, w, ref["ids"], cache)
        max_abs, max_rel, flips = 0.0, 0.0, []
        for i, (row, pos) in enumerate(zip(logits, ref["positions"])):
            d = np.abs(row[subset] - np.asarray(pos["subset_logits"])).max()
            d = max(d, np.abs(row[pos["top_ids"]] - np.asarray(pos["top_logits"])).max())
            rms = pos["l2_norm"] / np.sqrt(cfg["n_vocab"])
            max_abs, max_rel = max(max_abs, d), max(max_rel, d / rms)
            if int(np.argmax(row)) != pos["argmax"]:
                flips.append((i, pos["top_logits"][0] - pos["top_logits"][1]))
        row = logits[-1]
        diverged = None
        for j, step in enumerate(ref["greedy"]):
            t = int(np.argmax(row))
            if t != step["id"]:
                diverged = (j, step["gap"])
                break
            row = forward(cfg, w, [t], cache)[0]
        print(f"{ref['name']}: max |d logit| {max_abs:.4f} (max relative to the row's RMS logit "
              f"{max_rel:.4f}); argmax flips at (position, reference top-2 gap): {flips}; "
              f"greedy first divergence (step, reference gap): {diverged}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--out", default=None,
                    help=f"default: {DEFAULT_OUT} (llama) or {GEMMA3_OUT} (gemma3)")
    ap.add_argument("--check", action="store_true", help="run the cross-checks too")
    ap.add_argument("--simulate-q8", action="store_true",
                    help="do not write: compare the fixture at --out with a run whose matmul "
                         "inputs are rounded to 8-bit blocks as llama.cpp's kernels do")
    args = ap.parse_args()
    if args.out is None:
        arch = field(gguf.GGUFReader(args.model), "general.architecture")
        args.out = GEMMA3_OUT if arch == "gemma3" else DEFAULT_OUT
    if args.simulate_q8:
        return simulate_q8(args)

    t_start = time.time()
    with open(args.model, "rb") as f:
        sha256 = hashlib.sha256(f.read()).hexdigest()
    reader, cfg, w = load_model(args.model)
    tok = build_tokenizer(reader, args.model)
    print(f"model loaded in {time.time() - t_start:.1f}s: {cfg}")

    subset = sorted(int(i) for i in np.random.default_rng(SUBSET_SEED).choice(
        cfg["n_vocab"], N_SUBSET, replace=False))
    fixture = {
        "generator": "tools/gen_forward_fixture.py",
        "model_file": os.path.basename(args.model),
        "model_sha256": sha256,
        "compute": "float64 numpy, weights dequantized with gguf.quants.dequantize",
        "notes": ("positions[i] are the logits after prompt token i (they predict token i+1). "
                  "greedy[j] is the j-th generated token (argmax, ties to the lowest id), with the "
                  "runner-up and the gap between the two top logits; generation does not stop at "
                  "end-of-generation tokens. Floats have 7 significant digits."),
        "config": cfg,
        "subset_ids": subset,
        "prompts": [],
    }

    for i, prompt in enumerate(GEMMA3_PROMPTS if cfg["arch"] == "gemma3" else PROMPTS):
        t0 = time.time()
        text, ids = prompt_ids(tok, prompt, reader)
        if args.check and i == 0:
            run_checks(reader, cfg, w, ids)
        cache = new_cache(cfg)
        logits = forward(cfg, w, ids, cache)  # [n_prompt, n_vocab]
        steps = greedy(cfg, w, ids, cache, logits[-1])
        gen_ids = [s["id"] for s in steps]
        fixture["prompts"].append({
            "name": prompt["name"],
            "kind": prompt["kind"],
            "text": text,
            "ids": ids,
            "positions": [position_record(row, subset) for row in logits],
            "greedy": steps,
            "greedy_text": tok.decode(gen_ids),
        })
        gaps = [s["gap"] for s in steps]
        print(f"{prompt['name']}: {len(ids)} prompt tokens, {time.time() - t0:.1f}s; "
              f"smallest greedy top-2 gap {min(gaps):.4f} at step {int(np.argmin(gaps))}")
        print("  continuation:", repr(tok.decode(gen_ids)))

    write_fixture(args.out, fixture)
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes) in "
          f"{time.time() - t_start:.1f}s total")


if __name__ == "__main__":
    sys.exit(main())
