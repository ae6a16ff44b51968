// The plane geometry of DB post-processing (internal to pipelines/ocr), in place of the OpenCV
// and Clipper calls rapidocr makes: the convex hull and minimum-area rectangle of a point set
// (cv2.minAreaRect + cv2.boxPoints + DBPostProcess.get_mini_boxes), the pixels cv2.fillPoly
// covers, and pyclipper's round-join offset of a polygon (the unclip).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "pipelines/ocr/ocr.h"

namespace pier::pipelines::ocr {

struct IntPoint {
  int64_t x = 0;
  int64_t y = 0;
  bool operator==(const IntPoint&) const = default;
};

// get_mini_boxes' result: the minimum-area rectangle's corners, ordered as it orders them (the
// two leftmost, the upper first, then the two rightmost, the upper first: corners[0] upper left,
// [1] upper right, [2] lower right, [3] lower left), and its shorter side.
struct MiniBox {
  std::array<Point, 4> corners;
  float short_side = 0;
};

// The convex hull of `points`, counter-clockwise (y up), without collinear points; fewer than 3
// points when they are all on a line.
std::vector<IntPoint> ConvexHull(std::vector<IntPoint> points);

// The minimum-area rectangle of `points` by rotating calipers over their hull, its corners
// computed through OpenCV's RotatedRect (float centre, size, angle; boxPoints) so they carry the
// same float rounding. Fewer than 3 hull points give a short side of 0.
MiniBox MinAreaBox(std::vector<IntPoint> points);

// Calls row(y, x_begin, x_end) for each row of the pixels cv2.fillPoly sets for the convex
// polygon `corners` (pixel centres between its edges plus each edge's 8-connected line), with
// x_end exclusive; rows outside [0, height) and columns outside [0, width) are cut off.
void ForEachPolygonRow(std::span<const IntPoint> corners, int64_t width, int64_t height,
                       const std::function<void(int64_t, int64_t, int64_t)>& row);

// pyclipper's PyclipperOffset (JT_ROUND, ET_CLOSEDPOLYGON, arc tolerance 0.25).Execute(delta) of
// `polygon`: the corners truncated to integers as pyclipper takes them, each edge pushed out by
// `delta` and each corner rounded by arcs of Clipper's step, the result's points rounded half
// away from zero. Empty when the polygon has fewer than 3 distinct points.
std::vector<IntPoint> RoundOffset(std::span<const Point> polygon, double delta);

}  // namespace pier::pipelines::ocr
