// OrientedSize and OrientImage: EXIF orientation applied as Pillow's ImageOps.exif_transpose
// does (2 FLIP_LEFT_RIGHT, 3 ROTATE_180, 4 FLIP_TOP_BOTTOM, 5 TRANSPOSE, 6 ROTATE_270,
// 7 TRANSVERSE, 8 ROTATE_90; anything else leaves the image as stored).
#include <cstdint>
#include <cstring>

#include "common/check.h"
#include "tensor_models/image/image_preprocess.h"

namespace pier::tensor_models::image {

void OrientedSize(int orientation, int64_t width, int64_t height, int64_t* out_width,
                  int64_t* out_height) {
  const bool swap = orientation >= 5 && orientation <= 8;
  *out_width = swap ? height : width;
  *out_height = swap ? width : height;
}

void OrientImage(const RgbView& in, int orientation, RgbView out) {
  int64_t width = 0;
  int64_t height = 0;
  OrientedSize(orientation, in.width, in.height, &width, &height);
  PIER_CHECK(out.width == width && out.height == height,
             "OrientImage: the output's dimensions are not OrientedSize's");
  PIER_CHECK(in.pixels.size() == static_cast<uint64_t>(in.width) * in.height * 3 &&
                 out.pixels.size() == in.pixels.size(),
             "OrientImage: a buffer is not width x height x 3 bytes");
  const int64_t w = in.width;  // the stored image's
  const int64_t h = in.height;
  // Output pixel (x, y) comes from stored pixel (sx, sy).
  for (int64_t y = 0; y < out.height; ++y) {
    uint8_t* row = out.pixels.data() + y * out.width * 3;
    if (orientation < 2 || orientation > 8) {
      std::memcpy(row, in.pixels.data() + y * w * 3, w * 3);
      continue;
    }
    for (int64_t x = 0; x < out.width; ++x) {
      int64_t sx = x;
      int64_t sy = y;
      switch (orientation) {
        case 2:
          sx = w - 1 - x;
          break;  // mirror left-right
        case 3:
          sx = w - 1 - x;
          sy = h - 1 - y;
          break;  // 180 degrees
        case 4:
          sy = h - 1 - y;
          break;  // mirror top-bottom
        case 5:
          sx = y;
          sy = x;
          break;  // transpose
        case 6:
          sx = y;
          sy = h - 1 - x;
          break;  // 90 degrees clockwise
        case 7:
          sx = w - 1 - y;
          sy = h - 1 - x;
          break;  // transverse
        case 8:
          sx = w - 1 - y;
          sy = x;
          break;  // 90 degrees counter-clockwise
        default:
          break;
      }
      std::memcpy(row + x * 3, in.pixels.data() + (sy * w + sx) * 3, 3);
    }
  }
}

}  // namespace pier::tensor_models::image
