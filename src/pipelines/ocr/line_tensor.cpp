// RecognitionWidth, WriteLineTensor: the resize_norm_img of rapidocr's TextClassifier and
// TextRecognizer (ch_ppocr_cls/text_cls.py, ch_ppocr_rec/text_recognize.py).
#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "pipelines/ocr/ocr.h"
#include "pipelines/ocr/resize_linear.h"

namespace pier::pipelines::ocr {

int64_t RecognitionWidth(std::span<const RgbView> lines, int64_t height, int64_t min_width) {
  double ratio = static_cast<double>(min_width) / static_cast<double>(height);
  for (const RgbView& line : lines) {
    if (line.height > 0) {
      ratio = std::max(ratio, static_cast<double>(line.width) / static_cast<double>(line.height));
    }
  }
  return static_cast<int64_t>(static_cast<double>(height) * ratio);
}

void WriteLineTensor(const RgbView& line, int64_t height, int64_t width, std::span<float> out) {
  PIER_CHECK(line.width > 0 && line.height > 0 && height > 0 && width > 0);
  PIER_CHECK(out.size() == static_cast<size_t>(3 * height * width));
  const double ratio = static_cast<double>(line.width) / static_cast<double>(line.height);
  const auto fitted = static_cast<int64_t>(std::ceil(static_cast<double>(height) * ratio));
  const int64_t resized = std::min(fitted, width);
  const std::vector<LinearTap> xs = LinearTaps(line.width, resized);
  const std::vector<LinearTap> ys = LinearTaps(line.height, height);
  // numpy's float32 arithmetic: v / 255, - 0.5, / 0.5.
  std::array<float, 256> value{};
  for (int v = 0; v < 256; ++v) {
    value[static_cast<size_t>(v)] = (static_cast<float>(v) / 255.0f - 0.5f) / 0.5f;
  }
  std::fill(out.begin(), out.end(), 0.0f);
  for (int t = 0; t < 3; ++t) {  // tensor channels B, G, R
    float* plane = out.data() + static_cast<size_t>(t * height * width);
    for (int64_t y = 0; y < height; ++y) {
      for (int64_t x = 0; x < resized; ++x) {
        plane[y * width + x] = value[SampleLinear(line, xs[static_cast<size_t>(x)],
                                                  ys[static_cast<size_t>(y)], 2 - t)];
      }
    }
  }
}

}  // namespace pier::pipelines::ocr
