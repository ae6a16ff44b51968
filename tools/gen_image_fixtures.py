#!/usr/bin/env python3
"""Writes tests/fixtures/image/: small JPEG and PNG files and what Pillow makes of them.

tests/tensor_models/image/image_preprocess_test.cpp checks Pier's image preprocessing
(src/tensor_models/image/image_preprocess.h) against these, so the expected pixels are
Pillow's own (the library torchvision's PIL transforms run on):

  decode      Image.open(f).convert('RGB') after ImageOps.exif_transpose, as raw RGB bytes;
  resize      Image.resize((w, h), filter) of one RGB image, each filter, down and up;
  preprocess  the whole pipeline (stretch, torchvision's Resize + CenterCrop, letterbox; scale,
              mean/std in float32, NCHW or NHWC, RGB or BGR, FP32, FP16 or UINT8) as the
              tensor's raw little-endian bytes;
  bad         inputs that must be refused: not an image, a truncated JPEG, a PNG whose IHDR
              claims 30000 x 30000, a PNG bomb (a small file of 12000 x 12000 zeros).

index.json describes every case. Deterministic (fixed seeds, Pillow's encoders): running it
again gives the same bytes. Needs Pillow and numpy (requirements.txt, .venv/):

  .venv/bin/python tools/gen_image_fixtures.py
"""

import io
import json
import os
import struct
import zlib

import numpy as np
from PIL import Image, ImageOps

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "image")
WIDTH, HEIGHT = 37, 23  # odd and not square, so every flip and turn shows

FILTERS = {
    "nearest": Image.Resampling.NEAREST,
    "box": Image.Resampling.BOX,
    "bilinear": Image.Resampling.BILINEAR,
    "hamming": Image.Resampling.HAMMING,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}


def write(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def source_pixels():
    """A gradient with noise and a few hard edges: [HEIGHT, WIDTH, 3] uint8."""
    rng = np.random.default_rng(45)
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH]
    r = x * 255 // (WIDTH - 1)
    g = y * 255 // (HEIGHT - 1)
    b = ((x + y) * 7) % 256
    pixels = np.stack([r, g, b], axis=-1).astype(np.int32)
    pixels += rng.integers(-40, 41, size=pixels.shape)
    pixels[5:9, 3:30] = [250, 10, 10]  # an edge the filters ring on
    pixels[15:20, 25:33] = [0, 0, 0]
    return np.clip(pixels, 0, 255).astype(np.uint8)


def encode(image, fmt, **options):
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def hand_png(width, height, bit_depth, color_type, raw_rows, interlace=0):
    """A PNG from already filtered rows (each led by its filter byte)."""
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, interlace)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) +
            png_chunk(b"IDAT", zlib.compress(raw_rows, 9)) + png_chunk(b"IEND", b""))


def adam7_rows(pixels):
    """Adam7's seven passes of `pixels` ([h, w, c] uint8), each row led by filter byte 0."""
    rows = b""
    for x0, y0, dx, dy in [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4),
                           (1, 0, 2, 2), (0, 1, 1, 2)]:
        sub = pixels[y0::dy, x0::dx]
        if sub.shape[0] and sub.shape[1]:
            rows += b"".join(b"\x00" + sub[y].tobytes() for y in range(sub.shape[0]))
    return rows


def big_endian_exif_jpeg(jpeg, orientation):
    """`jpeg` with an APP1 Exif segment in Motorola (big-endian) order after SOI."""
    tiff = b"MM\x00\x2a" + struct.pack(">I", 8)
    tiff += struct.pack(">H", 1) + struct.pack(">HHIHH", 0x0112, 3, 1, orientation, 0)
    tiff += struct.pack(">I", 0)
    payload = b"Exif\x00\x00" + tiff
    return jpeg[:2] + b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload + jpeg[2:]


def pillow_rgb(data):
    """What Pillow (and so torchvision's PIL path) decodes: RGB after EXIF orientation."""
    image = Image.open(io.BytesIO(data))
    image = ImageOps.exif_transpose(image)
    return image.convert("RGB")


