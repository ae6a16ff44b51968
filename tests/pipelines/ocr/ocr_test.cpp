// The OCR processors (src/pipelines/ocr/ocr.h) on small synthetic inputs whose answers are
// worked out by hand (or, where the geometry is not, taken from rapidocr's Python and said so).
#include "pipelines/ocr/ocr.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

namespace pier::pipelines::ocr {
namespace {

struct Image {
  int64_t width, height;
  std::vector<uint8_t> bytes;
  Image(int64_t w, int64_t h) : width(w), height(h), bytes(static_cast<size_t>(w * h * 3)) {}
  RgbView view() { return {width, height, bytes}; }
  uint8_t* at(int64_t x, int64_t y) { return bytes.data() + (y * width + x) * 3; }
};

// A probability map [height, width] of zeros with `value` on [x0, x1) x [y0, y1).
void Fill(std::vector<float>& map, int64_t width, int64_t x0, int64_t y0, int64_t x1, int64_t y1,
          float value) {
  for (int64_t y = y0; y < y1; ++y) {
    for (int64_t x = x0; x < x1; ++x) map[static_cast<size_t>(y * width + x)] = value;
  }
}

void ExpectBox(const TextBox& box, std::array<std::array<float, 2>, 4> corners, float tolerance) {
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(box.corners[i].x, corners[i][0], tolerance) << "corner " << i;
    EXPECT_NEAR(box.corners[i].y, corners[i][1], tolerance) << "corner " << i;
  }
}

TEST(OcrDetectionInputTest, SizeScalesTheShorterSideUpAndRoundsHalfToEven) {
  int64_t w = 0, h = 0;
  DetectionInputSize(480, 300, {}, &w, &h);  // 300 -> 736: 480 * 2.4533 = 1177 -> 1184
  EXPECT_EQ(w, 1184);
  EXPECT_EQ(h, 736);
  DetectionInputSize(2000, 1000, {}, &w, &h);  // no scaling; 2000 / 32 = 62.5 rounds to 62
  EXPECT_EQ(w, 1984);
  EXPECT_EQ(h, 992);
  DetectionInputOptions max_limit;
  max_limit.limit_min = false;
  max_limit.limit_side_len = 960;
  DetectionInputSize(3000, 1500, max_limit, &w, &h);
  EXPECT_EQ(w, 960);
  EXPECT_EQ(h, 480);
  DetectionInputSize(30, 4, max_limit, &w, &h);  // 4 / 32 rounds to 0: no input
  EXPECT_EQ(h, 0);
}

TEST(OcrDetectionInputTest, WritesBgrPlanesNormalisedAroundHalf) {
  Image image(3, 2);
  for (int64_t i = 0; i < 6; ++i) {
    uint8_t* p = image.bytes.data() + i * 3;
    p[0] = 255, p[1] = 0, p[2] = 51;
  }
  std::vector<float> out(3 * 4 * 6);
  WriteDetectionInput(image.view(), {}, 6, 4, out);
  EXPECT_FLOAT_EQ(out[0], 51 / 255.0f * 2 - 1);  // channel 0 is blue
  EXPECT_FLOAT_EQ(out[24], -1.0f);
  EXPECT_FLOAT_EQ(out[48 + 23], 1.0f);
  DetectionInputOptions rgb;
  rgb.bgr = false;
  WriteDetectionInput(image.view(), rgb, 6, 4, out);
  EXPECT_FLOAT_EQ(out[0], 1.0f);
}

TEST(OcrDetectionInputTest, ResizesWithHalfPixelCentres) {
  Image image(2, 1);
  image.at(0, 0)[0] = 0;
  image.at(1, 0)[0] = 100;
  std::vector<float> out(3 * 4);
  DetectionInputOptions raw;  // red channel first, values as they are
  raw.bgr = false;
  raw.mean = {0, 0, 0};
  raw.std = {1, 1, 1};
  raw.scale = 1;
  WriteDetectionInput(image.view(), raw, 4, 1, out);
  // Source positions -0.25 (clamped), 0.25, 0.75, 1.25 (clamped).
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + 4), (std::vector<float>{0, 25, 75, 100}));
}

