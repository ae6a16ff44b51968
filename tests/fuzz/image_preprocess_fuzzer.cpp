// libFuzzer target: any bytes as an encoded image through PreprocessImage
// (tensor_models/image/image_preprocess.h): probe, limits, libjpeg-turbo or libpng, EXIF
// orientation, resize and the tensor write. The first byte picks the spec (fit, filter, type,
// layout, channel order, EXIF on or off); the rest is the file. Limits are small (1024 x 1024,
// 256K pixels) so the fuzzer spends its time in the parsers, not in large resizes, and the
// BufferSource hands out exact-size blocks (ASan sees any write past one) up to a 16 MiB
// budget, refusing beyond it with RESOURCE_EXHAUSTED.
//
// A refusal is INVALID_ARGUMENT (or the budget's RESOURCE_EXHAUSTED), never a crash; an
// accepted image's geometry is within the limits and its FP32 values are finite. Built only
// with -DPIER_FUZZ=ON and clang; seed it with the fixtures behind a spec byte:
//   mkdir -p /tmp/image-corpus && for f in tests/fixtures/image/*.jpg \
//     tests/fixtures/image/*.png; do (printf '\x10'; cat $f) > /tmp/image-corpus/${f##*/}; done
//   build-fuzz/tests/fuzz/image_preprocess_fuzzer -max_total_time=90 -rss_limit_mb=2048 \
//     -max_len=65536 /tmp/image-corpus
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "tensor_models/image/image_preprocess.h"

namespace {

using pier::tensor_models::image::BufferSource;
using pier::tensor_models::image::PreprocessSpec;

PreprocessSpec SpecFrom(uint8_t choice) {
  using namespace pier::tensor_models::image;
  PreprocessSpec spec;
  spec.height = 7 + (choice & 3) * 5;  // 7..22: odd and even, smaller and larger than seeds
  spec.width = 9 + ((choice >> 2) & 3) * 4;
  static constexpr ResizeMode kModes[] = {ResizeMode::kStretch, ResizeMode::kCrop,
                                          ResizeMode::kLetterbox};
  spec.resize = kModes[(choice >> 4) % 3];
  spec.shorter_side = std::max(spec.height, spec.width) + (choice & 1);
  spec.interpolation = static_cast<Interpolation>((choice >> 1) % 6);
  static constexpr pier::ElementType kTypes[] = {pier::ElementType::kFp32, pier::ElementType::kFp16,
                                                 pier::ElementType::kUint8};
  spec.type = kTypes[(choice >> 3) % 3];
  spec.layout = (choice & 0x40) != 0 ? TensorLayout::kNhwc : TensorLayout::kNchw;
  spec.channels = (choice & 0x80) != 0 ? ChannelOrder::kBgr : ChannelOrder::kRgb;
  spec.apply_exif = (choice & 0x20) == 0;
  spec.mean = {0.485f, 0.456f, 0.406f};
  spec.std = {0.229f, 0.224f, 0.225f};
  spec.limits.max_width = 1024;
  spec.limits.max_height = 1024;
  spec.limits.max_pixels = 1 << 18;
  return spec;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const PreprocessSpec spec = SpecFrom(data[0]);
  // Copy into an exact-size buffer so ASan reports any read past the end.
  std::unique_ptr<char[]> bytes(new char[size]);
  std::memcpy(bytes.get(), data + 1, size - 1);
  const std::string_view encoded(bytes.get(), size - 1);

  std::vector<std::unique_ptr<uint8_t[]>> blocks;
  size_t budget = size_t{16} << 20;
  const BufferSource buffers = [&](size_t n) -> pier::Result<std::span<uint8_t>> {
    if (n > budget) return pier::ResourceExhaustedError("fuzz budget");
    budget -= n;
    blocks.emplace_back(new uint8_t[n == 0 ? 1 : n]);
    return std::span<uint8_t>(blocks.back().get(), n);
  };
  std::vector<uint8_t> out(pier::tensor_models::image::PreprocessedBytes(spec));
  pier::Result<pier::tensor_models::image::ImageGeometry> geometry =
      pier::tensor_models::image::PreprocessImage(encoded, spec, buffers, out);
  if (!geometry.ok()) {
    const pier::StatusCode code = geometry.status().code();
    if (code != pier::StatusCode::kInvalidArgument &&
        !(code == pier::StatusCode::kResourceExhausted &&
          geometry.status().message() == "fuzz budget")) {
      std::abort();
    }
    if (geometry.status().message().empty()) std::abort();
    return 0;
  }
  if (geometry->source_width < 1 || geometry->source_height < 1 ||
      geometry->source_width * geometry->source_height > spec.limits.max_pixels ||
      !(geometry->scale_x > 0) || !(geometry->scale_y > 0)) {
    std::abort();
  }
  if (spec.type == pier::ElementType::kFp32) {
    for (size_t i = 0; i < out.size(); i += 4) {
      float value;
      std::memcpy(&value, out.data() + i, 4);
      if (!std::isfinite(value)) std::abort();
    }
  }
  return 0;
}
