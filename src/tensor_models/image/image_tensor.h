// The tensor write, PreprocessImage's last step: an RGB image placed at (left, top) of the
// tensor's height x width (pixels outside it are spec.pad_value in every channel), each pixel
// normalised and stored in spec's type, layout and channel order. Internal to pier_image;
// thread-safe.
#pragma once

#include <cstdint>
#include <span>

#include "tensor_models/image/image_preprocess.h"

namespace pier::tensor_models::image {

// `out` holds PreprocessedBytes(spec) bytes; spec.type is kFp32, kFp16 or kUint8.
void WriteTensor(const RgbView& image, int64_t left, int64_t top, const PreprocessSpec& spec,
                 std::span<uint8_t> out);

}  // namespace pier::tensor_models::image
