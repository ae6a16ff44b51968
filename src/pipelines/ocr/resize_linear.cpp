// LinearTaps: cv::resize's per-coordinate table for INTER_LINEAR (resize.cpp, resizeGeneric's
// xofs/alpha), in its float arithmetic so the 11-bit weights round as OpenCV's do.
#include "pipelines/ocr/resize_linear.h"

#include <cmath>

namespace pier::pipelines::ocr {

std::vector<LinearTap> LinearTaps(int64_t in_size, int64_t out_size) {
  std::vector<LinearTap> taps(static_cast<size_t>(std::max<int64_t>(out_size, 0)));
  // OpenCV keeps the inverse of the output/input ratio, not input/output itself.
  const double scale = 1.0 / (static_cast<double>(out_size) / static_cast<double>(in_size));
  for (int64_t d = 0; d < out_size; ++d) {
    float f = static_cast<float>((static_cast<double>(d) + 0.5) * scale - 0.5);
    int64_t s = static_cast<int64_t>(std::floor(f));
    f -= static_cast<float>(s);
    if (s < 0) {
      f = 0;
      s = 0;
    }
    if (s >= in_size - 1) {
      f = 0;
      s = in_size - 1;
    }
    LinearTap& tap = taps[static_cast<size_t>(d)];
    tap.i0 = s;
    tap.i1 = std::min(s + 1, in_size - 1);
    tap.w0 = static_cast<int32_t>(std::nearbyint((1.0f - f) * 2048.0f));
    tap.w1 = static_cast<int32_t>(std::nearbyint(f * 2048.0f));
  }
  return taps;
}

}  // namespace pier::pipelines::ocr
