// CropSize, CropTextLine: RapidOCR.get_crop_img_list's get_rotate_crop_image
// (cv2.getPerspectiveTransform + cv2.warpPerspective with INTER_CUBIC and BORDER_REPLICATE, then
// np.rot90 for tall crops); IsUpsideDown and Rotate180: TextClassifier's turn.
#include <algorithm>
#include <cmath>
#include <utility>

#include "common/check.h"
#include "pipelines/ocr/ocr.h"

namespace pier::pipelines::ocr {
namespace {

// The crop before turning: int(max(...)) of the float32 edge lengths.
std::pair<int64_t, int64_t> UnturnedSize(const TextBox& box) {
  auto length = [&](int a, int b) {
    const float dx = box.corners[static_cast<size_t>(a)].x - box.corners[static_cast<size_t>(b)].x;
    const float dy = box.corners[static_cast<size_t>(a)].y - box.corners[static_cast<size_t>(b)].y;
    return std::sqrt(dx * dx + dy * dy);
  };
  return {static_cast<int64_t>(std::max(length(0, 1), length(2, 3))),
          static_cast<int64_t>(std::max(length(0, 3), length(1, 2)))};
}

// OpenCV's bicubic weights (interpolateCubic, A = -0.75) at offset `x` in [0, 1): taps at
// -1, 0, 1, 2.
std::array<float, 4> CubicWeights(float x) {
  const float a = -0.75f;
  std::array<float, 4> c;
  c[0] = ((a * (x + 1) - 5 * a) * (x + 1) + 8 * a) * (x + 1) - 4 * a;
  c[1] = ((a + 2) * x - (a + 3)) * x * x + 1;
  c[2] = ((a + 2) * (1 - x) - (a + 3)) * (1 - x) * (1 - x) + 1;
  c[3] = 1.f - c[0] - c[1] - c[2];
  return c;
}

// The homography taking the crop's (0,0), (w,0), (w,h), (0,h) to the box's corners: [3][3] with
// h[2][2] = 1, by Gaussian elimination of the 8 x 8 system.
std::array<double, 9> CropToImage(const TextBox& box, double w, double h) {
  const double dst[4][2] = {{0, 0}, {w, 0}, {w, h}, {0, h}};
  double a[8][9] = {};
  for (int i = 0; i < 4; ++i) {
    const double x = dst[i][0], y = dst[i][1];
    const double u = box.corners[static_cast<size_t>(i)].x;
    const double v = box.corners[static_cast<size_t>(i)].y;
    double* r = a[2 * i];
    r[0] = x, r[1] = y, r[2] = 1, r[6] = -x * u, r[7] = -y * u, r[8] = u;
    r = a[2 * i + 1];
    r[3] = x, r[4] = y, r[5] = 1, r[6] = -x * v, r[7] = -y * v, r[8] = v;
  }
  for (int c = 0; c < 8; ++c) {
    int pivot = c;
    for (int r = c + 1; r < 8; ++r) {
      if (std::fabs(a[r][c]) > std::fabs(a[pivot][c])) pivot = r;
    }
    std::swap(a[c], a[pivot]);
    if (a[c][c] == 0) return {1, 0, 0, 0, 1, 0, 0, 0, 1};  // a degenerate box
    for (int r = 0; r < 8; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (int k = c; k < 9; ++k) a[r][k] -= f * a[c][k];
    }
  }
  std::array<double, 9> m{};
  for (int i = 0; i < 8; ++i) m[static_cast<size_t>(i)] = a[i][8] / a[i][i];
  m[8] = 1;
  return m;
}

}  // namespace

void CropSize(const TextBox& box, int64_t* width, int64_t* height) {
  auto [w, h] = UnturnedSize(box);
  if (w <= 0 || h <= 0) {
    *width = *height = 0;
    return;
  }
  const bool turn = static_cast<double>(h) / static_cast<double>(w) >= 1.5;
  *width = turn ? h : w;
  *height = turn ? w : h;
}

void CropTextLine(const RgbView& image, const TextBox& box, RgbView out) {
  const auto [w, h] = UnturnedSize(box);
  int64_t out_width = 0, out_height = 0;
  CropSize(box, &out_width, &out_height);
  PIER_CHECK(out.width == out_width && out.height == out_height);
  PIER_CHECK(out.pixels.size() == static_cast<size_t>(out_width * out_height * 3));
  PIER_CHECK(image.width > 0 && image.height > 0);
  if (out_width == 0) return;
  const bool turned = out_width != w;
  const std::array<double, 9> m = CropToImage(box, static_cast<double>(w), static_cast<double>(h));
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      const double dx = static_cast<double>(x), dy = static_cast<double>(y);
      // The source position, unquantised: the pinned opencv-python (5.1) warpPerspective samples at
      // the exact position (quantising to OpenCV's older 1/32-pixel grid moves pixels by up to 5
      // levels at glyph edges against it).
      const double wz = m[6] * dx + m[7] * dy + m[8];
      const double fx = wz != 0 ? (m[0] * dx + m[1] * dy + m[2]) / wz : 0;
      const double fy = wz != 0 ? (m[3] * dx + m[4] * dy + m[5]) / wz : 0;
      const double floor_x = std::floor(fx), floor_y = std::floor(fy);
      const std::array<float, 4> wx = CubicWeights(static_cast<float>(fx - floor_x));
      const std::array<float, 4> wy = CubicWeights(static_cast<float>(fy - floor_y));
      const auto sx = static_cast<int64_t>(floor_x) - 1, sy = static_cast<int64_t>(floor_y) - 1;
      float sum[3] = {0, 0, 0};
      for (int i = 0; i < 4; ++i) {
        const int64_t iy = std::clamp<int64_t>(sy + i, 0, image.height - 1);
        for (int j = 0; j < 4; ++j) {
          const int64_t ix = std::clamp<int64_t>(sx + j, 0, image.width - 1);
          const uint8_t* p = image.pixels.data() + (iy * image.width + ix) * 3;
          const float wt = wy[static_cast<size_t>(i)] * wx[static_cast<size_t>(j)];
          for (int c = 0; c < 3; ++c) sum[c] += static_cast<float>(p[c]) * wt;
        }
      }
      // np.rot90 (counter-clockwise): crop (x, y) lands at column y, row w - 1 - x.
      const int64_t ox = turned ? y : x, oy = turned ? w - 1 - x : y;
      uint8_t* o = out.pixels.data() + (oy * out_width + ox) * 3;
      for (int c = 0; c < 3; ++c) {
        o[c] = static_cast<uint8_t>(std::clamp(std::nearbyint(sum[c]), 0.0f, 255.0f));
      }
    }
  }
}

bool IsUpsideDown(std::span<const float> scores, float threshold) {
  PIER_CHECK(scores.size() >= 2);
  return scores[1] > scores[0] && scores[1] > threshold;  // argmax keeps the first on a tie
}

void Rotate180(RgbView line) {
  const size_t n = static_cast<size_t>(line.width * line.height);
  PIER_CHECK(line.pixels.size() == n * 3);
  uint8_t* p = line.pixels.data();
  for (size_t i = 0, j = n; i + 1 < j; ++i, --j) {
    std::swap_ranges(p + i * 3, p + i * 3 + 3, p + (j - 1) * 3);
  }
}

}  // namespace pier::pipelines::ocr
