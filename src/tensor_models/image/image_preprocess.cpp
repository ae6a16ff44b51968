// PreprocessImage: probe, limits, decode, orient, fit (stretch, torchvision's Resize +
// CenterCrop, or letterbox) and the tensor write; PreprocessedBytes.
//
// Buffers asked of the caller's BufferSource, in order: the decoded image (W x H x 3), the
// oriented one when EXIF turns it, the resize's intermediate (the fitted width x the source
// rows it reads) and the fitted image (stretch, crop: the tensor's height x width x 3;
// letterbox: the scaled image's). None is asked for before the limits pass.
#include "tensor_models/image/image_preprocess.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "common/check.h"
#include "tensor_models/image/image_resize_window.h"
#include "tensor_models/image/image_tensor.h"

namespace pier::tensor_models::image {
namespace {

Status CheckSpec(const PreprocessSpec& spec) {
  if (spec.height <= 0 || spec.width <= 0) {
    return InvalidArgumentError("preprocess: the tensor's height and width must be positive");
  }
  if (spec.type != ElementType::kFp32 && spec.type != ElementType::kFp16 &&
      spec.type != ElementType::kUint8) {
    return InvalidArgumentError("preprocess: the tensor's type must be FP32, FP16 or UINT8, not " +
                                std::string(ElementTypeName(spec.type)));
  }
  if (spec.resize == ResizeMode::kCrop && spec.shorter_side < std::max(spec.height, spec.width)) {
    return InvalidArgumentError("preprocess: shorter_side " + std::to_string(spec.shorter_side) +
                                " is less than the crop's " + std::to_string(spec.height) + " x " +
                                std::to_string(spec.width));
  }
  return Status::Ok();
}

Result<RgbView> NewImage(const BufferSource& buffers, int64_t width, int64_t height) {
  const auto bytes = static_cast<size_t>(width * height * 3);
  PIER_ASSIGN_OR_RETURN(std::span<uint8_t> span, buffers(bytes));
  PIER_CHECK(span.size() >= bytes, "BufferSource gave fewer bytes than asked");
  return RgbView{width, height, span.first(bytes)};
}

// `image` resized to full_width x full_height, the window (x0, y0, width, height) of it; the
// image itself when that is all of it unchanged.
Result<RgbView> Fit(const RgbView& image, const PreprocessSpec& spec, int64_t full_width,
                    int64_t full_height, int64_t x0, int64_t y0, int64_t width, int64_t height,
                    const BufferSource& buffers) {
  if (full_width == image.width && full_height == image.height && width == image.width &&
      height == image.height) {
    return image;
  }
  PIER_ASSIGN_OR_RETURN(RgbView fitted, NewImage(buffers, width, height));
  PIER_RETURN_IF_ERROR(
      ResizeWindow(image, spec.interpolation, full_width, full_height, x0, y0, buffers, fitted));
  return fitted;
}

}  // namespace

uint64_t PreprocessedBytes(const PreprocessSpec& spec) {
  return uint64_t{3} * static_cast<uint64_t>(spec.height) * static_cast<uint64_t>(spec.width) *
         static_cast<uint64_t>(ElementSize(spec.type));
}

Result<ImageGeometry> PreprocessImage(std::string_view encoded, const PreprocessSpec& spec,
                                      const BufferSource& buffers, std::span<uint8_t> out) {
  PIER_RETURN_IF_ERROR(CheckSpec(spec));
  PIER_CHECK(out.size() == PreprocessedBytes(spec), "PreprocessImage: the output's size");
  PIER_ASSIGN_OR_RETURN(ImageHeader header, ProbeImage(encoded));
  PIER_RETURN_IF_ERROR(CheckImageLimits(header, encoded.size(), spec.limits));

  PIER_ASSIGN_OR_RETURN(RgbView image, NewImage(buffers, header.width, header.height));
  PIER_RETURN_IF_ERROR(DecodeImage(encoded, header, image));
  const int orientation = spec.apply_exif ? header.orientation : 1;
  if (orientation != 1) {
    int64_t width = 0;
    int64_t height = 0;
    OrientedSize(orientation, image.width, image.height, &width, &height);
    PIER_ASSIGN_OR_RETURN(RgbView oriented, NewImage(buffers, width, height));
    OrientImage(image, orientation, oriented);
    image = oriented;
  }

  const int64_t w = image.width;  // the source, after orientation
  const int64_t h = image.height;
  ImageGeometry geometry;
  geometry.source_width = w;
  geometry.source_height = h;
  int64_t left = 0;
  int64_t top = 0;
  RgbView fitted;
  switch (spec.resize) {
    case ResizeMode::kStretch: {
      PIER_ASSIGN_OR_RETURN(fitted, Fit(image, spec, spec.width, spec.height, 0, 0, spec.width,
                                        spec.height, buffers));
      geometry.scale_x = static_cast<double>(spec.width) / w;
      geometry.scale_y = static_cast<double>(spec.height) / h;
      break;
    }
    case ResizeMode::kCrop: {
      // torchvision's Resize(s): the shorter side to s, the other int(s * long / short).
      const int64_t s = spec.shorter_side;
      const int64_t shorter = std::min(w, h);
      const int64_t longer = std::max(w, h);
      const auto scaled_longer =
          static_cast<int64_t>(static_cast<double>(s * longer) / static_cast<double>(shorter));
      const int64_t resized_width = w <= h ? s : scaled_longer;
      const int64_t resized_height = w <= h ? scaled_longer : s;
      // CenterCrop: int(round((size - crop) / 2.0)), Python's round half to even.
      const auto crop_top =
          static_cast<int64_t>(std::nearbyint((resized_height - spec.height) / 2.0));
      const auto crop_left =
          static_cast<int64_t>(std::nearbyint((resized_width - spec.width) / 2.0));
      PIER_ASSIGN_OR_RETURN(fitted, Fit(image, spec, resized_width, resized_height, crop_left,
                                        crop_top, spec.width, spec.height, buffers));
      geometry.scale_x = static_cast<double>(resized_width) / w;
      geometry.scale_y = static_cast<double>(resized_height) / h;
      geometry.offset_x = static_cast<double>(-crop_left);
      geometry.offset_y = static_cast<double>(-crop_top);
      break;
    }
    case ResizeMode::kLetterbox: {
      const double r =
          std::min(static_cast<double>(spec.height) / h, static_cast<double>(spec.width) / w);
      const int64_t scaled_width = std::clamp(
          static_cast<int64_t>(std::nearbyint(static_cast<double>(w) * r)), int64_t{1}, spec.width);
      const int64_t scaled_height =
          std::clamp(static_cast<int64_t>(std::nearbyint(static_cast<double>(h) * r)), int64_t{1},
                     spec.height);
      PIER_ASSIGN_OR_RETURN(fitted, Fit(image, spec, scaled_width, scaled_height, 0, 0,
                                        scaled_width, scaled_height, buffers));
      left = (spec.width - scaled_width) / 2;
      top = (spec.height - scaled_height) / 2;
      geometry.scale_x = static_cast<double>(scaled_width) / w;
      geometry.scale_y = static_cast<double>(scaled_height) / h;
      geometry.offset_x = static_cast<double>(left);
      geometry.offset_y = static_cast<double>(top);
      break;
    }
  }
  WriteTensor(fitted, left, top, spec, out);
  return geometry;
}

}  // namespace pier::tensor_models::image
