// ResizeImage: Pillow's Image.resize, bit for bit (Pillow's src/libImaging/Resample.c for the
// convolving filters, Geometry.c's affine scaling for nearest; read to match its arithmetic,
// not copied).
//
// Convolution: for each output pixel, the filter's weights over the input pixels within its
// support (widened by the scale when reducing, so every input pixel counts), computed in
// double, normalised to sum 1, then rounded to 22-bit fixed point (32 - 8 - 2: 8 bits of
// pixel and 2 of headroom for the negative lobes). Horizontal pass first, into an
// intermediate of only the rows the vertical pass reads, each pass rounded and clipped to 8
// bits; but vertical first (into the columns the horizontal pass reads) when the height loses
// more than twice the pixels the width loses, as Pillow 13 does. A dimension that does not change
// is not convolved (Pillow skips that pass). Nearest: the source of output x is floor(x0 + (x +
// 0.5) * scale) with the position accumulated step by step in double, as Pillow's
// ImagingScaleAffine does.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <vector>

#include "common/check.h"
#include "tensor_models/image/image_preprocess.h"
#include "tensor_models/image/image_resize_window.h"

namespace pier::tensor_models::image {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

double BoxFilter(double x) { return x > -0.5 && x <= 0.5 ? 1.0 : 0.0; }

double BilinearFilter(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

double HammingFilter(double x) {
  x = std::fabs(x);
  if (x == 0.0) return 1.0;
  if (x >= 1.0) return 0.0;
  x = x * std::numbers::pi;
  // Pillow's constants are floats (0.54f, 0.46f); the bits follow them.
  return std::sin(x) / x * (0.54f + 0.46f * std::cos(x));
}

double BicubicFilter(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

double Sinc(double x) {
  if (x == 0.0) return 1.0;
  x = x * std::numbers::pi;
  return std::sin(x) / x;
}

double LanczosFilter(double x) {
  if (-3.0 <= x && x < 3.0) return Sinc(x) * Sinc(x / 3);
  return 0.0;
}

struct Filter {
  double (*weight)(double);
  double support;
};

Filter FilterOf(Interpolation interpolation) {
  switch (interpolation) {
    case Interpolation::kBox:
      return {BoxFilter, 0.5};
    case Interpolation::kBilinear:
      return {BilinearFilter, 1.0};
    case Interpolation::kHamming:
      return {HammingFilter, 1.0};
    case Interpolation::kBicubic:
      return {BicubicFilter, 2.0};
    case Interpolation::kLanczos:
      return {LanczosFilter, 3.0};
    case Interpolation::kNearest:
      break;
  }
  PIER_CHECK(false, "nearest does not convolve");
  return {BilinearFilter, 1.0};
}

// One dimension's fixed-point weights for outputs [first, first + count) of out_size.
struct Coefficients {
  int64_t ksize = 0;
  std::vector<int32_t> start;   // [count] first input index
  std::vector<int32_t> length;  // [count] inputs weighed
  std::vector<int32_t> weight;  // [count, ksize] 22-bit fixed point
};

Coefficients Precompute(int64_t in_size, int64_t out_size, int64_t first, int64_t count,
                        const Filter& filter) {
  // Pillow takes the box as floats: (float)in_size - 0 is exact below 2^24 pixels.
  const double scale = static_cast<double>(static_cast<float>(in_size)) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = filter.support * filterscale;
  Coefficients c;
  c.ksize = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  c.start.resize(count);
  c.length.resize(count);
  c.weight.assign(count * c.ksize, 0);
  std::vector<double> k(c.ksize);
  const double ss = 1.0 / filterscale;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t xx = first + i;
    const double center = (xx + 0.5) * scale;
    // Truncation toward zero, as Pillow's (int) casts.
    int64_t xmin = static_cast<int64_t>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int64_t xmax = static_cast<int64_t>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int64_t x = 0; x < xmax; ++x) {
      const double w = filter.weight((x + xmin - center + 0.5) * ss);
      k[x] = w;
      ww += w;
    }
    for (int64_t x = 0; x < xmax; ++x) {
      if (ww != 0.0) k[x] /= ww;
      const double fixed = k[x] * (1 << kPrecisionBits);
      c.weight[i * c.ksize + x] = static_cast<int32_t>(k[x] < 0 ? -0.5 + fixed : 0.5 + fixed);
    }
    c.start[i] = static_cast<int32_t>(xmin);
    c.length[i] = static_cast<int32_t>(xmax);
  }
  return c;
}

uint8_t Clip8(int32_t sum) {
  const int32_t value = sum >> kPrecisionBits;  // arithmetic shift: floor, as Pillow
  return static_cast<uint8_t>(value < 0 ? 0 : (value > 255 ? 255 : value));
}

// Rows [0, rows) of `out` (width out_width) from input rows [row0, row0 + rows), horizontally.
void Horizontal(const RgbView& in, int64_t row0, int64_t rows, const Coefficients& c, uint8_t* out,
                int64_t out_width) {
  for (int64_t y = 0; y < rows; ++y) {
    const uint8_t* src = in.pixels.data() + (row0 + y) * in.width * 3;
    uint8_t* dst = out + y * out_width * 3;
    for (int64_t x = 0; x < out_width; ++x) {
      const int32_t* k = &c.weight[x * c.ksize];
      const uint8_t* p = src + static_cast<int64_t>(c.start[x]) * 3;
      int32_t s0 = 1 << (kPrecisionBits - 1);
      int32_t s1 = s0;
      int32_t s2 = s0;
      for (int32_t i = 0; i < c.length[x]; ++i) {
        s0 += p[i * 3 + 0] * k[i];
        s1 += p[i * 3 + 1] * k[i];
        s2 += p[i * 3 + 2] * k[i];
      }
      dst[x * 3 + 0] = Clip8(s0);
      dst[x * 3 + 1] = Clip8(s1);
      dst[x * 3 + 2] = Clip8(s2);
    }
  }
}

// `out` from `src` (width src_width, its row 0 being input row src_row0), vertically; each
// output row's weights start at an input row, and `src` covers them.
void Vertical(const uint8_t* src, int64_t src_width, int64_t src_row0, int64_t col0,
              const Coefficients& c, RgbView out) {
  for (int64_t y = 0; y < out.height; ++y) {
    const int32_t* k = &c.weight[y * c.ksize];
    const uint8_t* base = src + ((c.start[y] - src_row0) * src_width + col0) * 3;
    uint8_t* dst = out.pixels.data() + y * out.width * 3;
    for (int64_t x = 0; x < out.width * 3; ++x) {
      int32_t s = 1 << (kPrecisionBits - 1);
      for (int32_t i = 0; i < c.length[y]; ++i) s += base[i * src_width * 3 + x] * k[i];
      dst[x] = Clip8(s);
    }
  }
}

// Nearest: Pillow's positions, accumulated from the first output in double; -1 where the
// position falls outside the input (Pillow leaves such pixels black).
std::vector<int64_t> NearestSources(int64_t in_size, int64_t out_size, int64_t first,
                                    int64_t count) {
  const double step = static_cast<double>(static_cast<float>(in_size)) / out_size;
  double position = step * 0.5;
  std::vector<int64_t> sources(count);
  for (int64_t i = 0; i < first + count; ++i) {
    if (i >= first) {
      const int64_t source = position < 0.0 ? -1 : static_cast<int64_t>(position);
      sources[i - first] = source < in_size ? source : -1;
    }
    position += step;
  }
  return sources;
}

void ResizeNearest(const RgbView& in, int64_t full_width, int64_t full_height, int64_t x0,
                   int64_t y0, RgbView out) {
  const std::vector<int64_t> xs = NearestSources(in.width, full_width, x0, out.width);
  const std::vector<int64_t> ys = NearestSources(in.height, full_height, y0, out.height);
  for (int64_t y = 0; y < out.height; ++y) {
    uint8_t* dst = out.pixels.data() + y * out.width * 3;
    for (int64_t x = 0; x < out.width; ++x) {
      if (ys[y] < 0 || xs[x] < 0) {
        std::memset(dst + x * 3, 0, 3);
      } else {
        std::memcpy(dst + x * 3, in.pixels.data() + (ys[y] * in.width + xs[x]) * 3, 3);
      }
    }
  }
}

}  // namespace

