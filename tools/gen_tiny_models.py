#!/usr/bin/env python3
"""Tiny random-weight GGUFs of the families without a small real model here, and their fixtures.

    .venv/bin/python tools/gen_tiny_models.py --gguf-only [--models models/tiny]
        (what scripts/bootstrap runs: numpy and gguf only; checks each file's SHA-256 against
        the one its committed fixture states)
    $PIER_ST_PYTHON tools/gen_tiny_models.py [--models models/tiny] [--out tests/fixtures/engine/tiny]
        (PIER_ST_PYTHON: a virtual environment with torch and transformers; rewrites the
        fixtures)

For each family (Llama 3 with its `llama3` RoPE scaling, Qwen 3, Phi-3, Gemma 2 with its
soft-capping and alternating windows, Mistral with a sliding window) this script:
  1. draws random weights from numpy's seeded generator under Hugging Face's parameter names
     for a tiny config (vocab 256, 64 wide, 3 layers, 4 query heads over 2 K/V heads), scaled
     so that the logits spread over several units;
  2. writes them as a GGUF the way llama.cpp's converter lays such a model out (tensor names,
     the Llama Q/K row permutation, Phi-3's fused qkv and gate|up, Llama 3's rope_freqs
     factors, Gemma's 1 + w norms, metadata keys), matrices in Q8_0 and norms in f32. The file
     depends only on numpy and gguf (pinned in requirements.txt), so bootstrap makes it again
     byte for byte: no model file is committed;
  3. (without --gguf-only) loads the GGUF's values into Hugging Face's own model class, checks
     that transformers' logits (float64, RoPE angles from float32 frequencies) and the
     independent numpy reference of tools/gen_forward_fixture.py (float64, read from the GGUF)
     agree to 1e-5 of the RMS logit, and writes the fixture (the numpy reference's, in
     gen_forward_fixture's format, with the GGUF's SHA-256: one prompt of 40 random ids, every
     position's top ids and a subset's logits, 24 greedy tokens).
"""

import argparse
import hashlib
import json
import os
import sys
from typing import NamedTuple

import numpy as np
import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_forward_fixture as ref  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "tests", "fixtures", "engine", "tiny")
DEFAULT_MODELS = os.path.join(REPO, "models", "tiny")
VOCAB, HIDDEN, FF, LAYERS, HEADS, KV_HEADS = 256, 64, 128, 3, 4, 2
N_PROMPT, N_GREEDY = 40, 24


class Dims(NamedTuple):
    """A model's sizes; tools/gen_draft_model.py writes another shape through the same code."""
    vocab: int = VOCAB
    hidden: int = HIDDEN
    ff: int = FF
    layers: int = LAYERS
    heads: int = HEADS
    kv_heads: int = KV_HEADS
    context: int = 256
    rms_eps: float = 1e-6


TINY = Dims()

FAMILIES = {
    # Llama 3.1's RoPE scaling, which llama.cpp's converter writes as rope_freqs.weight.
    "llama3": dict(arch="llama", cls="LlamaForCausalLM", head_dim=16, tie=False,
                   extra=dict(rope_theta=500000.0,
                              rope_scaling=dict(rope_type="llama3", factor=8.0,
                                                low_freq_factor=1.0, high_freq_factor=4.0,
                                                original_max_position_embeddings=32))),
    # Qwen 3: per-head Q/K RMSNorm, head_dim 32 (q is 128 wide over a 64-wide model).
    "qwen3": dict(arch="qwen3", cls="Qwen3ForCausalLM", head_dim=32, tie=True,
                  extra=dict(rope_theta=1000000.0)),
    # Phi-3: fused qkv_proj and gate_up_proj.
    "phi3": dict(arch="phi3", cls="Phi3ForCausalLM", head_dim=16, tie=False,
                 extra=dict(rope_theta=10000.0)),
    # Gemma 2: every other layer slides (16 positions), soft-capped scores and logits (caps
    # small enough to bite on these weights), norms stored as 1 + w, GELU-tanh, tied output.
    "gemma2": dict(arch="gemma2", cls="Gemma2ForCausalLM", head_dim=16, tie=True,
                   extra=dict(rope_theta=10000.0, sliding_window=16, query_pre_attn_scalar=16,
                              attn_logit_softcapping=4.0, final_logit_softcapping=6.0,
                              hidden_activation="gelu_pytorch_tanh")),
    # Mistral: llama architecture with a 16-position sliding window on every layer.
    "mistral": dict(arch="llama", cls="MistralForCausalLM", head_dim=16, tie=False,
                    extra=dict(rope_theta=10000.0, sliding_window=16)),
}


