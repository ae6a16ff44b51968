#!/usr/bin/env python3
"""Writes tests/fixtures/ocr/: what rapidocr_onnxruntime 1.4.4 makes of a few rendered images.

tests/pipelines/ocr/ocr_fixture_test.cpp checks Pier's OCR processors (src/pipelines/ocr/ocr.h)
against these, so every expected figure comes from rapidocr's own Python classes (issue #46):

  det input   TextDetector.get_preprocess(...) (DetPreProcess: resize to multiples of 32 with
              cv2.resize, mean/std 0.5, scale 1/255) of the BGR image LoadImage gives: the
              tensor's size and sampled values;
  prob map    the PP-OCRv4 detection model's output through onnxruntime, quantised to 8 bits
              (<name>_prob.png); the boxes below are computed from the quantised map, so the C++
              side sees the same input;
  boxes       DBPostProcess (the package's settings: thresh 0.3, box_thresh 0.5, unclip 1.6,
              dilation, score_mode fast), filter_tag_det_res, RapidOCR.sorted_boxes, with each
              box's score;
  crops       RapidOCR.get_crop_img_list (get_rotate_crop_image: perspective crop, turned 90
              degrees when tall) of the original image with those boxes, as RGB PNGs
              (<name>_line<i>.png);
  cls         TextClassifier.resize_norm_img of each crop ([3, 48, 192]: sampled values), the
              classifier's two scores, and whether rapidocr turns the line 180 degrees;
  rec         TextRecognizer.resize_norm_img of the (turned) lines as one batch ([3, 48, W]:
              W and sampled values), and per line the recogniser's top two classes at each step
              with CTCLabelDecode's text and score;
  charset     the recogniser's `character` metadata as stored in the ONNX file
              (rec_character.txt).

index.json describes every case. Deterministic (fixed seeds, Pillow's text rendering, the CPU
provider). Needs .venv/ (requirements.txt: rapidocr-onnxruntime, OpenCV, Pillow, numpy):

  .venv/bin/python tools/gen_ocr_fixtures.py
"""

import json
import os

import numpy as np
from PIL import Image, ImageDraw, ImageFont

import rapidocr_onnxruntime
from rapidocr_onnxruntime import RapidOCR
from rapidocr_onnxruntime.utils import LoadImage

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "ocr")
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
SAMPLES = 200  # sampled tensor values per tensor


def text_layer(size, text, font_px, colour):
    """A transparent RGBA image just big enough for `text`."""
    font = ImageFont.truetype(FONT, font_px)
    left, top, right, bottom = font.getbbox(text)
    layer = Image.new("RGBA", (right - left + 8, bottom - top + 8), (0, 0, 0, 0))
    ImageDraw.Draw(layer).text((4 - left, 4 - top), text, font=font, fill=colour)
    return layer


def paste_text(image, xy, text, font_px, colour=(20, 20, 30), angle=0):
    layer = text_layer(image.size, text, font_px, colour + (255,))
    if angle:
        layer = layer.rotate(angle, resample=Image.Resampling.BICUBIC, expand=True)
    image.paste(layer, xy, layer)


def card():
    """An ID-card-like image: a title band, labels and values on the same rows (two boxes a
    row, which sorted_boxes orders left to right), and one line turned by 7 degrees."""
    image = Image.new("RGB", (480, 300), (236, 240, 244))
    ImageDraw.Draw(image).rectangle([0, 0, 479, 44], fill=(40, 80, 150))
    paste_text(image, (20, 8), "IDENTITY CARD", 26, (250, 250, 250))
    paste_text(image, (20, 70), "Name:", 20)
    paste_text(image, (150, 73), "Maria Keller", 20)
    paste_text(image, (20, 115), "ID No:", 20)
    paste_text(image, (150, 112), "K4821-7730-15", 20)
    paste_text(image, (20, 160), "Born: 1987-03-14", 18)
    paste_text(image, (30, 205), "Harbour Street 12", 22, angle=7)
    return image


def turned():
    """Two lines upside down (the classifier's case) and one vertical line (a tall crop that
    get_rotate_crop_image turns by 90 degrees)."""
    image = Image.new("RGB", (360, 220), (255, 255, 255))
    paste_text(image, (20, 30), "Kiel 24103", 24)
    paste_text(image, (20, 90), "VALID 2031", 24)
    image = image.rotate(180)
    paste_text(image, (300, 20), "ROUTE 66", 20, angle=90)
    return image


def sample(tensor, rng, count=SAMPLES):
    """[[c, y, x, value], ...] at `count` seeded positions of a [C, H, W] tensor."""
    c, h, w = tensor.shape
    picks = zip(rng.integers(0, c, count), rng.integers(0, h, count), rng.integers(0, w, count))
    return [[int(a), int(b), int(d), round(float(tensor[a, b, d]), 6)] for a, b, d in picks]