TEST(OcrTextBoxTest, TwoRowsOfRectanglesComeInReadingOrderUnclipped) {
  const int64_t w = 200, h = 100;
  std::vector<float> map(static_cast<size_t>(w * h), 0.0f);
  Fill(map, w, 20, 14, 80, 34, 0.9f);    // A: upper left, its top 2 px below B's
  Fill(map, w, 120, 12, 170, 32, 0.9f);  // B: upper right
  Fill(map, w, 10, 60, 60, 80, 0.9f);    // C: the second row
  // The original image is twice the map. Dilation grows each rectangle by a pixel right and
  // down; A's box is then 60 x 20 (pixel centres 20..80, 14..34) and the unclip adds
  // 1200 * 1.6 / 160 = 12 on every side: (8, 2)-(92, 46) in the map, (16, 4)-(184, 92) here.
  // B and C (50 x 20) grow by 11.43, rounded as Clipper rounds; C is cut at the left edge.
  const std::vector<TextBox> boxes = FindTextBoxes(map, w, h, 400, 200);
  ASSERT_EQ(boxes.size(), 3u);
  ExpectBox(boxes[0], {{{16, 4}, {184, 4}, {184, 92}, {16, 92}}}, 0);
  ExpectBox(boxes[1], {{{218, 2}, {362, 2}, {362, 86}, {218, 86}}}, 0);
  ExpectBox(boxes[2], {{{0, 98}, {142, 98}, {142, 182}, {0, 182}}}, 0);
  // box_score_fast: 60 x 20 pixels of 0.9 among the 61 x 21 the box covers.
  EXPECT_NEAR(boxes[0].score, 1080.0 / 1281.0, 1e-5);
  EXPECT_NEAR(boxes[1].score, 900.0 / 1071.0, 1e-5);
}

TEST(OcrTextBoxTest, RotatedRectangleAsRapidOcrFindsIt) {
  const int64_t w = 200, h = 120;
  std::vector<float> map(static_cast<size_t>(w * h), 0.0f);
  const double t = 20 * std::numbers::pi / 180;
  for (int64_t y = 0; y < h; ++y) {  // 80 x 16 turned by 20 degrees about (100, 60)
    for (int64_t x = 0; x < w; ++x) {
      const double u = (x - 100) * std::cos(t) + (y - 60) * std::sin(t);
      const double v = -(x - 100) * std::sin(t) + (y - 60) * std::cos(t);
      if (std::fabs(u) <= 40 && std::fabs(v) <= 8) map[static_cast<size_t>(y * w + x)] = 0.8f;
    }
  }
  const std::vector<TextBox> boxes = FindTextBoxes(map, w, h, w, h);
  ASSERT_EQ(boxes.size(), 1u);
  // rapidocr 1.4.4 (DBPostProcess + filter_tag_det_res) on the same map: the box turned with
  // the rectangle, grown by about 10.7 px a side; our geometry is rebuilt, so within 1 px.
  ExpectBox(boxes[0], {{{58, 23}, {156, 59}, {142, 97}, {44, 61}}}, 1);
  EXPECT_NEAR(boxes[0].score, 0.6928, 0.01);
}

TEST(OcrTextBoxTest, DropsWeakSmallAndUncountedCandidates) {
  const int64_t w = 100, h = 60;
  std::vector<float> map(static_cast<size_t>(w * h), 0.0f);
  Fill(map, w, 10, 10, 12, 12, 0.99f);  // 2 x 2 (3 x 3 dilated): a short side of 2 < min_size
  Fill(map, w, 30, 10, 90, 30, 0.4f);   // text by the threshold, but its score is under 0.5
  EXPECT_TRUE(FindTextBoxes(map, w, h, w, h).empty());

  Fill(map, w, 30, 10, 90, 30, 0.9f);
  Fill(map, w, 10, 40, 60, 55, 0.9f);
  TextBoxOptions one;
  one.max_candidates = 1;  // OpenCV lists the contour it met last first: the lower one
  const std::vector<TextBox> boxes = FindTextBoxes(map, w, h, w, h, one);
  ASSERT_EQ(boxes.size(), 1u);
  EXPECT_GT(boxes[0].corners[0].y, 25);
  EXPECT_EQ(FindTextBoxes(map, w, h, w, h).size(), 2u);
}

