// Convex hull (Andrew's monotone chain), minimum-area rectangle (rotating calipers, then
// OpenCV's RotatedRect arithmetic), cv2.fillPoly's rows and Clipper's round offset
// (clipper.cpp: ClipperOffset::DoOffset, OffsetPoint, DoRound).
#include "pipelines/ocr/polygon.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace pier::pipelines::ocr {
namespace {

int64_t Cross(const IntPoint& o, const IntPoint& a, const IntPoint& b) {
  return (a.x - o.x) * (b.y - o.y) - (a.y - o.y) * (b.x - o.x);
}

// Clipper's Round: half away from zero.
int64_t ClipperRound(double v) {
  return v < 0 ? static_cast<int64_t>(v - 0.5) : static_cast<int64_t>(v + 0.5);
}

// get_mini_boxes: sorted by x (Python's stable sort), then the upper of each pair first.
std::array<Point, 4> MiniBoxOrder(std::array<Point, 4> p) {
  std::stable_sort(p.begin(), p.end(), [](const Point& a, const Point& b) { return a.x < b.x; });
  const bool left_first = p[1].y > p[0].y;
  const bool right_first = p[3].y > p[2].y;
  return {left_first ? p[0] : p[1], right_first ? p[2] : p[3], right_first ? p[3] : p[2],
          left_first ? p[1] : p[0]};
}

}  // namespace

std::vector<IntPoint> ConvexHull(std::vector<IntPoint> points) {
  std::sort(points.begin(), points.end(), [](const IntPoint& a, const IntPoint& b) {
    return a.x != b.x ? a.x < b.x : a.y < b.y;
  });
  points.erase(std::unique(points.begin(), points.end()), points.end());
  if (points.size() < 3) return points;
  std::vector<IntPoint> hull(2 * points.size());
  size_t k = 0;
  for (const IntPoint& p : points) {  // lower chain
    while (k >= 2 && Cross(hull[k - 2], hull[k - 1], p) <= 0) --k;
    hull[k++] = p;
  }
  const size_t lower = k + 1;
  for (size_t i = points.size() - 1; i-- > 0;) {  // upper chain
    while (k >= lower && Cross(hull[k - 2], hull[k - 1], points[i]) <= 0) --k;
    hull[k++] = points[i];
  }
  hull.resize(k - 1);  // the last point repeats the first
  return hull;
}

MiniBox MinAreaBox(std::vector<IntPoint> points) {
  const std::vector<IntPoint> hull = ConvexHull(std::move(points));
  MiniBox box;
  if (hull.size() < 3) {
    for (size_t i = 0; i < 4 && !hull.empty(); ++i) {
      const IntPoint& p = hull[std::min(i, hull.size() - 1)];
      box.corners[i] = {static_cast<float>(p.x), static_cast<float>(p.y)};
    }
    return box;
  }
  // Rotating calipers: the best rectangle has a side on a hull edge.
  double best_area = -1;
  double corner_x = 0, corner_y = 0, w_x = 0, w_y = 0, h_x = 0, h_y = 0;
  for (size_t i = 0; i < hull.size(); ++i) {
    const IntPoint& a = hull[i];
    const IntPoint& b = hull[(i + 1) % hull.size()];
    const double len = std::hypot(static_cast<double>(b.x - a.x), static_cast<double>(b.y - a.y));
    const double ux = static_cast<double>(b.x - a.x) / len;
    const double uy = static_cast<double>(b.y - a.y) / len;
    double u_min = 1e300, u_max = -1e300, v_min = 1e300, v_max = -1e300;
    for (const IntPoint& p : hull) {
      const double px = static_cast<double>(p.x), py = static_cast<double>(p.y);
      const double u = px * ux + py * uy;
      const double v = -px * uy + py * ux;
      u_min = std::min(u_min, u);
      u_max = std::max(u_max, u);
      v_min = std::min(v_min, v);
      v_max = std::max(v_max, v);
    }
    const double area = (u_max - u_min) * (v_max - v_min);
    if (best_area < 0 || area < best_area) {
      best_area = area;
      corner_x = ux * u_min - uy * v_min;
      corner_y = uy * u_min + ux * v_min;
      w_x = ux * (u_max - u_min);
      w_y = uy * (u_max - u_min);
      h_x = -uy * (v_max - v_min);
      h_y = ux * (v_max - v_min);
    }
  }
  // OpenCV's RotatedRect: float centre and size, angle in degrees, then boxPoints.
  const float cx = static_cast<float>(corner_x + (w_x + h_x) * 0.5);
  const float cy = static_cast<float>(corner_y + (w_y + h_y) * 0.5);
  const float width = static_cast<float>(std::sqrt(w_x * w_x + w_y * w_y));
  const float height = static_cast<float>(std::sqrt(h_x * h_x + h_y * h_y));
  const float angle = static_cast<float>(std::atan2(w_y, w_x) * 180.0 / std::numbers::pi);
  const double radians = static_cast<double>(angle) * std::numbers::pi / 180.0;
  const float bc = static_cast<float>(std::cos(radians)) * 0.5f;
  const float as = static_cast<float>(std::sin(radians)) * 0.5f;
  std::array<Point, 4> p;
  p[0] = {cx - as * height - bc * width, cy + bc * height - as * width};
  p[1] = {cx + as * height - bc * width, cy - bc * height - as * width};
  p[2] = {2 * cx - p[0].x, 2 * cy - p[0].y};
  p[3] = {2 * cx - p[1].x, 2 * cy - p[1].y};
  box.corners = MiniBoxOrder(p);
  box.short_side = std::min(width, height);
  return box;
}

