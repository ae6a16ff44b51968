// A window of a resize: the pixels Pillow's Image.resize((full_width, full_height), filter)
// would give at columns [x0, x0 + out.width) and rows [y0, y0 + out.height), computed without
// the rest (each output pixel has its own coefficients, so the window's bits are the full
// resize's). PreprocessImage's center crop resizes only what it keeps. Internal to pier_image;
// thread-safe.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "tensor_models/image/image_preprocess.h"

namespace pier::tensor_models::image {

// The intermediate (out.width x the source rows the window's rows need) comes from `buffers`.
[[nodiscard]] Status ResizeWindow(const RgbView& in, Interpolation interpolation,
                                  int64_t full_width, int64_t full_height, int64_t x0, int64_t y0,
                                  const BufferSource& buffers, RgbView out);

}  // namespace pier::tensor_models::image
