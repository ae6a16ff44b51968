// The tensors of a batch: requests' inputs concatenated along the first dimension (the
// batch; padded to the largest along a model's padded axes), a run's outputs sliced back into each
// request's rows, and BYTES elements (each a 4-byte little-endian length, then that many bytes;
// tensor/element_type.h) split and joined. The batcher (tensor_batcher.h) and the request check
// (tensor_request.h) use them; so may the front ends that turn JSON strings into BYTES tensors.
//
// Pure functions and a read-only view; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tensor/host_tensor.h"

namespace pier::tensor_models {

// Where each of the `count` BYTES elements in `bytes` begins, then where the last ends:
// [count + 1] offsets, the last bytes.size(). INVALID_ARGUMENT unless `bytes` is exactly
// `count` whole elements ("data holds 3 BYTES elements, the shape needs 4", "BYTES element 2
// is cut short: its length says 100 bytes, 7 remain").
[[nodiscard]] Result<std::vector<size_t>> BytesElementOffsets(std::string_view bytes,
                                                              int64_t count);
// The elements themselves, as views into `bytes`; errors as BytesElementOffsets'.
[[nodiscard]] Result<std::vector<std::string_view>> SplitBytesElements(std::string_view bytes,
                                                                       int64_t count);
// Appends `element` in the binary form (its length, then its bytes).
void AppendBytesElement(std::string& out, std::string_view element);
std::string JoinBytesElements(std::span<const std::string> elements);

// Checks that `tensor.bytes` holds exactly what `tensor.shape` says: element count * element
// size bytes, or for BYTES that many whole elements. INVALID_ARGUMENT whose message does not
// name the tensor (callers say which): "data holds 20 bytes, shape [2, 4] of FP32 needs 32".
[[nodiscard]] Status CheckTensorData(const HostTensor& tensor);

// `parts` as one tensor along the first dimension: named and typed as parts[0], its first
// dimension the sum of theirs, its bytes theirs in order (one allocation). Each part has
// rank >= 1 and the same type and dimensions after the first (the caller grouped them so).
HostTensor ConcatenateBatch(std::span<const HostTensor* const> parts);

// ConcatenateBatch for parts that differ after the first dimension (along a model's padded
// axes, input_pad.h): each dimension after the first is the largest of the parts', each part
// sits at the start of its rows along every dimension, and the rest holds `element` (one
// element's bytes in the parts' type). One allocation. The parts have the same type (not
// BYTES) and rank >= 1.
HostTensor ConcatenatePadded(std::span<const HostTensor* const> parts, std::string_view element);

// A run's output seen as rows along its first dimension, so that each request of the batch
// gets its own rows. Holds a pointer to the tensor, which must outlive it.
class BatchRows {
 public:
  // Checks the data against the shape (CheckTensorData) and that there is a first dimension.
  [[nodiscard]] static Result<BatchRows> Of(const HostTensor& whole);

  int64_t rows() const { return whole_->shape[0]; }
  // Rows [first, first + count) as a tensor of their own (a copy of those bytes);
  // first + count <= rows().
  HostTensor Slice(int64_t first, int64_t count) const;

 private:
  BatchRows(const HostTensor& whole, int64_t row_elements)
      : whole_(&whole), row_elements_(row_elements) {}

  const HostTensor* whole_;
  int64_t row_elements_;         // elements per row: the dimensions after the first
  std::vector<size_t> offsets_;  // BYTES only: each element's start, then the end
};

}  // namespace pier::tensor_models