TEST(OcrTextBoxTest, AHoleIsAContourToo) {
  const int64_t w = 120, h = 100;
  std::vector<float> map(static_cast<size_t>(w * h), 0.0f);
  Fill(map, w, 20, 20, 40, 40, 0.95f);
  Fill(map, w, 27, 27, 33, 33, 0.29f);  // under the threshold: a hole, 5 x 5 after dilation
  TextBoxOptions low;
  low.box_threshold = 0.4f;  // the hole's box scores 0.465 (36 pixels of 0.29 among 49)
  const std::vector<TextBox> boxes = FindTextBoxes(map, w, h, w, h, low);
  // cv2.findContours(RETR_LIST) lists the hole's border; rapidocr gives both boxes.
  ASSERT_EQ(boxes.size(), 2u);
  ExpectBox(boxes[0], {{{12, 12}, {48, 12}, {48, 48}, {12, 48}}}, 0);
  ExpectBox(boxes[1], {{{25, 25}, {35, 25}, {35, 35}, {25, 35}}}, 0);
  EXPECT_NEAR(boxes[1].score, 0.4651, 1e-4);
  EXPECT_EQ(FindTextBoxes(map, w, h, w, h).size(), 1u);  // at 0.5 the hole's box goes
}

Image Gradient() {
  Image image(64, 48);
  for (int64_t y = 0; y < 48; ++y) {
    for (int64_t x = 0; x < 64; ++x) {
      uint8_t* p = image.at(x, y);
      p[0] = static_cast<uint8_t>(4 * x), p[1] = static_cast<uint8_t>(5 * y), p[2] = 100;
    }
  }
  return image;
}

TEST(OcrLineCropTest, AxisAlignedBoxCopiesItsPixels) {
  Image image = Gradient();
  const TextBox box{{{{10, 8}, {40, 8}, {40, 20}, {10, 20}}}};
  int64_t w = 0, h = 0;
  CropSize(box, &w, &h);
  ASSERT_EQ(w, 30);
  ASSERT_EQ(h, 12);
  Image crop(w, h);
  CropTextLine(image.view(), box, crop.view());
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      ASSERT_EQ(crop.at(x, y)[0], image.at(10 + x, 8 + y)[0]) << x << "," << y;
      ASSERT_EQ(crop.at(x, y)[1], image.at(10 + x, 8 + y)[1]) << x << "," << y;
    }
  }
}

TEST(OcrLineCropTest, TallBoxIsTurnedCounterClockwise) {
  Image image = Gradient();
  const TextBox box{{{{10, 5}, {20, 5}, {20, 35}, {10, 35}}}};  // 10 x 30: 3 >= 1.5
  int64_t w = 0, h = 0;
  CropSize(box, &w, &h);
  ASSERT_EQ(w, 30);
  ASSERT_EQ(h, 10);
  Image crop(w, h);
  CropTextLine(image.view(), box, crop.view());
  // np.rot90: output (x, y) is the upright crop's (9 - y, x), the image's (19 - y, 5 + x).
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      ASSERT_EQ(crop.at(x, y)[0], image.at(19 - y, 5 + x)[0]) << x << "," << y;
      ASSERT_EQ(crop.at(x, y)[1], image.at(19 - y, 5 + x)[1]) << x << "," << y;
    }
  }
}

TEST(OcrLineCropTest, Rotate180ReversesThePixels) {
  Image line(3, 2);
  for (size_t i = 0; i < line.bytes.size(); ++i) line.bytes[i] = static_cast<uint8_t>(i);
  Rotate180(line.view());
  EXPECT_EQ(line.bytes,
            (std::vector<uint8_t>{15, 16, 17, 12, 13, 14, 9, 10, 11, 6, 7, 8, 3, 4, 5, 0, 1, 2}));
}

