#!/usr/bin/env python3
"""A tiny random-weight llama GGUF with the default model's tokenizer: a draft model for tests.

    .venv/bin/python tools/gen_draft_model.py [--source models/SmolLM2-135M-Instruct.Q4_1.gguf]
        [--out models/draft/smollm2-draft-tiny.gguf] [--tied]
        (what scripts/bootstrap runs, step 3i: numpy and gguf only)

Speculative decoding (issue #48) needs a draft model whose token ids mean what the target's
mean. The default model's own tokenizer is copied here, every tokenizer.* key byte for byte
(the GPT-2 BPE tokens, token types, merges, special ids, add_bos/add_space_prefix, the chat
template), into a llama model 2 layers deep, 64 wide, 4 query heads over 2 K/V heads, FFN 128,
context 2048, with SmolLM2's RoPE base and RMS epsilon; its embedding and output matrices are
[64 x vocab]. Its text is gibberish: the tests need the shapes, the vocabulary and a
deterministic file, not a good guesser.

Weights come from numpy's seeded generator through tools/gen_tiny_models.py's random_weights
and write_gguf (the same scales, so logits spread over a few units; the same Q/K row
permutation; matrices in Q8_0, norms in f32), so the file is the same bytes on every machine
with the numpy and gguf that requirements.txt pins. --tied leaves out output.weight (the head is
the embedding, as in SmolLM2 itself). The script ends by reading both files back and checking
that every tokenizer key, and the vocabulary's size in the tensors, equal the source's.
"""

import argparse
import hashlib
import os
import sys
import time

import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_tiny_models as tiny  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SOURCE = os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_OUT = os.path.join(REPO, "models", "draft", "smollm2-draft-tiny.gguf")
NAME = "smollm2-draft"  # also the generator's seed (tiny.random_weights sums its characters)
HEAD_DIM = 16


def scalar(reader, key):
    field = reader.fields.get(key)
    if field is None:
        sys.exit(f"gen_draft_model: the source has no {key}")
    return field.contents()


def field_bytes(field):
    # The key, its type and its value as the file stores them.
    return b"".join(part.tobytes() for part in field.parts)


def tokenizer_fields(reader):
    return {k: f for k, f in reader.fields.items() if k.startswith("tokenizer.")}


def copy_tokenizer(reader, vocab):
    """A more_metadata hook that writes llama.vocab_size and every tokenizer.* key of `reader`
    with its own types; strings go as the bytes stored, so nothing is re-encoded."""

    def add(w):
        w.add_vocab_size(vocab)
        for key, field in tokenizer_fields(reader).items():
            vtype, sub_type = field.types[0], None
            if vtype == gguf.GGUFValueType.ARRAY:
                sub_type = field.types[-1]
                if sub_type == gguf.GGUFValueType.STRING:
                    value = [bytes(field.parts[i]) for i in field.data]
                else:
                    value = field.contents()
            elif vtype == gguf.GGUFValueType.STRING:
                value = bytes(field.parts[-1])
            else:
                value = field.contents()
            w.add_key_value(key, value, vtype, sub_type)

    return add


def check(src, out, tied):
    """The draft's tokenizer keys equal those of the source (read by `src`) byte for byte, and
    its vocabulary is as wide as the token list; returns a line saying what was compared."""
    dst = gguf.GGUFReader(out)  # a read of a 49k-token vocabulary takes seconds: src is reused
    theirs, ours = tokenizer_fields(src), tokenizer_fields(dst)
    assert sorted(theirs) == sorted(ours), f"tokenizer keys differ: {sorted(theirs)} {sorted(ours)}"
    for key in theirs:
        assert field_bytes(theirs[key]) == field_bytes(ours[key]), f"{key} differs"
    tokens = ours["tokenizer.ggml.tokens"].contents()
    assert tokens == theirs["tokenizer.ggml.tokens"].contents()
    merges = ours["tokenizer.ggml.merges"].contents()
    assert merges == theirs["tokenizer.ggml.merges"].contents()
    special = {k.split(".")[-1]: ours[k].contents() for k in sorted(ours) if k.endswith("_id")}
    assert special == {k.split(".")[-1]: theirs[k].contents() for k in sorted(theirs)
                       if k.endswith("_id")}
    assert scalar(dst, "llama.vocab_size") == len(tokens)
    shapes = {t.name: [int(n) for n in t.shape] for t in dst.tensors}
    assert tied == ("output.weight" not in shapes), f"output.weight present: {not tied} expected"
    heads = ["token_embd.weight"] + ([] if tied else ["output.weight"])
    for name in heads:
        assert shapes[name] == [tiny.HIDDEN, len(tokens)], f"{name} is {shapes[name]}"
    return (f"{len(ours)} tokenizer keys equal to the source's ({len(tokens)} tokens, "
            f"{len(merges)} merges, {special}); {' and '.join(heads)} [{tiny.HIDDEN} x "
            f"{len(tokens)}]")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", default=DEFAULT_SOURCE, help="the GGUF whose tokenizer to copy")
    ap.add_argument("--out", default=DEFAULT_OUT, help="where the draft GGUF goes")
    ap.add_argument("--tied", action="store_true",
                    help="no output.weight: the head is the token embedding")
    args = ap.parse_args()
    start = time.monotonic()
    reader = gguf.GGUFReader(args.source)
    arch = scalar(reader, "general.architecture")
    if arch != "llama":
        sys.exit(f"gen_draft_model: {args.source} is {arch}; this copies a llama's tokenizer")
    vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    spec = dict(arch="llama", head_dim=HEAD_DIM, tie=args.tied,
                extra=dict(rope_theta=scalar(reader, "llama.rope.freq_base")))
    dims = tiny.Dims(vocab=vocab, hidden=tiny.HIDDEN, ff=tiny.FF, layers=2, heads=4, kv_heads=2,
                     context=2048, rms_eps=scalar(reader, "llama.attention.layer_norm_rms_epsilon"))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    part = args.out + ".part"
    tiny.write_gguf(part, NAME, spec, tiny.random_weights(NAME, spec, dims), dims,
                    more_metadata=copy_tokenizer(reader, vocab))
    checked = check(reader, part, args.tied)  # before the rename: a failed check leaves no draft
    os.replace(part, args.out)
    with open(args.out, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    print(f"{args.out}: {os.path.getsize(args.out)} bytes in {time.monotonic() - start:.1f} s; "
          f"{checked}")
    print(f"SHA-256 {digest}")


if __name__ == "__main__":
    sys.exit(main())
