// The two decoders behind DecodeImage (image_preprocess.h), one per format: each writes the
// whole image, as stored, into `out` as 8-bit RGB and turns its library's error into
// INVALID_ARGUMENT. `out`'s dimensions are the header's; a file whose own header disagrees is
// refused. Internal to pier_image; thread-safe (no state outside the call).
#pragma once

#include <string_view>

#include "common/status.h"
#include "tensor_models/image/image_preprocess.h"

namespace pier::tensor_models::image {

// libjpeg-turbo: grey and YCbCr (and Adobe RGB) files; a file that ends early is an error.
[[nodiscard]] Status DecodeJpeg(std::string_view encoded, RgbView out);

// libpng: every colour type and bit depth, interlaced or not.
[[nodiscard]] Status DecodePng(std::string_view encoded, RgbView out);

}  // namespace pier::tensor_models::image
