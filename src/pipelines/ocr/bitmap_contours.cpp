// ContourPointSets: two flood fills over one label map (components 8-connected, then
// background 4-connected for holes), each region's row extremes kept.
#include "pipelines/ocr/bitmap_contours.h"

#include <algorithm>
#include <limits>

#include "common/check.h"

namespace pier::pipelines::ocr {
namespace {

// Accumulates each row's leftmost and rightmost point of one region.
class RowExtremes {
 public:
  void Add(int64_t x, int64_t y) {
    if (rows_.empty()) {
      y0_ = y;
    }
    if (y < y0_) {
      rows_.insert(rows_.begin(), static_cast<size_t>(y0_ - y), Empty());
      y0_ = y;
    }
    const size_t r = static_cast<size_t>(y - y0_);
    if (r >= rows_.size()) rows_.resize(r + 1, Empty());
    rows_[r].first = std::min(rows_[r].first, x);
    rows_[r].second = std::max(rows_[r].second, x);
  }
  std::vector<IntPoint> Points() const {
    std::vector<IntPoint> points;
    for (size_t r = 0; r < rows_.size(); ++r) {
      if (rows_[r].first > rows_[r].second) continue;
      const int64_t y = y0_ + static_cast<int64_t>(r);
      points.push_back({rows_[r].first, y});
      if (rows_[r].second != rows_[r].first) points.push_back({rows_[r].second, y});
    }
    return points;
  }

 private:
  static std::pair<int64_t, int64_t> Empty() {
    return {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};
  }
  int64_t y0_ = 0;
  std::vector<std::pair<int64_t, int64_t>> rows_;  // [rows]: (min x, max x)
};

struct Candidate {
  int64_t found_at = 0;  // raster index where OpenCV's scan meets the border
  std::vector<IntPoint> points;
};

}  // namespace

std::vector<std::vector<IntPoint>> ContourPointSets(std::span<const uint8_t> bitmap, int64_t width,
                                                    int64_t height, size_t max_count) {
  PIER_CHECK(width > 0 && height > 0 && bitmap.size() == static_cast<size_t>(width * height));
  PIER_CHECK(width * height < (int64_t{1} << 32));
  // 0: not visited; 1: a component pixel already flooded; 2: background already flooded.
  std::vector<uint8_t> seen(bitmap.size(), 0);
  std::vector<uint32_t> queue;  // one region's pixels, in flood order
  std::vector<Candidate> candidates;

  auto flood = [&](size_t start, bool text, bool eight) {
    queue.clear();
    queue.push_back(static_cast<uint32_t>(start));
    seen[start] = text ? 1 : 2;
    for (size_t head = 0; head < queue.size(); ++head) {
      const int64_t x = queue[head] % width, y = queue[head] / width;
      for (int64_t dy = -1; dy <= 1; ++dy) {
        for (int64_t dx = -1; dx <= 1; ++dx) {
          if ((dx == 0 && dy == 0) || (!eight && dx != 0 && dy != 0)) continue;
          const int64_t nx = x + dx, ny = y + dy;
          if (nx < 0 || ny < 0 || nx >= width || ny >= height) continue;
          const size_t n = static_cast<size_t>(ny * width + nx);
          if (seen[n] != 0 || (bitmap[n] != 0) != text) continue;
          seen[n] = text ? 1 : 2;
          queue.push_back(static_cast<uint32_t>(n));
        }
      }
    }
  };

  for (size_t i = 0; i < bitmap.size(); ++i) {  // outer borders: 8-connected components
    if (bitmap[i] == 0 || seen[i] != 0) continue;
    flood(i, /*text=*/true, /*eight=*/true);
    RowExtremes rows;
    for (uint32_t p : queue) rows.Add(p % width, p / width);
    candidates.push_back({static_cast<int64_t>(i), rows.Points()});
  }
  for (size_t i = 0; i < bitmap.size(); ++i) {  // hole borders: enclosed 4-connected background
    if (bitmap[i] != 0 || seen[i] != 0) continue;
    flood(i, /*text=*/false, /*eight=*/false);
    RowExtremes rows;
    bool enclosed = true;
    for (uint32_t p : queue) {
      const int64_t x = p % width, y = p / width;
      if (x == 0 || y == 0 || x == width - 1 || y == height - 1) {
        enclosed = false;
        break;
      }
      const int64_t around[4][2] = {{x - 1, y}, {x + 1, y}, {x, y - 1}, {x, y + 1}};
      for (const auto& n : around) {
        if (bitmap[static_cast<size_t>(n[1] * width + n[0])] != 0) rows.Add(n[0], n[1]);
      }
    }
    if (enclosed) candidates.push_back({static_cast<int64_t>(i) - 1, rows.Points()});
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return a.found_at > b.found_at; });
  std::vector<std::vector<IntPoint>> sets;
  for (size_t i = 0; i < candidates.size() && i < max_count; ++i) {
    sets.push_back(std::move(candidates[i].points));
  }
  return sets;
}

}  // namespace pier::pipelines::ocr