def main():
    os.makedirs(OUT, exist_ok=True)
    for name in os.listdir(OUT):
        os.remove(os.path.join(OUT, name))
    pixels = source_pixels()
    rgb = Image.fromarray(pixels, "RGB")
    index = {"decode": [], "resize": [], "preprocess": [], "bad": {}}
    files = {}

    # --- Encoded images -------------------------------------------------------------------
    files["rgb_420.jpg"] = encode(rgb, "JPEG", quality=90, subsampling=2)
    files["rgb_444.jpg"] = encode(rgb, "JPEG", quality=90, subsampling=0)
    files["progressive.jpg"] = encode(rgb, "JPEG", quality=90, progressive=True)
    files["grey.jpg"] = encode(rgb.convert("L"), "JPEG", quality=90)
    files["rgb.png"] = encode(rgb, "PNG")
    files["palette.png"] = encode(rgb.quantize(colors=16, dither=Image.Dither.NONE), "PNG")
    files["grey.png"] = encode(rgb.convert("L"), "PNG")
    rgba = rgb.copy()
    rgba.putalpha(Image.fromarray((np.arange(WIDTH * HEIGHT) % 256).astype(np.uint8).reshape(
        HEIGHT, WIDTH)))
    files["rgba.png"] = encode(rgba, "PNG")
    files["grey_alpha.png"] = encode(rgba.convert("LA"), "PNG")
    files["interlaced.png"] = hand_png(WIDTH, HEIGHT, 8, 2, adam7_rows(pixels), interlace=1)
    # Pillow cannot write 48-bit RGB; built by hand. Every low byte is 0xff, so a decoder that
    # rounds (libpng's png_set_scale_16) instead of taking the high byte as Pillow does is off
    # by one below 127.
    wide = (pixels.astype(np.uint16) * 256 + np.uint16(0xff)).astype(">u2")
    files["rgb16.png"] = hand_png(
        WIDTH, HEIGHT, 16, 2,
        b"".join(b"\x00" + wide[y].tobytes() for y in range(HEIGHT)))
    # One-bit grey: expanded to 0 and 255.
    bits = np.packbits(pixels[:, :, 0] > 127, axis=1)
    files["grey1.png"] = hand_png(
        WIDTH, HEIGHT, 1, 0, b"".join(b"\x00" + bits[y].tobytes() for y in range(HEIGHT)))
    for orientation in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = orientation
        files[f"orientation_{orientation}.jpg"] = encode(rgb, "JPEG", quality=90, exif=exif)
    files["orientation_8_big_endian.jpg"] = big_endian_exif_jpeg(
        encode(rgb, "JPEG", quality=90), 8)
    exif = Image.Exif()
    exif[0x0112] = 6
    files["orientation_6.png"] = encode(rgb, "PNG", exif=exif)
    exif = Image.Exif()
    exif[0x0112] = 9  # out of range: as stored
    files["orientation_9.jpg"] = encode(rgb, "JPEG", quality=90, exif=exif)

    for name, data in files.items():
        write(name, data)
        decoded = pillow_rgb(data)
        stored = Image.open(io.BytesIO(data))
        orientation = stored.getexif().get(0x0112, 1)
        expected = name + ".rgb"
        write(expected, np.asarray(decoded, dtype=np.uint8).tobytes())
        index["decode"].append({
            "file": name, "expected": expected,
            "format": "jpeg" if name.endswith(".jpg") else "png",
            "stored_width": stored.size[0], "stored_height": stored.size[1],
            "orientation": orientation if 1 <= orientation <= 8 else 1,
            "width": decoded.size[0], "height": decoded.size[1]})

    # --- Resizes of the RGB image, each filter ----------------------------------------------
    for filter_name, resample in FILTERS.items():
        # (36, 5), (30, 4) and (74, 10) lose more than twice as many rows as columns: Pillow 13
        # resizes those vertically first (python-pillow#9549), which changes the bits.
        for width, height in [(16, 11), (53, 41), (20, 31), (37, 12), (50, 23), (5, 3), (36, 5),
                              (30, 4), (74, 10)]:
            resized = rgb.resize((width, height), resample)
            expected = f"resize_{filter_name}_{width}x{height}.rgb"
            write(expected, np.asarray(resized, dtype=np.uint8).tobytes())
            index["resize"].append({"source": "rgb.png.rgb", "source_width": WIDTH,
                                    "source_height": HEIGHT, "filter": filter_name,
                                    "width": width, "height": height, "expected": expected})

    # --- Whole preprocessing --------------------------------------------------------------
    imagenet_mean = [0.485, 0.456, 0.406]
    imagenet_std = [0.229, 0.224, 0.225]
    cases = [
        dict(name="stretch_bilinear_fp32_nchw", file="rgb.png", resize="stretch", height=16,
             width=20, interpolation="bilinear", mean=imagenet_mean, std=imagenet_std),
        dict(name="crop_bicubic_fp32_nchw", file="rgb_444.jpg", resize="crop", shorter_side=20,
             height=16, width=16, interpolation="bicubic", mean=imagenet_mean,
             std=imagenet_std),
        dict(name="crop_orientation6_nhwc_bgr", file="orientation_6.jpg", resize="crop",
             shorter_side=18, height=16, width=12, interpolation="bilinear", layout="nhwc",
             channels="bgr", mean=imagenet_mean, std=imagenet_std),
        dict(name="crop_half_offsets", file="rgb.png", resize="crop", shorter_side=21,
             height=20, width=21, interpolation="lanczos"),
        dict(name="letterbox_uint8_nhwc", file="rgb.png", resize="letterbox", height=32,
             width=32, interpolation="bilinear", type="UINT8", layout="nhwc"),
        dict(name="letterbox_orientation8_fp32_bgr", file="orientation_8.jpg",
             resize="letterbox", height=24, width=40, interpolation="hamming",
             channels="bgr", pad_value=0),
        dict(name="stretch_nearest_uint8_nchw", file="palette.png", resize="stretch",
             height=50, width=30, interpolation="nearest", type="UINT8"),
        dict(name="stretch_box_fp16_nchw", file="progressive.jpg", resize="stretch", height=12,
             width=12, interpolation="box", type="FP16", mean=imagenet_mean, std=imagenet_std),
        dict(name="no_exif_fp32", file="orientation_6.jpg", resize="stretch", height=23,
             width=37, interpolation="bilinear", apply_exif=False, scale=1.0),
    ]
    for case in cases:
        spec = {"resize": "stretch", "shorter_side": 0, "interpolation": "bilinear",
                "pad_value": 114, "scale": 1.0 / 255.0, "mean": [0, 0, 0], "std": [1, 1, 1],
                "layout": "nchw", "channels": "rgb", "type": "FP32", "apply_exif": True}
        spec.update({k: v for k, v in case.items() if k not in ("name", "file")})
        data = files[case["file"]]
        image = Image.open(io.BytesIO(data))
        if spec["apply_exif"]:
            image = ImageOps.exif_transpose(image)
        image = image.convert("RGB")
        tensor, geometry = preprocess(image, spec)
        expected = case["name"] + ".tensor"
        write(expected, tensor)
        index["preprocess"].append({"name": case["name"], "file": case["file"], "spec": spec,
                                    "expected": expected, "geometry": geometry})

    # --- Inputs that must be refused ------------------------------------------------------
    write("not_an_image.txt", b"GIF89a? no: just text that is not a JPEG or PNG image\n")
    write("truncated.jpg", files["rgb_420.jpg"][:len(files["rgb_420.jpg"]) * 6 // 10])
    # IHDR claims 30000 x 30000; the IDAT holds one row (decoding it would need 2.7 GB).
    write("huge_ihdr.png", hand_png(30000, 30000, 8, 2, b"\x00" + b"\x00" * 90000))
    # A real bomb: every row of a 12000 x 12000 one-bit image, zeros, compressed to ~17 KB
    # (432 MB as RGB); each side is under the 16384 limit, the pixels are not.
    row = b"\x00" * (1 + 12000 // 8)
    write("bomb.png", hand_png(12000, 12000, 1, 0, row * 12000))
    index["bad"] = {"not_an_image": "not_an_image.txt", "truncated_jpeg": "truncated.jpg",
                    "huge_ihdr": "huge_ihdr.png", "bomb": "bomb.png"}

    with open(os.path.join(OUT, "index.json"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=True)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(OUT, n)) for n in os.listdir(OUT))
    print(f"wrote {len(os.listdir(OUT))} files, {total} bytes, under {os.path.relpath(OUT)}")


def preprocess(image, spec):
    """The reference pipeline on an oriented RGB PIL image: (tensor bytes, geometry)."""
    resample = FILTERS[spec["interpolation"]]
    height, width = spec["height"], spec["width"]
    w, h = image.size
    left = top = 0
    if spec["resize"] == "stretch":
        fitted = image.resize((width, height), resample)
        geometry = [w, h, width / w, height / h, 0.0, 0.0]
    elif spec["resize"] == "crop":
        # torchvision.transforms.Resize(s) then CenterCrop((height, width)).
        s = spec["shorter_side"]
        short, long = (w, h) if w <= h else (h, w)
        new_short, new_long = s, int(s * long / short)
        new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
        resized = image.resize((new_w, new_h), resample)
        crop_top = int(round((new_h - height) / 2.0))
        crop_left = int(round((new_w - width) / 2.0))
        fitted = resized.crop((crop_left, crop_top, crop_left + width, crop_top + height))
        geometry = [w, h, new_w / w, new_h / h, float(-crop_left), float(-crop_top)]
    else:
        r = min(height / h, width / w)
        new_w, new_h = int(round(w * r)), int(round(h * r))
        resized = image.resize((new_w, new_h), resample) if (new_w, new_h) != (w, h) else image
        fitted = Image.new("RGB", (width, height), (spec["pad_value"],) * 3)
        left, top = (width - new_w) // 2, (height - new_h) // 2
        fitted.paste(resized, (left, top))
        geometry = [w, h, new_w / w, new_h / h, float(left), float(top)]
    pixels = np.asarray(fitted, dtype=np.uint8)  # [height, width, 3] RGB
    if spec["type"] == "UINT8":
        values = pixels
    else:
        scale = np.float32(spec["scale"])
        mean = np.array(spec["mean"], dtype=np.float32)
        std = np.array(spec["std"], dtype=np.float32)
        values = (pixels.astype(np.float32) * scale - mean) / std
        values = values.astype(np.float32 if spec["type"] == "FP32" else np.float16)
    if spec["channels"] == "bgr":
        values = values[:, :, ::-1]
    if spec["layout"] == "nchw":
        values = values.transpose(2, 0, 1)
    return np.ascontiguousarray(values).astype(values.dtype.newbyteorder("<")).tobytes(), geometry


if __name__ == "__main__":
    main()