void ForEachPolygonRow(std::span<const IntPoint> corners, int64_t width, int64_t height,
                       const std::function<void(int64_t, int64_t, int64_t)>& row) {
  if (corners.empty()) return;
  int64_t y_min = corners[0].y, y_max = corners[0].y;
  for (const IntPoint& p : corners) {
    y_min = std::min(y_min, p.y);
    y_max = std::max(y_max, p.y);
  }
  // Each row's leftmost and rightmost pixel of the edges' lines; a convex polygon fills between.
  const size_t rows = static_cast<size_t>(y_max - y_min + 1);
  std::vector<int64_t> left(rows, INT64_MAX), right(rows, INT64_MIN);
  auto mark = [&](int64_t x, int64_t y) {
    const size_t r = static_cast<size_t>(y - y_min);
    left[r] = std::min(left[r], x);
    right[r] = std::max(right[r], x);
  };
  for (size_t i = 0; i < corners.size(); ++i) {
    const IntPoint& a = corners[i];
    const IntPoint& b = corners[(i + 1) % corners.size()];
    const int64_t dx = b.x - a.x, dy = b.y - a.y;
    const int64_t steps = std::max(std::abs(dx), std::abs(dy));
    if (steps == 0) {
      mark(a.x, a.y);
      continue;
    }
    for (int64_t s = 0; s <= steps; ++s) {
      const double t = static_cast<double>(s) / static_cast<double>(steps);
      mark(static_cast<int64_t>(
               std::floor(static_cast<double>(a.x) + t * static_cast<double>(dx) + 0.5)),
           static_cast<int64_t>(
               std::floor(static_cast<double>(a.y) + t * static_cast<double>(dy) + 0.5)));
    }
  }
  for (size_t r = 0; r < rows; ++r) {
    const int64_t y = y_min + static_cast<int64_t>(r);
    if (y < 0 || y >= height) continue;
    const int64_t x0 = std::max<int64_t>(left[r], 0);
    const int64_t x1 = std::min<int64_t>(right[r] + 1, width);
    if (x0 < x1) row(y, x0, x1);
  }
}

std::vector<IntPoint> RoundOffset(std::span<const Point> polygon, double delta) {
  // AddPath: pyclipper truncates the float corners; repeated points go.
  std::vector<IntPoint> src;
  for (const Point& p : polygon) {
    const IntPoint q{static_cast<int64_t>(p.x), static_cast<int64_t>(p.y)};
    if (src.empty() || !(src.back() == q)) src.push_back(q);
  }
  while (src.size() > 1 && src.front() == src.back()) src.pop_back();
  if (src.size() < 3) return {};
  // FixOrientations: the outer polygon counter-clockwise (positive area), so normals point out.
  double area2 = 0;
  for (size_t i = 0; i < src.size(); ++i) {
    const IntPoint& a = src[i];
    const IntPoint& b = src[(i + 1) % src.size()];
    area2 += static_cast<double>(a.x) * static_cast<double>(b.y) -
             static_cast<double>(b.x) * static_cast<double>(a.y);
  }
  if (area2 < 0) std::reverse(src.begin(), src.end());

  const size_t n = src.size();
  std::vector<double> nx(n), ny(n);  // the unit normal of edge j -> j + 1
  for (size_t j = 0; j < n; ++j) {
    const IntPoint& a = src[j];
    const IntPoint& b = src[(j + 1) % n];
    const double dx = static_cast<double>(b.x - a.x), dy = static_cast<double>(b.y - a.y);
    const double f = 1.0 / std::sqrt(dx * dx + dy * dy);
    nx[j] = dy * f;
    ny[j] = -dx * f;
  }
  // DoOffset's arc step for the default arc tolerance (0.25, capped at a quarter of delta).
  const double tolerance = std::min(0.25, std::fabs(delta) * 0.25);
  double steps = std::numbers::pi / std::acos(1 - tolerance / std::fabs(delta));
  steps = std::min(steps, std::fabs(delta) * std::numbers::pi);
  const double step_sin = std::sin(2 * std::numbers::pi / steps) * (delta < 0 ? -1 : 1);
  const double step_cos = std::cos(2 * std::numbers::pi / steps);
  const double steps_per_rad = steps / (2 * std::numbers::pi);

  std::vector<IntPoint> out;
  auto push = [&](size_t j, double x, double y) {
    out.push_back({ClipperRound(static_cast<double>(src[j].x) + x * delta),
                   ClipperRound(static_cast<double>(src[j].y) + y * delta)});
  };
  for (size_t j = 0, k = n - 1; j < n; k = j, ++j) {  // OffsetPoint(j, k)
    double sin_a = nx[k] * ny[j] - nx[j] * ny[k];
    const double cos_a = nx[k] * nx[j] + ny[k] * ny[j];
    if (std::fabs(sin_a * delta) < 1.0) {
      if (cos_a > 0) {  // nearly straight on
        push(j, nx[k], ny[k]);
        continue;
      }
    } else {
      sin_a = std::clamp(sin_a, -1.0, 1.0);
    }
    if (sin_a * delta < 0) {  // a concave corner
      push(j, nx[k], ny[k]);
      out.push_back(src[j]);
      push(j, nx[j], ny[j]);
      continue;
    }
    // DoRound: arcs from edge k's normal towards edge j's.
    const double a = std::atan2(sin_a, cos_a);
    const int count = std::max(static_cast<int>(ClipperRound(steps_per_rad * std::fabs(a))), 1);
    double x = nx[k], y = ny[k];
    for (int i = 0; i < count; ++i) {
      push(j, x, y);
      const double x2 = x;
      x = x * step_cos - step_sin * y;
      y = x2 * step_sin + y * step_cos;
    }
    push(j, nx[j], ny[j]);
  }
  return out;
}

}  // namespace pier::pipelines::ocr
