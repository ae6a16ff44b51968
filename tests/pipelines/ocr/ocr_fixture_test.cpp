// The OCR processors against rapidocr_onnxruntime 1.4.4's Python on rendered images:
// tests/fixtures/ocr/ (tools/gen_ocr_fixtures.py; index.json says what each figure is). The
// detection model's output is in the fixtures (quantised to 8 bits, and rapidocr's boxes were
// computed from that quantised map), so no model runs here.
//
// Tolerances, and why:
//   tensors   within one 8-bit level (2/255 after (v / 255 - 0.5) / 0.5): OpenCV's resize
//             rounds its fixed-point sums a little differently in its scalar tail, so a sample
//             can differ by one level; measured: see the test's printed maxima;
//   boxes     the same count; corners within 2 px of the original image: the minimum-area
//             rectangles come from a rebuilt rotating calipers (its float rounding differs from
//             OpenCV's, which moves a truncated corner by a pixel in the map), then scaled;
//   scores    within 0.01: box_score_fast over a rasterised quadrilateral;
//   crops     the same size; pixels within 2 levels, mean difference under 0.05 level: the
//             homography is solved here rather than inverted from OpenCV's, and the bicubic sum
//             is float, so a rounding can go the other way;
//   decoding  the same text; score within 1e-5 (the fixture's probabilities have 6 digits).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "pipelines/ocr/ocr.h"