Status ResizeWindow(const RgbView& in, Interpolation interpolation, int64_t full_width,
                    int64_t full_height, int64_t x0, int64_t y0, const BufferSource& buffers,
                    RgbView out) {
  PIER_CHECK(in.width > 0 && in.height > 0 && out.width > 0 && out.height > 0,
             "ResizeImage: an empty image");
  PIER_CHECK(x0 >= 0 && y0 >= 0 && x0 + out.width <= full_width && y0 + out.height <= full_height,
             "ResizeWindow: the window is outside the resized image");
  PIER_CHECK(in.pixels.size() == static_cast<uint64_t>(in.width) * in.height * 3 &&
                 out.pixels.size() == static_cast<uint64_t>(out.width) * out.height * 3,
             "ResizeImage: a buffer is not width x height x 3 bytes");
  const bool need_horizontal = full_width != in.width;
  const bool need_vertical = full_height != in.height;
  if (!need_horizontal && !need_vertical) {  // Pillow copies
    for (int64_t y = 0; y < out.height; ++y) {
      std::memcpy(out.pixels.data() + y * out.width * 3,
                  in.pixels.data() + ((y0 + y) * in.width + x0) * 3, out.width * 3);
    }
    return Status::Ok();
  }
  if (interpolation == Interpolation::kNearest) {
    ResizeNearest(in, full_width, full_height, x0, y0, out);
    return Status::Ok();
  }
  const Filter filter = FilterOf(interpolation);
  if (!need_vertical) {
    const Coefficients horizontal = Precompute(in.width, full_width, x0, out.width, filter);
    Horizontal(in, y0, out.height, horizontal, out.pixels.data(), out.width);
    return Status::Ok();
  }
  const Coefficients vertical = Precompute(in.height, full_height, y0, out.height, filter);
  if (!need_horizontal) {
    Vertical(in.pixels.data(), in.width, 0, x0, vertical, out);
    return Status::Ok();
  }
  const Coefficients horizontal_full = Precompute(in.width, full_width, x0, out.width, filter);
  // Pillow 13 (python-pillow#9549) resizes vertically first when the height loses more than
  // twice the pixels the width loses; the order changes the bits (each pass rounds to 8 bits).
  const bool vertical_first =
      full_height < in.height && in.height - full_height > 2 * (in.width - full_width);
  if (vertical_first) {
    // The input columns the window's output columns weigh, resized vertically first.
    const int64_t col_first = horizontal_full.start.front();
    const int64_t col_last = horizontal_full.start.back() + horizontal_full.length.back();
    const auto bytes = static_cast<size_t>((col_last - col_first) * out.height * 3);
    PIER_ASSIGN_OR_RETURN(std::span<uint8_t> temp, buffers(bytes));  // [out.height, cols, 3]
    PIER_CHECK(temp.size() >= bytes, "BufferSource gave fewer bytes than asked");
    RgbView columns{col_last - col_first, out.height, temp.first(bytes)};
    Vertical(in.pixels.data(), in.width, 0, col_first, vertical, columns);
    Coefficients shifted = horizontal_full;
    for (int32_t& start : shifted.start) start -= static_cast<int32_t>(col_first);
    Horizontal(columns, 0, out.height, shifted, out.pixels.data(), out.width);
    return Status::Ok();
  }
  // The input rows the window's output rows weigh (starts grow with the row).
  const int64_t row_first = vertical.start.front();
  const int64_t row_last = vertical.start.back() + vertical.length.back();
  const Coefficients& horizontal = horizontal_full;
  const auto bytes = static_cast<size_t>(out.width * (row_last - row_first) * 3);
  PIER_ASSIGN_OR_RETURN(std::span<uint8_t> temp, buffers(bytes));  // [rows, out.width, 3]
  PIER_CHECK(temp.size() >= bytes, "BufferSource gave fewer bytes than asked");
  Horizontal(in, row_first, row_last - row_first, horizontal, temp.data(), out.width);
  Vertical(temp.data(), out.width, row_first, 0, vertical, out);
  return Status::Ok();
}

Status ResizeImage(const RgbView& in, Interpolation interpolation, const BufferSource& buffers,
                   RgbView out) {
  return ResizeWindow(in, interpolation, out.width, out.height, 0, 0, buffers, out);
}

}  // namespace pier::tensor_models::image
