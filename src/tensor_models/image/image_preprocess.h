// Image preprocessing: encoded JPEG or PNG bytes in, the tensor a vision model takes out
// (issue #45, "Images and labels"; pipelines' image processor reuses it). The steps, each
// exposed for tests and pipelines:
//
//   ProbeImage    the header only (format, dimensions, EXIF orientation): the caller refuses
//                 an image by its size (CheckImageLimits) before a byte is decoded, so a PNG
//                 bomb (a small file that claims 30,000 x 30,000 pixels) costs nothing;
//   DecodeImage   libjpeg-turbo or libpng into interleaved 8-bit RGB (grey and palette
//                 expanded, alpha dropped, 16-bit channels reduced to 8);
//   OrientImage   EXIF orientation (1..8) applied, as Pillow's ImageOps.exif_transpose;
//   ResizeImage   Pillow's resampling (Image.resize: separable convolution with the filter's
//                 support widened when reducing, 8-bit fixed point), so the pixels are those
//                 a model trained through torchvision's PIL transforms saw;
//   PreprocessImage  all of the above plus the geometry (stretch, resize-shorter-side and
//                 center crop as torchvision's Resize + CenterCrop, or letterbox as YOLO's)
//                 and the tensor: scale, mean/std, NCHW or NHWC, RGB or BGR, FP32/FP16/UINT8.
//
// Large buffers (decoded pixels, the resize's intermediate) come from the caller's
// BufferSource, so serving/ charges them to the model's governor owner; libjpeg's and libpng's
// own working memory is small (rows, tables) and capped (PNG chunks at 8 MiB), except a
// progressive JPEG's coefficients, which libjpeg holds itself for the whole image (2 bytes a
// sample: up to 6 bytes a pixel), capped at what the probed dimensions need.
//
// Pure functions over caller-owned buffers; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

#include "common/status.h"
#include "tensor/element_type.h"

namespace pier::tensor_models::image {

enum class ImageFormat : uint8_t { kJpeg, kPng };

struct ImageHeader {
  ImageFormat format = ImageFormat::kJpeg;
  int64_t width = 0;  // as stored, before orientation
  int64_t height = 0;
  int orientation = 1;  // EXIF 1..8 (1: as stored; absent or out of range reads as 1)
};

// Reads the format (by its magic bytes), the dimensions (JPEG's SOF, PNG's IHDR) and the EXIF
// orientation (JPEG's APP1 "Exif", PNG's eXIf chunk) without decoding pixels.
// INVALID_ARGUMENT: not a JPEG or PNG ("not a JPEG or PNG image (starts with ...)"), a header
// cut short, zero dimensions.
[[nodiscard]] Result<ImageHeader> ProbeImage(std::string_view encoded);

// The most one image may be. The defaults stated here are the documented ones (docs/api.md).
struct ImageLimits {
  uint64_t max_bytes = uint64_t{32} << 20;  // encoded
  int64_t max_width = 16384;
  int64_t max_height = 16384;
  int64_t max_pixels = 40'000'000;  // width x height (an 8K frame is 33 MP)

