// Tensors in host memory as a tensor model's requests and answers carry them: a name, an
// element type, a shape and the elements' bytes (row-major, little-endian; BYTES elements in
// Triton's binary form, element_type.h). TensorSpec is what a model declares of one input or
// output: its shape may hold -1 for a dimension the model leaves open.
//
// Plain data and pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/element_type.h"

namespace pier {

struct TensorSpec {
  std::string name;
  ElementType type = ElementType::kFp32;
  std::vector<int64_t> shape;  // -1: any size
};

struct HostTensor {
  std::string name;
  ElementType type = ElementType::kFp32;
  std::vector<int64_t> shape;
  std::string bytes;
};

// The product of `shape`'s dimensions (1 for a scalar); -1 when a dimension is negative or the
// product passes 2^62.
int64_t ElementCount(const std::vector<int64_t>& shape);

// "[2, -1, 3]", for messages.
std::string ShapeText(const std::vector<int64_t>& shape);

}  // namespace pier
