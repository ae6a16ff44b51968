#include "tensor/host_tensor.h"

namespace pier {

int64_t ElementCount(const std::vector<int64_t>& shape) {
  constexpr int64_t kLimit = int64_t{1} << 62;
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0) return -1;
    if (dim != 0 && count > kLimit / dim) return -1;
    count *= dim;
  }
  return count;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

}  // namespace pier
