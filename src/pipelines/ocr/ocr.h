// The OCR pipeline's built-in processors (issue #46): the image and tensor arithmetic between
// PP-OCR's three ONNX models, as rapidocr_onnxruntime 1.4.4's Python does it, without OpenCV or
// Clipper. One image goes through, in order:
//
//   DetectionInputSize + WriteDetectionInput   the detector's [1, 3, H, W] input (DetPreProcess);
//   (the detection model)                      [1, 1, H, W] text probability;
//   FindTextBoxes       DBPostProcess (threshold, 2x2 dilation, contours, minimum-area
//                       rectangles, box score, unclip) + filter_tag_det_res + sorted_boxes:
//                       quadrilaterals in the original image's pixels, in reading order;
//   CropSize + CropTextLine   get_rotate_crop_image: each box cut out upright;
//   WriteLineTensor at 48 x 192   the classifier's [3, 48, 192] line (TextClassifier);
//   (the classifier)    [N, 2] scores for 0 and 180 degrees;
//   IsUpsideDown + Rotate180   lines the classifier reads as upside down, turned;
//   RecognitionWidth + WriteLineTensor   the recogniser's [N, 3, 48, W] batch (TextRecognizer);
//   (the recogniser)    [N, T, classes] softmax;
//   ParseCharset + CtcGreedyDecode   CTCLabelDecode: text and score.
//
// What the models are fed: rapidocr reads images into OpenCV's BGR order, so every tensor here
// holds the channels as B, G, R (channel 0 is blue) from an RGB image, and pixels are scaled as
// (v / 255 - 0.5) / 0.5. Resizing is OpenCV's INTER_LINEAR (half-pixel centres, its 11-bit
// fixed-point weights) and the crop OpenCV's warpPerspective with INTER_CUBIC and replicated
// borders, so the tensors agree with rapidocr's to within one 8-bit level where rounding
// differs. Boxes agree to a pixel or two (the contour and unclip geometry is rebuilt here, see
// FindTextBoxes).
//
// Not here (the pipeline's executor does them, as rapidocr's RapidOCR.__call__): shrinking an
// image whose longer side exceeds 2000 px and enlarging one whose shorter side is under 30 px
// (max_side_len, min_side_len), the letterbox added to an image at most 30 px high or over 8
// times wider than high, mapping boxes back through those, batching (rapidocr runs lines six at a
// time, sorted by width / height) and dropping lines that score under text_score 0.5.
//
// Memory: the large buffers (the detection tensor, crops, line tensors) are the caller's, sized
// by the *Size functions, so the caller charges them to its memory governor. FindTextBoxes keeps,
// for its call, a bitmap and a visited map of the probability map's size (a byte a pixel each)
// and a flood queue of up to 4 bytes a pixel.
//
// Pure functions; thread-safe; images are pier::tensor_models::image::RgbView (interleaved 8-bit
// RGB, row-major).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensor_models/image/image_preprocess.h"

