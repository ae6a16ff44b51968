// The point sets behind cv2.findContours(RETR_LIST) on a binary map (internal to
// pipelines/ocr): DB post-processing only takes each contour's minimum-area rectangle, which
// depends on the contour's convex hull alone, so the contours are not traced. An outer contour's
// hull is that of its 8-connected component's pixels; a hole's (4-connected background that does
// not reach the map's edge; beyond the edge counts as background, as OpenCV pads) is that of
// the component pixels 4-adjacent to it, the pixels OpenCV's hole border runs through.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "pipelines/ocr/polygon.h"

namespace pier::pipelines::ocr {

// The contours' points (each reduced to its rows' leftmost and rightmost pixels, which keeps the
// hull), the first `max_count` in OpenCV's list order: the reverse of the raster order in which
// Suzuki's border following meets each border (an outer border at its component's first pixel,
// a hole's at the pixel left of the hole's first). `bitmap`: [height, width], nonzero = text.
std::vector<std::vector<IntPoint>> ContourPointSets(std::span<const uint8_t> bitmap, int64_t width,
                                                    int64_t height, size_t max_count);

}  // namespace pier::pipelines::ocr
