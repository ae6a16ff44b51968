// FindTextBoxes: rapidocr's DBPostProcess (boxes_from_bitmap, get_mini_boxes, box_score_fast,
// unclip), TextDetector.filter_tag_det_res and RapidOCR.sorted_boxes.
#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "pipelines/ocr/bitmap_contours.h"
#include "pipelines/ocr/ocr.h"
#include "pipelines/ocr/polygon.h"

namespace pier::pipelines::ocr {
namespace {

// box_score_fast: the mean probability over cv2.fillPoly's pixels of the box, its corners
// truncated after moving them to the box's clipped bounding rectangle.
double BoxScore(std::span<const float> probability, int64_t width, int64_t height,
                const std::array<Point, 4>& box) {
  float lo_x = box[0].x, hi_x = box[0].x, lo_y = box[0].y, hi_y = box[0].y;
  for (const Point& p : box) {
    lo_x = std::min(lo_x, p.x);
    hi_x = std::max(hi_x, p.x);
    lo_y = std::min(lo_y, p.y);
    hi_y = std::max(hi_y, p.y);
  }
  auto clip = [](float v, int64_t limit) {
    return std::clamp<int64_t>(static_cast<int64_t>(v), 0, limit - 1);
  };
  const int64_t x_min = clip(std::floor(lo_x), width), x_max = clip(std::ceil(hi_x), width);
  const int64_t y_min = clip(std::floor(lo_y), height), y_max = clip(std::ceil(hi_y), height);
  std::array<IntPoint, 4> corners;
  for (size_t i = 0; i < 4; ++i) {
    corners[i] = {static_cast<int64_t>(box[i].x - static_cast<float>(x_min)),
                  static_cast<int64_t>(box[i].y - static_cast<float>(y_min))};
  }
  double sum = 0;
  int64_t count = 0;
  ForEachPolygonRow(corners, x_max - x_min + 1, y_max - y_min + 1,
                    [&](int64_t y, int64_t x0, int64_t x1) {
                      const float* row = probability.data() + (y + y_min) * width + x_min;
                      for (int64_t x = x0; x < x1; ++x) sum += row[x];
                      count += x1 - x0;
                    });
  return count == 0 ? 0.0 : sum / static_cast<double>(count);
}

// unclip's distance: shapely's area * ratio / length of the box.
double UnclipDistance(const std::array<Point, 4>& box, float ratio) {
  double area2 = 0, length = 0;
  for (size_t i = 0; i < 4; ++i) {
    const Point& a = box[i];
    const Point& b = box[(i + 1) % 4];
    area2 += static_cast<double>(a.x) * b.y - static_cast<double>(b.x) * a.y;
    length += std::hypot(static_cast<double>(b.x) - a.x, static_cast<double>(b.y) - a.y);
  }
  return std::fabs(area2) * 0.5 * static_cast<double>(ratio) / length;
}

// order_points_clockwise: the two leftmost (stable by x) are top-left and bottom-left by y, the
// others top-right and bottom-right; then clip_det_res.
std::array<Point, 4> ClockwiseClipped(std::array<Point, 4> p, int64_t width, int64_t height) {
  std::stable_sort(p.begin(), p.end(), [](const Point& a, const Point& b) { return a.x < b.x; });
  auto by_y = [](const Point& a, const Point& b) { return a.y < b.y; };
  std::stable_sort(p.begin(), p.begin() + 2, by_y);
  std::stable_sort(p.begin() + 2, p.end(), by_y);
  std::array<Point, 4> box = {p[0], p[2], p[3], p[1]};
  for (Point& c : box) {
    c.x = std::trunc(std::min(std::max(c.x, 0.0f), static_cast<float>(width - 1)));
    c.y = std::trunc(std::min(std::max(c.y, 0.0f), static_cast<float>(height - 1)));
  }
  return box;
}

double Distance(const Point& a, const Point& b) {
  return std::hypot(static_cast<double>(a.x) - b.x, static_cast<double>(a.y) - b.y);
}

// sorted_boxes: by the top-left corner (y, x), then a box moves before its predecessor while
// their tops are within 10 px and it starts further left.
void SortReadingOrder(std::vector<TextBox>& boxes) {
  std::stable_sort(boxes.begin(), boxes.end(), [](const TextBox& a, const TextBox& b) {
    const Point& p = a.corners[0];
    const Point& q = b.corners[0];
    return p.y != q.y ? p.y < q.y : p.x < q.x;
  });
  for (size_t i = 0; i + 1 < boxes.size(); ++i) {
    for (size_t j = i + 1; j-- > 0;) {
      const Point& next = boxes[j + 1].corners[0];
      const Point& here = boxes[j].corners[0];
      if (std::fabs(next.y - here.y) < 10 && next.x < here.x) {
        std::swap(boxes[j], boxes[j + 1]);
      } else {
        break;
      }
    }
  }
}

}  // namespace

std::vector<TextBox> FindTextBoxes(std::span<const float> probability, int64_t map_width,
                                   int64_t map_height, int64_t original_width,
                                   int64_t original_height, const TextBoxOptions& options) {
  PIER_CHECK(map_width > 0 && map_height > 0 && original_width > 0 && original_height > 0);
  PIER_CHECK(probability.size() == static_cast<size_t>(map_width * map_height));
  // [map_height, map_width]: text pixels, then cv2.dilate with a 2x2 square (anchor at its
  // lower right: each pixel takes its left, upper and upper-left neighbours).
  std::vector<uint8_t> bitmap(probability.size());
  for (size_t i = 0; i < bitmap.size(); ++i) bitmap[i] = probability[i] > options.threshold;
  if (options.dilate) {
    for (int64_t y = map_height - 1; y >= 0; --y) {
      for (int64_t x = map_width - 1; x >= 0; --x) {
        uint8_t* p = &bitmap[static_cast<size_t>(y * map_width + x)];
        if (x > 0) *p |= p[-1];
        if (y > 0) *p |= p[-map_width];
        if (x > 0 && y > 0) *p |= p[-map_width - 1];
      }
    }
  }
  const std::vector<std::vector<IntPoint>> contours = ContourPointSets(
      bitmap, map_width, map_height, static_cast<size_t>(std::max(options.max_candidates, 0)));

  std::vector<TextBox> boxes;
  for (const std::vector<IntPoint>& contour : contours) {
    const MiniBox box = MinAreaBox(contour);
    if (box.short_side < static_cast<float>(options.min_size)) continue;
    const double score = BoxScore(probability, map_width, map_height, box.corners);
    if (static_cast<double>(options.box_threshold) > score) continue;
    const std::vector<IntPoint> grown =
        RoundOffset(box.corners, UnclipDistance(box.corners, options.unclip_ratio));
    if (grown.empty()) continue;
    const MiniBox unclipped = MinAreaBox(grown);
    if (unclipped.short_side < static_cast<float>(options.min_size + 2)) continue;
    // To the original image: round (half to even) in float32, clipped to [0, size].
    std::array<Point, 4> scaled;
    for (size_t i = 0; i < 4; ++i) {
      const float x = std::nearbyint(unclipped.corners[i].x / static_cast<float>(map_width) *
                                     static_cast<float>(original_width));
      const float y = std::nearbyint(unclipped.corners[i].y / static_cast<float>(map_height) *
                                     static_cast<float>(original_height));
      scaled[i] = {std::clamp(x, 0.0f, static_cast<float>(original_width)),
                   std::clamp(y, 0.0f, static_cast<float>(original_height))};
    }
    // filter_tag_det_res: clockwise, inside the image, more than 3 px each way.
    TextBox text{ClockwiseClipped(scaled, original_width, original_height),
                 static_cast<float>(score)};
    if (static_cast<int64_t>(Distance(text.corners[0], text.corners[1])) <= 3 ||
        static_cast<int64_t>(Distance(text.corners[0], text.corners[3])) <= 3) {
      continue;
    }
    boxes.push_back(text);
  }
  SortReadingOrder(boxes);
  return boxes;
}

}  // namespace pier::pipelines::ocr