def detect(engine, bgr):
    """DBPostProcess + filter_tag_det_res + sorted_boxes, keeping each box's score."""
    det = engine.text_det
    op = det.get_preprocess(max(bgr.shape[0], bgr.shape[1]))
    tensor = op(bgr)  # [1, 3, H, W]
    pred = det.infer(tensor)[0]  # [1, 1, H, W]
    quantised = np.round(np.clip(pred[0, 0], 0, 1) * 255).astype(np.uint8)
    pred_q = (quantised.astype(np.float32) / 255.0)[np.newaxis, np.newaxis]
    boxes, scores = det.postprocess_op(pred_q, bgr.shape[:2])
    kept, kept_scores = [], []
    for box, score in zip(boxes, scores):
        box = det.order_points_clockwise(box)
        box = det.clip_det_res(box, bgr.shape[0], bgr.shape[1])
        if int(np.linalg.norm(box[0] - box[1])) <= 3 or int(np.linalg.norm(box[0] - box[3])) <= 3:
            continue
        kept.append(box)
        kept_scores.append(float(score))
    ordered = engine.sorted_boxes(np.array(kept)) if kept else []
    ordered_scores, used = [], set()
    for o in ordered:  # sorted_boxes keeps no index: find each box's own score (once each)
        i = next(i for i, b in enumerate(kept) if i not in used and np.array_equal(b, o))
        used.add(i)
        ordered_scores.append(kept_scores[i])
    return tensor[0], quantised, ordered, ordered_scores, len(boxes)


def main():
    os.makedirs(OUT, exist_ok=True)
    engine = RapidOCR()
    rng = np.random.default_rng(46)
    cases = []
    for name, image in [("card", card()), ("turned", turned())]:
        image.save(os.path.join(OUT, name + ".png"), optimize=True)
        bgr = LoadImage()(os.path.join(OUT, name + ".png"))
        det_tensor, quantised, boxes, scores, raw_boxes = detect(engine, bgr)
        Image.fromarray(quantised, "L").save(os.path.join(OUT, name + "_prob.png"), optimize=True)

        crops = engine.get_crop_img_list(bgr, boxes)
        lines = []
        cls_tensors = [engine.text_cls.resize_norm_img(c) for c in crops]
        cls_scores = engine.text_cls.infer(np.stack(cls_tensors).astype(np.float32))[0]
        turned_crops, _, _ = engine.text_cls(crops)
        rec = engine.text_rec
        max_ratio = max([rec.rec_image_shape[2] / rec.rec_image_shape[1]] +
                        [c.shape[1] / c.shape[0] for c in turned_crops])
        rec_tensors = [rec.resize_norm_img(c, max_ratio) for c in turned_crops]
        rec_probs = rec.session(np.stack(rec_tensors).astype(np.float32))[0]  # [N, T, 6625]
        decoded = rec.postprocess_op(rec_probs)
        for i, crop in enumerate(crops):
            crop_file = f"{name}_line{i}.png"
            Image.fromarray(crop[:, :, ::-1]).save(os.path.join(OUT, crop_file), optimize=True)
            top2 = np.argsort(-rec_probs[i], axis=1, kind="stable")[:, :2]
            lines.append({
                "crop": crop_file,
                "crop_width": int(crop.shape[1]),
                "crop_height": int(crop.shape[0]),
                "cls_samples": sample(cls_tensors[i], rng),
                "cls_scores": [float(s) for s in cls_scores[i]],
                "turned_180": bool(not np.array_equal(turned_crops[i], crop)),
                "rec_samples": sample(rec_tensors[i], rng),
                "rec_top2": [[int(t[0]), round(float(rec_probs[i][s, t[0]]), 6), int(t[1]),
                              round(float(rec_probs[i][s, t[1]]), 6)] for s, t in enumerate(top2)],
                "text": decoded[i][0],
                "text_score": float(decoded[i][1]),
            })
        cases.append({
            "image": name + ".png",
            "width": image.size[0],
            "height": image.size[1],
            "det_width": int(det_tensor.shape[2]),
            "det_height": int(det_tensor.shape[1]),
            "det_channel_means": [float(det_tensor[c].mean(dtype=np.float64)) for c in range(3)],
            "det_samples": sample(det_tensor, rng, 400),
            "prob": name + "_prob.png",
            "postprocess_boxes": raw_boxes,
            "boxes": [b.astype(int).tolist() for b in boxes],
            "scores": scores,
            "rec_width": int(rec_tensors[0].shape[2]),
            "lines": lines,
        })
        print(name, [(l["text"], round(l["text_score"], 3), l["turned_180"]) for l in lines])

    character = engine.text_rec.session.session.get_modelmeta().custom_metadata_map["character"]
    with open(os.path.join(OUT, "rec_character.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(character)
    index = {
        "generator": "tools/gen_ocr_fixtures.py",
        "rapidocr_onnxruntime": getattr(rapidocr_onnxruntime, "__version__", "1.4.4"),
        "charset_entries": len(engine.text_rec.postprocess_op.character),
        "cases": cases,
    }
    with open(os.path.join(OUT, "index.json"), "w") as f:
        json.dump(index, f, ensure_ascii=False)  # one line: 6-digit floats, ~150 KB
        f.write("\n")


if __name__ == "__main__":
    main()