def random_weights(name, spec, dims=TINY):
    """Hugging Face-named float64 weights from numpy's generator seeded by the family's name:
    norms 1 + 0.2 N(0, 1), embeddings N(0, 1), an untied head 4 N(0, 1) / sqrt(fan_in) (logits a
    few units apart), other matrices 1.5 N(0, 1) / sqrt(fan_in) (every layer matters)."""
    rng = np.random.default_rng(sum(map(ord, name)))
    hd, arch = spec["head_dim"], spec["arch"]
    q_dim, kv_dim = dims.heads * hd, dims.kv_heads * hd
    sd = {}

    def mat(key, rows, cols, gain=1.5):
        sd[key] = rng.standard_normal((rows, cols)) * gain / np.sqrt(cols)

    def norm(key, n):
        sd[key] = 1.0 + 0.2 * rng.standard_normal(n)

    sd["model.embed_tokens.weight"] = rng.standard_normal((dims.vocab, dims.hidden))
    norm("model.norm.weight", dims.hidden)
    if not spec["tie"]:
        mat("lm_head.weight", dims.vocab, dims.hidden, 4.0)
    for il in range(dims.layers):
        h = f"model.layers.{il}."
        norm(h + "input_layernorm.weight", dims.hidden)
        norm(h + "post_attention_layernorm.weight", dims.hidden)
        if arch == "gemma2":
            norm(h + "pre_feedforward_layernorm.weight", dims.hidden)
            norm(h + "post_feedforward_layernorm.weight", dims.hidden)
        if arch == "phi3":
            mat(h + "self_attn.qkv_proj.weight", q_dim + 2 * kv_dim, dims.hidden)
            mat(h + "mlp.gate_up_proj.weight", 2 * dims.ff, dims.hidden)
        else:
            mat(h + "self_attn.q_proj.weight", q_dim, dims.hidden)
            mat(h + "self_attn.k_proj.weight", kv_dim, dims.hidden)
            mat(h + "self_attn.v_proj.weight", kv_dim, dims.hidden)
            mat(h + "mlp.gate_proj.weight", dims.ff, dims.hidden)
            mat(h + "mlp.up_proj.weight", dims.ff, dims.hidden)
        if arch == "qwen3":
            norm(h + "self_attn.q_norm.weight", hd)
            norm(h + "self_attn.k_norm.weight", hd)
        mat(h + "self_attn.o_proj.weight", dims.hidden, q_dim)
        mat(h + "mlp.down_proj.weight", dims.hidden, dims.ff)
    return sd


def hf_model(spec, loaded):
    """Hugging Face's own class for the family, holding exactly the GGUF's values."""
    import torch
    import transformers
    config_cls = getattr(transformers, spec["cls"].replace("ForCausalLM", "Config"))
    config = config_cls(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FF,
                        num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                        num_key_value_heads=KV_HEADS, head_dim=spec["head_dim"],
                        max_position_embeddings=256, rms_norm_eps=1e-6,
                        tie_word_embeddings=spec["tie"], attn_implementation="eager",
                        pad_token_id=0, bos_token_id=1, eos_token_id=2,
                        **spec["extra"])
    model = getattr(transformers, spec["cls"])(config).to(torch.float64).eval()
    state = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in loaded.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert set(missing) <= {"lm_head.weight"}, missing  # tied
    return model


def q8_round_trip(a):
    q = gguf.quants.quantize(a.astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    return q, gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q8_0).astype(np.float64)


