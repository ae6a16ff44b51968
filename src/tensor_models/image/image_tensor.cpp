// WriteTensor: pixels to tensor elements. The normalisation is computed in float as
// (pixel * scale - mean[c]) / std[c] (what numpy does over float32 arrays), once per channel
// and pixel value into a table; FP16 rounds that float to nearest even; UINT8 stores the
// pixel itself.
#include "tensor_models/image/image_tensor.h"

#include <array>
#include <cstdint>
#include <cstring>

#include "common/check.h"
#include "tensor/float16.h"

namespace pier::tensor_models::image {
namespace {

// Each RGB channel's element bytes for each pixel value, in the tensor's type.
struct ValueTable {
  size_t element_bytes = 0;
  std::array<std::array<std::array<uint8_t, 4>, 256>, 3> bytes{};  // [channel][value][byte]
};

ValueTable MakeTable(const PreprocessSpec& spec) {
  ValueTable table;
  table.element_bytes = static_cast<size_t>(ElementSize(spec.type));
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) {
      uint8_t* to = table.bytes[c][v].data();
      const float value = (static_cast<float>(v) * spec.scale - spec.mean[c]) / spec.std[c];
      if (spec.type == ElementType::kFp32) {
        std::memcpy(to, &value, 4);  // little-endian hosts: KServe's byte order
      } else if (spec.type == ElementType::kFp16) {
        const uint16_t half = Fp32ToFp16(value);
        std::memcpy(to, &half, 2);
      } else {
        to[0] = static_cast<uint8_t>(v);
      }
    }
  }
  return table;
}

}  // namespace

void WriteTensor(const RgbView& image, int64_t left, int64_t top, const PreprocessSpec& spec,
                 std::span<uint8_t> out) {
  PIER_CHECK(spec.type == ElementType::kFp32 || spec.type == ElementType::kFp16 ||
                 spec.type == ElementType::kUint8,
             "WriteTensor: FP32, FP16 or UINT8");
  PIER_CHECK(out.size() == PreprocessedBytes(spec), "WriteTensor: the output's size");
  const ValueTable table = MakeTable(spec);
  const size_t element = table.element_bytes;
  const int64_t height = spec.height;
  const int64_t width = spec.width;
  const std::array<uint8_t, 3> pad = {spec.pad_value, spec.pad_value, spec.pad_value};
  for (int64_t y = 0; y < height; ++y) {
    const int64_t sy = y - top;
    const bool row_inside = sy >= 0 && sy < image.height;
    for (int64_t x = 0; x < width; ++x) {
      const int64_t sx = x - left;
      const uint8_t* pixel = row_inside && sx >= 0 && sx < image.width
                                 ? image.pixels.data() + (sy * image.width + sx) * 3
                                 : pad.data();
      for (int slot = 0; slot < 3; ++slot) {
        const int c = spec.channels == ChannelOrder::kBgr ? 2 - slot : slot;  // RGB channel
        const int64_t index = spec.layout == TensorLayout::kNchw ? (slot * height + y) * width + x
                                                                 : (y * width + x) * 3 + slot;
        std::memcpy(out.data() + index * element, table.bytes[c][pixel[c]].data(), element);
      }
    }
  }
}

}  // namespace pier::tensor_models::image
