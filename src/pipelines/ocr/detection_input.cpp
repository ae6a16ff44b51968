// DetectionInputSize, WriteDetectionInput: rapidocr's DetPreProcess (ch_ppocr_det/utils.py).
#include <cmath>

#include "common/check.h"
#include "pipelines/ocr/ocr.h"
#include "pipelines/ocr/resize_linear.h"

namespace pier::pipelines::ocr {

void DetectionInputSize(int64_t width, int64_t height, const DetectionInputOptions& options,
                        int64_t* out_width, int64_t* out_height) {
  const double limit = static_cast<double>(options.limit_side_len);
  double ratio = 1.0;
  if (options.limit_min) {
    if (std::min(width, height) < options.limit_side_len) {
      ratio = limit / static_cast<double>(height < width ? height : width);
    }
  } else if (std::max(width, height) > options.limit_side_len) {
    ratio = limit / static_cast<double>(height > width ? height : width);
  }
  // int(side * ratio), then Python's round (half to even) of side / multiple.
  auto fit = [&](int64_t side) {
    const auto scaled = static_cast<int64_t>(static_cast<double>(side) * ratio);
    const double m = static_cast<double>(options.multiple);
    return static_cast<int64_t>(std::nearbyint(static_cast<double>(scaled) / m) * m);
  };
  *out_width = fit(width);
  *out_height = fit(height);
}

void WriteDetectionInput(const RgbView& image, const DetectionInputOptions& options,
                         int64_t out_width, int64_t out_height, std::span<float> out) {
  PIER_CHECK(image.width > 0 && image.height > 0 && out_width > 0 && out_height > 0);
  PIER_CHECK(out.size() == static_cast<size_t>(3 * out_width * out_height));
  const std::vector<LinearTap> xs = LinearTaps(image.width, out_width);
  const std::vector<LinearTap> ys = LinearTaps(image.height, out_height);
  const size_t plane = static_cast<size_t>(out_width * out_height);
  for (int t = 0; t < 3; ++t) {  // tensor channel
    const int c = options.bgr ? 2 - t : t;
    // numpy's arithmetic: float32 pixel * scale, then (x - mean) / std in float64.
    std::array<float, 256> value{};
    for (int v = 0; v < 256; ++v) {
      const float scaled = static_cast<float>(v) * options.scale;
      value[static_cast<size_t>(v)] =
          static_cast<float>((static_cast<double>(scaled) -
                              static_cast<double>(options.mean[static_cast<size_t>(t)])) /
                             static_cast<double>(options.std[static_cast<size_t>(t)]));
    }
    float* dst = out.data() + plane * static_cast<size_t>(t);
    for (int64_t y = 0; y < out_height; ++y) {
      for (int64_t x = 0; x < out_width; ++x) {
        *dst++ =
            value[SampleLinear(image, xs[static_cast<size_t>(x)], ys[static_cast<size_t>(y)], c)];
      }
    }
  }
}

}  // namespace pier::pipelines::ocr