TEST(OcrLineCropTest, UpsideDownOnlyWhenTheClassifierIsSure) {
  EXPECT_TRUE(IsUpsideDown(std::vector<float>{0.05f, 0.95f}));
  EXPECT_FALSE(IsUpsideDown(std::vector<float>{0.15f, 0.85f}));
  EXPECT_FALSE(IsUpsideDown(std::vector<float>{0.97f, 0.03f}));
  EXPECT_TRUE(IsUpsideDown(std::vector<float>{0.15f, 0.85f}, 0.8f));
}

TEST(OcrLineTensorTest, KeepsTheRatioAndPadsWithZeros) {
  Image line(10, 5);  // ratio 2: 96 of 192 columns
  for (int64_t i = 0; i < 50; ++i) {
    uint8_t* p = line.bytes.data() + i * 3;
    p[0] = 255, p[1] = 0, p[2] = 51;
  }
  std::vector<float> out(3 * 48 * 192, -9.0f);
  WriteLineTensor(line.view(), 48, 192, out);
  const float blue = (51 / 255.0f - 0.5f) / 0.5f;
  for (int64_t y : {0, 47}) {
    EXPECT_FLOAT_EQ(out[static_cast<size_t>(y * 192)], blue);                      // B
    EXPECT_FLOAT_EQ(out[static_cast<size_t>(48 * 192 + y * 192 + 95)], -1.0f);     // G
    EXPECT_FLOAT_EQ(out[static_cast<size_t>(2 * 48 * 192 + y * 192 + 50)], 1.0f);  // R
    EXPECT_EQ(out[static_cast<size_t>(y * 192 + 96)], 0.0f);                       // padding
    EXPECT_EQ(out[static_cast<size_t>(2 * 48 * 192 + y * 192 + 191)], 0.0f);
  }
}

TEST(OcrLineTensorTest, RecognitionWidthFollowsTheWidestLine) {
  Image wide(100, 10), square(25, 25);
  std::vector<RgbView> lines = {square.view()};
  EXPECT_EQ(RecognitionWidth(lines), 320);
  lines.push_back(wide.view());
  EXPECT_EQ(RecognitionWidth(lines), 480);
  std::vector<float> out(3 * 48 * 480);
  WriteLineTensor(wide.view(), 48, 480, out);  // fills every column (value -1 for black)
  EXPECT_FLOAT_EQ(out[479], -1.0f);
}

TEST(OcrCtcTest, CharsetFollowsSplitlines) {
  EXPECT_EQ(ParseCharset("a\nb\r\nc"), (std::vector<std::string>{"", "a", "b", "c", " "}));
  EXPECT_EQ(ParseCharset("a\n"), (std::vector<std::string>{"", "a", " "}));
  EXPECT_EQ(ParseCharset("\xc3\xa9\xe2\x80\xa8x"),
            (std::vector<std::string>{"", "\xc3\xa9", "x", " "}));
}

TEST(OcrCtcTest, RepeatsCollapseAndBlanksSeparate) {
  const std::vector<std::string> charset = {"", "a", "b"};
  // Steps' top classes a, a, blank, a, b, b: "aa-abb" -> "aab".
  const std::vector<float> probabilities = {
      0.1f, 0.8f,  0.1f,   //
      0.2f, 0.6f,  0.2f,   //
      0.9f, 0.05f, 0.05f,  //
      0.3f, 0.7f,  0.0f,   //
      0.1f, 0.1f,  0.8f,   //
      0.0f, 0.1f,  0.9f,
  };
  const DecodedText text = CtcGreedyDecode(probabilities, 6, 3, charset);
  EXPECT_EQ(text.text, "aab");
  EXPECT_NEAR(text.score, (0.8 + 0.7 + 0.8) / 3, 1e-6);
  const DecodedText blank = CtcGreedyDecode(std::vector<float>{0.9f, 0.1f, 0.0f}, 1, 3, charset);
  EXPECT_EQ(blank.text, "");
  EXPECT_EQ(blank.score, 0.0f);
}

}  // namespace
}  // namespace pier::pipelines::ocr
