#!/usr/bin/env python3
"""rapidocr_onnxruntime's own Python pipeline: the OCR pipeline's reference (issue #46).

RapidOCR() with the package's defaults (rapidocr_onnxruntime/config.yaml: PP-OCRv4 detection,
the 0/180-degree line classifier, PP-OCRv4 recognition, text_score 0.5), the engine made once;
the models are the package's own copies, the same bytes scripts/bootstrap puts in models/ocr/.
The only setting changed is ONNX Runtime's thread count (--threads, default 1, as intra-op
threads for each of the three sessions with one inter-op thread), so a measurement says which
CPU share it had. Lines come in rapidocr's order (its boxes sorted top to bottom, then left to
right within 10 px) with their recognition scores. Needs .venv/ (requirements.txt).

    .venv/bin/python tools/ocr_reference.py IMAGE... [--json] [--threads N]

prints each image's lines ('  0.998  Name: Maria Keller'), or with --json one object per line:
{"image": PATH, "lines": [...], "scores": [...], "seconds": S, "stage_seconds": [D, C, R]}
(seconds: the engine's call on the file, reading and decoding it included; stage_seconds:
rapidocr's own timings of detection, line classification and recognition).

    .venv/bin/python tools/ocr_reference.py --serve [--threads N]

is the benchmark's anchor: a persistent process that loads the models once, prints
{"ready": true} and then reads image paths on stdin, one per line, answering each with one JSON
line {"lines": [...], "scores": [...], "seconds": S, "stage_seconds": [D, C, R]} on stdout; an
image it cannot read answers {"error": "..."}. It ends at the end of stdin. Its first image pays
ONNX Runtime's warm-up: a benchmark sends one before it starts the clock.

    .venv/bin/python tools/ocr_reference.py --truth DIR/truth.json [--threads N]

reads the cards tools/render_id_cards.py wrote and reports rapidocr's character accuracy
against them (char_accuracy below), overall and for upright and turned cards, and the mean
seconds per image. rapidocr has no page orientation: on a card turned 180 degrees its line
classifier turns each line's crop, so every line reads right, but it lists the lines bottom to
top. So each card is scored twice: in rapidocr's order, and in either order (the better of its
order and the reverse), which is what a pipeline that turns the page upright first can reach.
"""

import argparse
import json
import os
import sys
import time


def make_engine(threads=1):
    """RapidOCR with the package's config and `threads` intra-op threads per session."""
    # Imported here so --help and the accuracy helpers work without OpenCV.
    from rapidocr_onnxruntime import RapidOCR

    return RapidOCR(intra_op_num_threads=threads, inter_op_num_threads=1)


def recognise(engine, path):
    """(lines, scores, seconds, stages) for one image file, in rapidocr's order; no text gives
    []. stages: rapidocr's own [detection, classification, recognition] seconds."""
    start = time.perf_counter()
    result, stages = engine(path)
    seconds = time.perf_counter() - start
    result = result or []  # rapidocr returns (None, None) when it finds no box
    stages = [round(float(t), 6) for t in stages or []]
    return [r[1] for r in result], [round(float(r[2]), 4) for r in result], seconds, stages


def edit_distance(a, b):
    """Levenshtein distance between two strings (insert, delete, substitute: 1 each)."""
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1,
                               previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def char_accuracy(got_lines, truth_lines):
    """1 - edit distance / truth length over the lines joined in order with spaces removed (so
    a detector that splits or merges a line at a space costs nothing); can go below 0."""
    got = "".join(got_lines).replace(" ", "")
    want = "".join(truth_lines).replace(" ", "")
    return 1.0 - edit_distance(got, want) / max(1, len(want))


def serve(engine):
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        path = line.strip()
        if not path:
            continue
        if not os.path.isfile(path):
            print(json.dumps({"error": f"no such file: {path}"}), flush=True)
            continue
        try:
            lines, scores, seconds, stages = recognise(engine, path)
        except Exception as e:  # a bad image answers an error; the process goes on
            message = str(e) if path in str(e) else f"{path}: {e}"
            print(json.dumps({"error": message}), flush=True)
            continue
        print(json.dumps({"lines": lines, "scores": scores, "seconds": round(seconds, 6),
                          "stage_seconds": stages}), flush=True)
    return 0


def score_truth(engine, truth_path):
    folder = os.path.dirname(os.path.abspath(truth_path))
    with open(truth_path) as f:
        truth = json.load(f)
    groups = {"all": [], "upright": [], "rotated": []}  # [(in order, either order)]
    seconds = []
    for card in truth:
        lines, _, took, _ = recognise(engine, os.path.join(folder, card["file"]))
        seconds.append(took)
        in_order = char_accuracy(lines, card["lines"])
        either = max(in_order, char_accuracy(lines[::-1], card["lines"]))
        groups["all"].append((in_order, either))
        groups["rotated" if card["rotated"] else "upright"].append((in_order, either))
        if either < 1.0 or in_order < 1.0:
            print(f"{card['file']}{' (rotated)' if card['rotated'] else ''}: in order "
                  f"{in_order:.3f}, either order {either:.3f}: {lines}")
    for name, pairs in groups.items():
        if pairs:
            in_order, either = [p[0] for p in pairs], [p[1] for p in pairs]
            print(f"{name}: {len(pairs)} cards, character accuracy in rapidocr's order "
                  f"{sum(in_order) / len(pairs):.4f} (min {min(in_order):.4f}), in either order "
                  f"{sum(either) / len(pairs):.4f} (min {min(either):.4f})")
    # The first call pays ONNX Runtime's warm-up; the mean leaves it out when there are others.
    timed = seconds[1:] if len(seconds) > 1 else seconds
    print(f"mean {sum(timed) / len(timed):.3f} s per image (first {seconds[0]:.3f} s, left out)")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("images", nargs="*", help="image files to read")
    parser.add_argument("--json", action="store_true", help="one JSON object per image")
    parser.add_argument("--serve", action="store_true",
                        help="read image paths on stdin, answer one JSON line each")
    parser.add_argument("--truth", help="a truth.json of tools/render_id_cards.py to score")
    parser.add_argument("--threads", type=int, default=1,
                        help="ONNX Runtime intra-op threads per session (default 1)")
    args = parser.parse_args()
    modes = bool(args.images) + args.serve + bool(args.truth)
    if modes != 1:
        parser.error("give IMAGE..., --serve or --truth (one of them)")
    if args.threads < 1:
        parser.error("--threads must be >= 1")
    # rapidocr ignores a thread count above the CPU count (it keeps ONNX Runtime's default).
    if args.threads > (os.cpu_count() or 1):
        parser.error(f"--threads {args.threads} is more than the {os.cpu_count()} CPUs here")

    engine = make_engine(args.threads)
    if args.serve:
        return serve(engine)
    if args.truth:
        return score_truth(engine, args.truth)
    for path in args.images:
        lines, scores, seconds, stages = recognise(engine, path)
        if args.json:
            print(json.dumps({"image": path, "lines": lines, "scores": scores,
                              "seconds": round(seconds, 6), "stage_seconds": stages}))
        else:
            print(f"{path}: {len(lines)} lines, {seconds:.3f} s")
            for text, score in zip(lines, scores):
                print(f"  {score:.3f}  {text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
