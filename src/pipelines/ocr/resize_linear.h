// OpenCV's cv::resize with INTER_LINEAR on 8-bit images, one output sample at a time, so the
// OCR tensors are written straight from the source image without a resized copy (internal to
// pipelines/ocr). rapidocr resizes with it before every model; its arithmetic is followed:
// half-pixel centres, source positions clamped to the edge, 11-bit weights and the SIMD path's
// rounding (((h0 >> 4) * b0 >> 16) + ((h1 >> 4) * b1 >> 16) + 2) >> 2. OpenCV's scalar tail
// rounds slightly differently (by one level at most), as does its exact-2x shortcut (INTER_AREA,
// which equals this formula).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tensor_models/image/image_preprocess.h"

namespace pier::pipelines::ocr {

// One output coordinate's two source indices and their weights (w0 + w1 == 2048 up to rounding).
struct LinearTap {
  int64_t i0 = 0;
  int64_t i1 = 0;
  int32_t w0 = 2048;
  int32_t w1 = 0;
};

// The taps of each of `out_size` output positions along a side of `in_size` source pixels.
std::vector<LinearTap> LinearTaps(int64_t in_size, int64_t out_size);

// The resized image's channel `c` (0 R, 1 G, 2 B) at the position the two taps name.
inline uint8_t SampleLinear(const tensor_models::image::RgbView& in, const LinearTap& x,
                            const LinearTap& y, int c) {
  const uint8_t* row0 = in.pixels.data() + y.i0 * in.width * 3;
  const uint8_t* row1 = in.pixels.data() + y.i1 * in.width * 3;
  const int32_t h0 = row0[x.i0 * 3 + c] * x.w0 + row0[x.i1 * 3 + c] * x.w1;  // <= 255 * 2048
  const int32_t h1 = row1[x.i0 * 3 + c] * x.w0 + row1[x.i1 * 3 + c] * x.w1;
  const int32_t v = (((h0 >> 4) * y.w0) >> 16) + (((h1 >> 4) * y.w1) >> 16);
  return static_cast<uint8_t>(std::min<int32_t>(255, std::max<int32_t>(0, (v + 2) >> 2)));
}

}  // namespace pier::pipelines::ocr