namespace pier::pipelines::ocr {
namespace {

namespace image = tensor_models::image;
using nlohmann::json;

constexpr float kLevel = 2.0f / 255.0f;  // one 8-bit step after normalisation

std::string Fixture(const std::string& name) {
  std::ifstream in(std::string(PIER_SOURCE_DIR) + "/tests/fixtures/ocr/" + name, std::ios::binary);
  EXPECT_TRUE(in.good()) << name;
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

struct Picture {
  std::vector<uint8_t> bytes;
  RgbView view;
};

Picture ReadPng(const std::string& name) {
  const std::string encoded = Fixture(name);
  const Result<image::ImageHeader> header = image::ProbeImage(encoded);
  EXPECT_TRUE(header.ok()) << name;
  Picture picture;
  picture.bytes.resize(static_cast<size_t>(header->width * header->height * 3));
  picture.view = {header->width, header->height, picture.bytes};
  EXPECT_TRUE(image::DecodeImage(encoded, *header, picture.view).ok()) << name;
  return picture;
}

const json& Index() {
  static const json index = json::parse(Fixture("index.json"));
  return index;
}

// Checks each [c, y, x, value] sample of a [3, height, width] tensor; returns the largest error.
float CheckSamples(const json& samples, const std::vector<float>& tensor, int64_t height,
                   int64_t width, const std::string& what) {
  float worst = 0;
  for (const json& s : samples) {
    const auto c = s[0].get<int64_t>(), y = s[1].get<int64_t>(), x = s[2].get<int64_t>();
    const float got = tensor[static_cast<size_t>((c * height + y) * width + x)];
    const float error = std::fabs(got - s[3].get<float>());
    worst = std::max(worst, error);
    EXPECT_LE(error, kLevel * 1.001f) << what << " at " << s.dump();
  }
  return worst;
}

TextBox BoxOf(const json& corners) {
  TextBox box;
  for (size_t i = 0; i < 4; ++i) {
    box.corners[i] = {corners[i][0].get<float>(), corners[i][1].get<float>()};
  }
  return box;
}

TEST(OcrFixtureTest, DetectionInputMatchesDetPreProcess) {
  for (const json& c : Index()["cases"]) {
    const Picture picture = ReadPng(c["image"]);
    int64_t w = 0, h = 0;
    DetectionInputSize(picture.view.width, picture.view.height, {}, &w, &h);
    ASSERT_EQ(w, c["det_width"].get<int64_t>());
    ASSERT_EQ(h, c["det_height"].get<int64_t>());
    std::vector<float> tensor(static_cast<size_t>(3 * w * h));
    WriteDetectionInput(picture.view, {}, w, h, tensor);
    const float worst = CheckSamples(c["det_samples"], tensor, h, w, c["image"]);
    for (int64_t ch = 0; ch < 3; ++ch) {
      double sum = 0;
      for (int64_t i = 0; i < w * h; ++i) sum += tensor[static_cast<size_t>(ch * w * h + i)];
      EXPECT_NEAR(sum / static_cast<double>(w * h), c["det_channel_means"][ch].get<double>(), 1e-3);
    }
    std::printf("%s: detection input %lld x %lld, largest sampled error %.5f\n",
                c["image"].get<std::string>().c_str(), static_cast<long long>(w),
                static_cast<long long>(h), worst);
  }
}

TEST(OcrFixtureTest, TextBoxesMatchDbPostProcess) {
  for (const json& c : Index()["cases"]) {
    const Picture prob = ReadPng(c["prob"]);  // grey, expanded to RGB: red is the byte
    const int64_t w = prob.view.width, h = prob.view.height;
    std::vector<float> map(static_cast<size_t>(w * h));
    for (size_t i = 0; i < map.size(); ++i) map[i] = static_cast<float>(prob.bytes[i * 3]) / 255.0f;
    const std::vector<TextBox> boxes =
        FindTextBoxes(map, w, h, c["width"].get<int64_t>(), c["height"].get<int64_t>());
    const json& want = c["boxes"];
    ASSERT_EQ(boxes.size(), want.size()) << c["image"];
    float worst = 0, worst_score = 0;
    for (size_t b = 0; b < boxes.size(); ++b) {
      for (size_t i = 0; i < 4; ++i) {
        const float dx = std::fabs(boxes[b].corners[i].x - want[b][i][0].get<float>());
        const float dy = std::fabs(boxes[b].corners[i].y - want[b][i][1].get<float>());
        worst = std::max({worst, dx, dy});
        EXPECT_LE(std::max(dx, dy), 2.0f) << c["image"] << " box " << b << " corner " << i;
      }
      const float score_error = std::fabs(boxes[b].score - c["scores"][b].get<float>());
      worst_score = std::max(worst_score, score_error);
      EXPECT_LE(score_error, 0.01f) << c["image"] << " box " << b;
    }
    std::printf("%s: %zu boxes, largest corner error %.0f px, largest score error %.5f\n",
                c["image"].get<std::string>().c_str(), boxes.size(), worst, worst_score);
  }
}

TEST(OcrFixtureTest, CropsMatchGetRotateCropImage) {
  for (const json& c : Index()["cases"]) {
    const Picture picture = ReadPng(c["image"]);
    for (size_t b = 0; b < c["lines"].size(); ++b) {
      const json& line = c["lines"][b];
      const TextBox box = BoxOf(c["boxes"][b]);
      int64_t w = 0, h = 0;
      CropSize(box, &w, &h);
      ASSERT_EQ(w, line["crop_width"].get<int64_t>()) << line["crop"];
      ASSERT_EQ(h, line["crop_height"].get<int64_t>()) << line["crop"];
      std::vector<uint8_t> bytes(static_cast<size_t>(w * h * 3));
      CropTextLine(picture.view, box, {w, h, bytes});
      const Picture want = ReadPng(line["crop"]);
      int worst = 0;
      double total = 0;
      for (size_t i = 0; i < bytes.size(); ++i) {
        const int d = std::abs(static_cast<int>(bytes[i]) - static_cast<int>(want.bytes[i]));
        worst = std::max(worst, d);
        total += d;
      }
      const double mean = total / static_cast<double>(bytes.size());
      EXPECT_LE(worst, 2) << line["crop"];
      EXPECT_LT(mean, 0.05) << line["crop"];
      std::printf("%s: %lld x %lld, largest pixel difference %d, mean %.4f\n",
                  line["crop"].get<std::string>().c_str(), static_cast<long long>(w),
                  static_cast<long long>(h), worst, mean);
    }
  }
}

TEST(OcrFixtureTest, LineTensorsMatchResizeNormImg) {
  for (const json& c : Index()["cases"]) {
    std::vector<Picture> lines;
    for (const json& line : c["lines"]) {
      lines.push_back(ReadPng(line["crop"]));
      // The classifier's input, then its verdict on rapidocr's own scores.
      std::vector<float> cls(3 * 48 * 192);
      WriteLineTensor(lines.back().view, 48, 192, cls);
      CheckSamples(line["cls_samples"], cls, 48, 192, line["crop"]);
      EXPECT_EQ(IsUpsideDown(line["cls_scores"].get<std::vector<float>>()),
                line["turned_180"].get<bool>())
          << line["crop"];
      if (line["turned_180"].get<bool>()) Rotate180(lines.back().view);
    }
    std::vector<RgbView> views;
    for (const Picture& p : lines) views.push_back(p.view);
    const int64_t width = RecognitionWidth(views);
    ASSERT_EQ(width, c["rec_width"].get<int64_t>()) << c["image"];
    float worst = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
      std::vector<float> rec(static_cast<size_t>(3 * 48 * width));
      WriteLineTensor(views[i], 48, width, rec);
      worst = std::max(
          worst, CheckSamples(c["lines"][i]["rec_samples"], rec, 48, width, c["lines"][i]["crop"]));
    }
    std::printf("%s: recognition width %lld, largest sampled error %.5f\n",
                c["image"].get<std::string>().c_str(), static_cast<long long>(width), worst);
  }
}

TEST(OcrFixtureTest, CharsetAndDecodingMatchCtcLabelDecode) {
  const std::vector<std::string> charset = ParseCharset(Fixture("rec_character.txt"));
  ASSERT_EQ(charset.size(), 6625u);
  ASSERT_EQ(charset.size(), Index()["charset_entries"].get<size_t>());
  const int64_t classes = 6625;
  for (const json& c : Index()["cases"]) {
    for (const json& line : c["lines"]) {
      // Each step's top two classes as the recogniser gave them; the rest share what is left.
      const json& top2 = line["rec_top2"];
      const auto steps = static_cast<int64_t>(top2.size());
      std::vector<float> probabilities(static_cast<size_t>(steps * classes));
      for (int64_t s = 0; s < steps; ++s) {
        const json& t = top2[static_cast<size_t>(s)];
        float* row = probabilities.data() + s * classes;
        const float rest = std::max(0.0f, 1 - t[1].get<float>() - t[3].get<float>()) / classes;
        std::fill(row, row + classes, std::min(rest, t[3].get<float>()));
        row[t[0].get<int64_t>()] = t[1].get<float>();
        row[t[2].get<int64_t>()] = t[3].get<float>();
      }
      const DecodedText text = CtcGreedyDecode(probabilities, steps, classes, charset);
      EXPECT_EQ(text.text, line["text"].get<std::string>()) << line["crop"];
      EXPECT_NEAR(text.score, line["text_score"].get<float>(), 1e-5) << line["crop"];
    }
  }
}

}  // namespace
}  // namespace pier::pipelines::ocr
