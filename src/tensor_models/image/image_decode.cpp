// DecodeImage: the probed format's decoder into the caller's RGB buffer.
#include <cstdint>

#include "common/check.h"
#include "tensor_models/image/image_decoders.h"
#include "tensor_models/image/image_preprocess.h"

namespace pier::tensor_models::image {

Status DecodeImage(std::string_view encoded, const ImageHeader& header, RgbView out) {
  PIER_CHECK(out.width == header.width && out.height == header.height,
             "DecodeImage: the output's dimensions are not the header's");
  PIER_CHECK(out.pixels.size() == static_cast<uint64_t>(out.width) * out.height * 3,
             "DecodeImage: the output holds width x height x 3 bytes");
  switch (header.format) {
    case ImageFormat::kJpeg:
      return DecodeJpeg(encoded, out);
    case ImageFormat::kPng:
      return DecodePng(encoded, out);
  }
  return InvalidArgumentError("unknown image format");
}

}  // namespace pier::tensor_models::image