def permute(m, n_heads):
    # llama.cpp's LlamaModel.permute: HF's rotate_half rows to adjacent pairs.
    return m.reshape(n_heads, 2, m.shape[0] // n_heads // 2, *m.shape[1:]).swapaxes(1, 2) \
            .reshape(m.shape)


def llama3_factors(extra, head_dim):
    # llama.cpp's converter (LlamaModel.generate_extra_tensors) for rope_type llama3.
    s, base = extra["rope_scaling"], extra["rope_theta"]
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old = s["original_max_position_embeddings"]
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    low_wavelen, high_wavelen = old / low, old / high
    out = []
    for f in freqs:
        wavelen = 2 * np.pi / f
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32), base


def write_gguf(path, name, spec, sd, dims=TINY, more_metadata=None):
    """Writes the GGUF of the weights `sd`; returns them as the file holds them (matrices after
    their Q8_0 round trip, norms rounded to f32), under Hugging Face's names. more_metadata(w),
    when given, adds keys after the model's own (a tokenizer's, say)."""
    arch, hd = spec["arch"], spec["head_dim"]
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"tiny-{name}")
    w.add_context_length(dims.context)
    w.add_embedding_length(dims.hidden)
    w.add_block_count(dims.layers)
    w.add_feed_forward_length(dims.ff)
    w.add_head_count(dims.heads)
    w.add_head_count_kv(dims.kv_heads)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    rope_base = spec["extra"].get("rope_theta", 10000.0)
    w.add_rope_freq_base(rope_base)
    w.add_layer_norm_rms_eps(dims.rms_eps)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    if "sliding_window" in spec["extra"]:
        w.add_sliding_window(spec["extra"]["sliding_window"])
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        if key in spec["extra"]:
            w.add_float32(f"{arch}.{key}", spec["extra"][key])
    if more_metadata is not None:
        more_metadata(w)
    loaded = {}

    def matrix(gguf_name, hf_name):
        q, loaded[hf_name] = q8_round_trip(sd[hf_name])
        w.add_tensor(gguf_name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    gemma = arch == "gemma2"

    def vector(gguf_name, hf_name):
        if gemma:  # llama.cpp's converter stores Gemma's norms as 1 + w; HF keeps w
            stored = (sd[hf_name] + 1.0).astype(np.float32)
            w.add_tensor(gguf_name, stored)
            loaded[hf_name] = stored.astype(np.float64) - 1.0  # exact: the same values
            return
        w.add_tensor(gguf_name, sd[hf_name].astype(np.float32))
        loaded[hf_name] = sd[hf_name].astype(np.float32).astype(np.float64)

    matrix("token_embd.weight", "model.embed_tokens.weight")
    vector("output_norm.weight", "model.norm.weight")
    if not spec["tie"]:
        matrix("output.weight", "lm_head.weight")
    if name == "llama3":
        factors, _ = llama3_factors(spec["extra"], hd)
        w.add_tensor("rope_freqs.weight", factors)
    for il in range(dims.layers):
        p, h = f"blk.{il}.", f"model.layers.{il}."
        vector(p + "attn_norm.weight", h + "input_layernorm.weight")
        if gemma:  # norms before and after each block
            vector(p + "post_attention_norm.weight", h + "post_attention_layernorm.weight")
            vector(p + "ffn_norm.weight", h + "pre_feedforward_layernorm.weight")
            vector(p + "post_ffw_norm.weight", h + "post_feedforward_layernorm.weight")
        else:
            vector(p + "ffn_norm.weight", h + "post_attention_layernorm.weight")
        if arch == "phi3":
            matrix(p + "attn_qkv.weight", h + "self_attn.qkv_proj.weight")
            matrix(p + "ffn_up.weight", h + "mlp.gate_up_proj.weight")
        else:
            for ours, theirs in (("attn_q", "q_proj"), ("attn_k", "k_proj"),
                                 ("attn_v", "v_proj")):
                hf_name = h + f"self_attn.{theirs}.weight"
                if arch == "llama" and ours in ("attn_q", "attn_k"):
                    # Quantize in HF row order, store the rows permuted (whole Q8_0 rows move).
                    heads = dims.heads if ours == "attn_q" else dims.kv_heads
                    q, back = q8_round_trip(sd[hf_name])
                    loaded[hf_name] = back
                    w.add_tensor(p + ours + ".weight", permute(q, heads),
                                 raw_dtype=gguf.GGMLQuantizationType.Q8_0)
                else:
                    matrix(p + ours + ".weight", hf_name)
            matrix(p + "ffn_gate.weight", h + "mlp.gate_proj.weight")
            matrix(p + "ffn_up.weight", h + "mlp.up_proj.weight")
            if arch == "qwen3":
                vector(p + "attn_q_norm.weight", h + "self_attn.q_norm.weight")
                vector(p + "attn_k_norm.weight", h + "self_attn.k_norm.weight")
        matrix(p + "attn_output.weight", h + "self_attn.o_proj.weight")
        matrix(p + "ffn_down.weight", h + "mlp.down_proj.weight")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return loaded


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=DEFAULT_MODELS, help="where the GGUFs go")
    ap.add_argument("--out", default=DEFAULT_OUT, help="where the fixtures go (and are read)")
    ap.add_argument("--gguf-only", action="store_true",
                    help="write the GGUFs and check them against the fixtures' SHA-256 only")
    args = ap.parse_args()
    os.makedirs(args.models, exist_ok=True)
    for name, spec in FAMILIES.items():
        path = os.path.join(args.models, f"{name}.gguf")
        fixture_path = os.path.join(args.out, f"{name}_reference.json")
        loaded = write_gguf(path + ".part", name, spec, random_weights(name, spec))
        os.replace(path + ".part", path)
        if args.gguf_only:
            with open(fixture_path) as f:
                want = json.load(f)["model_sha256"]
            got = sha256(path)
            if got != want:
                os.remove(path)
                sys.exit(f"gen_tiny_models: {path} came out with SHA-256 {got}, but "
                         f"{fixture_path} was made from {want} (another numpy or gguf than "
                         f"requirements.txt pins?)")
            continue
        import torch
        model = hf_model(spec, loaded)
        ids = [int(i) for i in np.random.default_rng(len(name)).integers(0, VOCAB, N_PROMPT)]
        with torch.no_grad():
            theirs = model(torch.tensor([ids])).logits[0].numpy()
        reader, cfg, w = ref.load_model(path)
        ours = ref.forward(cfg, w, ids, ref.new_cache(cfg))
        rms = float(np.sqrt(np.mean(ours * ours)))
        err = float(np.abs(theirs - ours).max())
        print(f"{name}: transformers' {spec['cls']} vs the numpy reference: max |d logit| "
              f"{err:.2e} (RMS logit {rms:.2f}); argmax equal at "
              f"{np.mean(theirs.argmax(-1) == ours.argmax(-1)):.0%} of {N_PROMPT} positions")
        # transformers computes RoPE's frequencies and angles in float32, so agreement is to
        # float32's precision, not float64's.
        assert err < 1e-5 * rms, f"{name}: the reference disagrees with transformers"
        cache = ref.new_cache(cfg)
        logits = ref.forward(cfg, w, ids, cache)
        ref.N_GREEDY = N_GREEDY
        steps = ref.greedy(cfg, w, ids, cache, logits[-1])
        subset = sorted(int(i) for i in np.random.default_rng(5).choice(VOCAB, 32, replace=False))
        fixture = {
            "generator": "tools/gen_tiny_models.py",
            "model_file": os.path.basename(path),
            "model_sha256": sha256(path),
            "family": name,
            "compute": ("float64 numpy (tools/gen_forward_fixture.py), equal to transformers' "
                        f"{spec['cls']} on the same weights to {err:.1e}"),
            "config": cfg,
            "subset_ids": subset,
            "prompts": [{"name": "random_ids", "kind": "ids", "ids": ids,
                         "positions": [ref.position_record(r, subset) for r in logits],
                         "greedy": steps}],
        }
        ref.write_fixture(fixture_path, fixture)
        print(f"  wrote {path} ({os.path.getsize(path)} bytes) and {fixture_path}; smallest "
              f"greedy gap {min(s['gap'] for s in steps):.3f}")


if __name__ == "__main__":
    sys.exit(main())