  bool operator==(const ImageLimits&) const = default;
};

// INVALID_ARGUMENT naming the limit and the image's figure ("image is 30000 x 30000 pixels;
// the limit is 16384 x 16384 and 40000000 pixels").
[[nodiscard]] Status CheckImageLimits(const ImageHeader& header, uint64_t encoded_bytes,
                                      const ImageLimits& limits);

// Interleaved 8-bit RGB, row-major, `pixels.size() == width * height * 3`.
struct RgbView {
  int64_t width = 0;
  int64_t height = 0;
  std::span<uint8_t> pixels;
};

// Decodes `encoded` (probed as `header`) into `out` (header.width x header.height, as stored).
// INVALID_ARGUMENT for a corrupt or truncated file (libjpeg's or libpng's own message; a
// truncated JPEG is an error, not grey rows), or one libjpeg cannot turn into RGB (CMYK),
// never a crash. 16-bit samples keep their high byte, as Pillow reads 16-bit RGB (Pillow
// clips 16-bit grey at 255 instead; that is not copied).
[[nodiscard]] Status DecodeImage(std::string_view encoded, const ImageHeader& header, RgbView out);

// The dimensions after EXIF orientation `orientation` (5..8 swap width and height).
void OrientedSize(int orientation, int64_t width, int64_t height, int64_t* out_width,
                  int64_t* out_height);

// Writes `in` turned by `orientation` into `out` (OrientedSize's dimensions).
void OrientImage(const RgbView& in, int orientation, RgbView out);

// Pillow's filters (Image.Resampling): nearest samples, the others convolve.
enum class Interpolation : uint8_t { kNearest, kBox, kBilinear, kHamming, kBicubic, kLanczos };

// Where the large temporary buffers come from: a span of `bytes` that stays valid until the
// call that asked returns; RESOURCE_EXHAUSTED (or any error) is passed on to the caller.
using BufferSource = std::function<Result<std::span<uint8_t>>(size_t bytes)>;

// Resizes `in` to `out`'s dimensions as Pillow's Image.resize(size, filter) does (no
// reducing_gap), bit for bit.
[[nodiscard]] Status ResizeImage(const RgbView& in, Interpolation interpolation,
                                 const BufferSource& buffers, RgbView out);

// How the image is fitted to the tensor's height x width.
enum class ResizeMode : uint8_t {
  kStretch,    // resized to exactly height x width (aspect ratio not kept)
  kCrop,       // shorter side to `shorter_side` (the other as int(s * long / short)), then the
               // center height x width (torchvision Resize(s) + CenterCrop((h, w)))
  kLetterbox,  // scaled by r = min(h / H, w / W) to round(W r) x round(H r), centered (offsets
               // floor((w - W') / 2), floor((h - H') / 2)) on `pad_value`
};

enum class TensorLayout : uint8_t { kNchw, kNhwc };
enum class ChannelOrder : uint8_t { kRgb, kBgr };

struct PreprocessSpec {
  int64_t height = 0;  // the tensor's
  int64_t width = 0;
  ResizeMode resize = ResizeMode::kStretch;
  int64_t shorter_side = 0;  // kCrop: at least max(height, width)
  Interpolation interpolation = Interpolation::kBilinear;
  uint8_t pad_value = 114;  // kLetterbox's border, every channel
  // Each channel (in RGB order) becomes (pixel * scale - mean[c]) / std[c]; UINT8 output takes
  // the pixels as they are.
  float scale = 1.0f / 255.0f;
  std::array<float, 3> mean = {0, 0, 0};
  std::array<float, 3> std = {1, 1, 1};
  TensorLayout layout = TensorLayout::kNchw;
  ChannelOrder channels = ChannelOrder::kRgb;
  ElementType type = ElementType::kFp32;  // kFp32, kFp16 or kUint8
  bool apply_exif = true;
  ImageLimits limits;
};

// Where the source image landed in the tensor, for mapping outputs (boxes) back: a tensor
// pixel (x, y) came from source pixel ((x - offset_x) / scale_x, (y - offset_y) / scale_y), the
// source being the image after EXIF orientation.
struct ImageGeometry {
  int64_t source_width = 0;
  int64_t source_height = 0;
  double scale_x = 1;
  double scale_y = 1;
  double offset_x = 0;
  double offset_y = 0;
};

// The bytes one image's tensor takes: 3 x height x width elements of `spec.type`.
uint64_t PreprocessedBytes(const PreprocessSpec& spec);

// Probe, check the limits, decode, orient, fit and write the tensor into `out`
// (PreprocessedBytes(spec) bytes). INVALID_ARGUMENT for a bad image (ProbeImage's,
// CheckImageLimits', DecodeImage's messages) or an impossible spec ("preprocess: ..."; a size
// that is not positive, a type other than FP32, FP16 or UINT8, kCrop's shorter_side below the
// crop), or BufferSource's error. Nothing is asked of `buffers` before the limits pass.
[[nodiscard]] Result<ImageGeometry> PreprocessImage(std::string_view encoded,
                                                    const PreprocessSpec& spec,
                                                    const BufferSource& buffers,
                                                    std::span<uint8_t> out);

}  // namespace pier::tensor_models::image