namespace pier::pipelines::ocr {

using tensor_models::image::RgbView;

struct Point {
  float x = 0;
  float y = 0;
};

// A text line's quadrilateral in the original image's pixels: corners top-left, top-right,
// bottom-right, bottom-left (clockwise on screen, rapidocr's order_points_clockwise), each
// coordinate a whole number in [0, width - 1] x [0, height - 1] (clip_det_res).
struct TextBox {
  std::array<Point, 4> corners;
  float score = 0;  // the mean text probability inside the box before unclipping
};

// ---- Detection input ------------------------------------------------------------------------

// DetPreProcess. rapidocr's package defaults: limit_type "min" with 736 (the shorter side is
// scaled up to 736 when shorter). With limit_min false the longer side is scaled down to
// limit_side_len when longer (rapidocr's "max" picks 960, 1500 or 2000 by the image's longer
// side: below 960, below 1500, otherwise; set limit_side_len accordingly).
struct DetectionInputOptions {
  int64_t limit_side_len = 736;
  bool limit_min = true;
  int64_t multiple = 32;  // each side rounded to a multiple (the network's stride)
  std::array<float, 3> mean = {0.5f, 0.5f, 0.5f};  // per tensor channel, after scale
  std::array<float, 3> std = {0.5f, 0.5f, 0.5f};
  float scale = 1.0f / 255.0f;
  bool bgr = true;  // channel 0 is blue, as rapidocr feeds the model
};

// The detection tensor's width and height for a width x height image: each side times the
// limit's ratio, truncated, then rounded (half to even) to a multiple of `multiple`. Either can
// be 0 (a tiny image under a "max" limit): rapidocr then finds no text, and so should the caller.
void DetectionInputSize(int64_t width, int64_t height, const DetectionInputOptions& options,
                        int64_t* out_width, int64_t* out_height);

// Writes `image` resized to out_width x out_height (INTER_LINEAR) and normalised into `out`
// ([3, out_height, out_width], CHW; out.size() == 3 * out_height * out_width).
void WriteDetectionInput(const RgbView& image, const DetectionInputOptions& options,
                         int64_t out_width, int64_t out_height, std::span<float> out);

// ---- Text boxes -----------------------------------------------------------------------------

// DBPostProcess's settings as rapidocr's config.yaml sets them.
struct TextBoxOptions {
  float threshold = 0.3f;      // a pixel is text when its probability exceeds this (thresh)
  float box_threshold = 0.5f;  // a box is kept when its mean probability reaches this
  int max_candidates = 1000;   // contours looked at, in OpenCV's order (the last found first)
  float unclip_ratio = 1.6f;   // the box grows by area * ratio / perimeter on every side
  bool dilate = true;          // the bitmap dilated by a 2x2 square (use_dilation)
  int min_size = 3;            // a box's shorter side must reach this (and min_size + 2 after
                               // the unclip), in map pixels
};

// The text boxes of one probability map (`probability`: [map_height, map_width], the detection
// model's output for the tensor WriteDetectionInput wrote), scaled to the original
// original_width x original_height image, in rapidocr's reading order (sorted_boxes: by the
// top-left corner's y then x, then a box moved before its neighbour above when their tops are
// within 10 px and it lies further left).
//
// How it follows OpenCV: the contours of cv2.findContours(RETR_LIST) are the 8-connected
// components of the bitmap (their convex hull is all minAreaRect sees) and the holes in them
// (4-connected background not reaching the map's edge, outlined by the text pixels beside it),
// in the order OpenCV lists them (reverse raster order of where each is first met). The
// minimum-area rectangle is found by rotating calipers over the hull; the box score is the mean
// probability over cv2.fillPoly's pixels of the box (its corners truncated); the unclip offsets
// the truncated corners with Clipper's round joins (pyclipper's arithmetic, integer results)
// and takes their minimum-area rectangle again.
[[nodiscard]] std::vector<TextBox> FindTextBoxes(std::span<const float> probability,
                                                 int64_t map_width, int64_t map_height,
                                                 int64_t original_width, int64_t original_height,
                                                 const TextBoxOptions& options = {});

// ---- Text lines -----------------------------------------------------------------------------

// The size of `box`'s crop as CropTextLine writes it, already turned: the crop is
// int(max(top, bottom edge length)) x int(max(left, right edge length)) and, when its height is
// at least 1.5 times its width, turned 90 degrees counter-clockwise (np.rot90), which swaps the
// two. A side can be 0 for a degenerate box: there is no line to read.
void CropSize(const TextBox& box, int64_t* width, int64_t* height);

// get_rotate_crop_image: writes the perspective crop of `box` from `image` into `out` (CropSize's
// dimensions): the box's corners map to the crop's (0, 0), (w, 0), (w, h), (0, h), sampled
// bicubically at the exact source position (OpenCV's A = -0.75) with the image's edge pixels
// replicated beyond it, then turned as CropSize says.
void CropTextLine(const RgbView& image, const TextBox& box, RgbView out);

// The classifier's verdict on one line: its scores ([2]: 0 and 180 degrees, ClsPostProcess's
// label_list) say 180 and that score exceeds `threshold` (rapidocr's cls_thresh).
[[nodiscard]] bool IsUpsideDown(std::span<const float> scores, float threshold = 0.9f);

// Turns `line` by 180 degrees in place (cv2.rotate ROTATE_180).
void Rotate180(RgbView line);

// ---- Line tensors ---------------------------------------------------------------------------

// The recogniser's tensor width for lines batched together (TextRecognizer):
// int(height * max(min_width / height, each line's width / height)).
[[nodiscard]] int64_t RecognitionWidth(std::span<const RgbView> lines, int64_t height = 48,
                                       int64_t min_width = 320);

// resize_norm_img, the classifier's (height 48, width 192) and the recogniser's (height 48,
// width RecognitionWidth): `line` resized (INTER_LINEAR) to height x min(width,
// ceil(height * line.width / line.height)), scaled to (v / 255 - 0.5) / 0.5 in B, G, R order,
// and zeros to the right of it. `out`: [3, height, width].
void WriteLineTensor(const RgbView& line, int64_t height, int64_t width, std::span<float> out);

// ---- Recognition output ---------------------------------------------------------------------

// The recogniser's classes from its ONNX metadata `character` (one character a line; Python's
// splitlines): index 0 the CTC blank (""), then each line, then " " (CTCLabelDecode with
// use_space_char). PP-OCRv4's metadata gives 6625 entries, the model's class count.
[[nodiscard]] std::vector<std::string> ParseCharset(std::string_view metadata);

struct DecodedText {
  std::string text;
  float score = 0;  // the mean of the kept steps' top probability; 0 when none is kept
};

// CTCLabelDecode's greedy decode of one line: `probabilities` [steps, classes]; each step's top
// class (the first on ties), repeats of the previous step's class dropped, then blanks (class
// 0). A class beyond `charset` adds nothing to the text (it still counts in the score).
[[nodiscard]] DecodedText CtcGreedyDecode(std::span<const float> probabilities, int64_t steps,
                                          int64_t classes, const std::vector<std::string>& charset);

}  // namespace pier::pipelines::ocr
