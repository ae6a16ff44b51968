#include "tensor_models/batch_tensors.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "common/check.h"
#include "tensor/byte_load.h"

namespace pier::tensor_models {
namespace {

constexpr size_t kLengthBytes = 4;  // a BYTES element's length prefix

// BytesElementOffsets, its messages naming what sets `count` ("shape [2, 2]").
Result<std::vector<size_t>> Offsets(std::string_view bytes, int64_t count,
                                    const std::string& needs) {
  std::vector<size_t> offsets;
  // Never trust `count` for the reservation: every element takes at least its prefix.
  offsets.reserve(
      std::min(static_cast<size_t>(std::max<int64_t>(count, 0)), bytes.size() / kLengthBytes) + 1);
  size_t at = 0;
  int64_t n = 0;
  while (n < count && at < bytes.size()) {
    if (bytes.size() - at < kLengthBytes) {
      return InvalidArgumentError("BYTES element " + std::to_string(n) +
                                  " is cut short: " + std::to_string(bytes.size() - at) +
                                  " bytes remain for its 4-byte length");
    }
    const uint32_t length = LoadU32(reinterpret_cast<const uint8_t*>(bytes.data() + at));
    const size_t remain = bytes.size() - at - kLengthBytes;
    if (length > remain) {
      return InvalidArgumentError("BYTES element " + std::to_string(n) +
                                  " is cut short: its length says " + std::to_string(length) +
                                  " bytes, " + std::to_string(remain) + " remain");
    }
    offsets.push_back(at);
    at += kLengthBytes + length;
    ++n;
  }
  if (n < count) {
    return InvalidArgumentError("data holds " + std::to_string(n) + " BYTES elements, " + needs +
                                " needs " + std::to_string(count));
  }
  if (at < bytes.size()) {
    return InvalidArgumentError("data holds " + std::to_string(bytes.size() - at) +
                                " bytes past the " + std::to_string(count) + " BYTES elements " +
                                needs + " needs");
  }
  offsets.push_back(at);
  return offsets;
}

}  // namespace

Result<std::vector<size_t>> BytesElementOffsets(std::string_view bytes, int64_t count) {
  return Offsets(bytes, count, "the shape");
}

Result<std::vector<std::string_view>> SplitBytesElements(std::string_view bytes, int64_t count) {
  PIER_ASSIGN_OR_RETURN(std::vector<size_t> offsets, BytesElementOffsets(bytes, count));
  std::vector<std::string_view> elements;
  elements.reserve(offsets.size() - 1);
  for (size_t i = 0; i + 1 < offsets.size(); ++i) {
    elements.push_back(
        bytes.substr(offsets[i] + kLengthBytes, offsets[i + 1] - offsets[i] - kLengthBytes));
  }
  return elements;
}

void AppendBytesElement(std::string& out, std::string_view element) {
  PIER_CHECK(element.size() <= std::numeric_limits<uint32_t>::max(),
             "a BYTES element longer than 4 GiB");
  const auto length = static_cast<uint32_t>(element.size());
  const char prefix[kLengthBytes] = {
      static_cast<char>(length & 0xff), static_cast<char>((length >> 8) & 0xff),
      static_cast<char>((length >> 16) & 0xff), static_cast<char>((length >> 24) & 0xff)};
  out.append(prefix, kLengthBytes);
  out.append(element);
}

std::string JoinBytesElements(std::span<const std::string> elements) {
  size_t total = 0;
  for (const std::string& e : elements) total += kLengthBytes + e.size();
  std::string out;
  out.reserve(total);
  for (const std::string& e : elements) AppendBytesElement(out, e);
  return out;
}

Status CheckTensorData(const HostTensor& tensor) {
  const int64_t count = ElementCount(tensor.shape);
  if (count < 0) {
    return InvalidArgumentError("shape " + ShapeText(tensor.shape) +
                                " has a negative dimension or too many elements");
  }
  if (tensor.type == ElementType::kBytes) {
    return Offsets(tensor.bytes, count, "shape " + ShapeText(tensor.shape)).status();
  }
  const int64_t size = ElementSize(tensor.type);
  if (count > std::numeric_limits<int64_t>::max() / size) {
    return InvalidArgumentError("shape " + ShapeText(tensor.shape) + " has too many elements");
  }
  const int64_t needed = count * size;
  if (static_cast<uint64_t>(needed) != tensor.bytes.size()) {
    return InvalidArgumentError("data holds " + std::to_string(tensor.bytes.size()) +
                                " bytes, shape " + ShapeText(tensor.shape) + " of " +
                                std::string(ElementTypeName(tensor.type)) + " needs " +
                                std::to_string(needed));
  }
  return Status::Ok();
}

HostTensor ConcatenateBatch(std::span<const HostTensor* const> parts) {
  PIER_CHECK(!parts.empty() && !parts[0]->shape.empty(), "ConcatenateBatch of nothing");
  HostTensor whole;
  whole.name = parts[0]->name;
  whole.type = parts[0]->type;
  whole.shape = parts[0]->shape;
  whole.shape[0] = 0;
  size_t total = 0;
  for (const HostTensor* part : parts) {
    PIER_CHECK(part->type == whole.type && part->shape.size() == whole.shape.size(),
               "ConcatenateBatch over different types or ranks");
    whole.shape[0] += part->shape[0];
    total += part->bytes.size();
  }
  whole.bytes.reserve(total);
  for (const HostTensor* part : parts) whole.bytes += part->bytes;
  return whole;
}

HostTensor ConcatenatePadded(std::span<const HostTensor* const> parts, std::string_view element) {
  PIER_CHECK(!parts.empty() && !parts[0]->shape.empty(), "ConcatenatePadded of nothing");
  const size_t rank = parts[0]->shape.size();
  const auto size = static_cast<size_t>(ElementSize(parts[0]->type));
  PIER_CHECK(size > 0 && element.size() == size, "ConcatenatePadded: a pad element of the type");
  HostTensor whole;
  whole.name = parts[0]->name;
  whole.type = parts[0]->type;
  whole.shape.assign(rank, 0);  // [sum of batches, largest of each dimension after it]
  for (const HostTensor* part : parts) {
    PIER_CHECK(part->type == whole.type && part->shape.size() == rank,
               "ConcatenatePadded over different types or ranks");
    whole.shape[0] += part->shape[0];
    for (size_t d = 1; d < rank; ++d) whole.shape[d] = std::max(whole.shape[d], part->shape[d]);
  }
  // Every element the pad, then each part's runs of its last dimension copied into place.
  const auto total = static_cast<size_t>(ElementCount(whole.shape));
  whole.bytes.resize(total * size);
  if (!whole.bytes.empty()) {
    std::memcpy(whole.bytes.data(), element.data(), size);
    for (size_t filled = size; filled < whole.bytes.size(); filled *= 2) {
      std::memcpy(whole.bytes.data() + filled, whole.bytes.data(),
                  std::min(filled, whole.bytes.size() - filled));
    }
  }
  std::vector<int64_t> stride(rank, 1);  // the whole's, in elements
  for (size_t d = rank - 1; d > 0; --d) stride[d - 1] = stride[d] * whole.shape[d];
  int64_t first_row = 0;
  for (const HostTensor* part : parts) {
    const std::vector<int64_t>& shape = part->shape;
    const int64_t run = rank == 1 ? shape[0] : shape[rank - 1];  // contiguous in both
    const int64_t runs = run == 0 ? 0 : ElementCount(shape) / run;
    std::vector<int64_t> at(rank > 1 ? rank - 1 : 1, 0);  // the run's index over dims [0, rank-1)
    for (int64_t r = 0; r < runs; ++r) {
      int64_t to = first_row * stride[0];
      if (rank > 1) {
        for (size_t d = 0; d + 1 < rank; ++d) to += at[d] * stride[d];
        // The next run: the odometer over the part's dimensions before the last.
        for (size_t d = rank - 1; d-- > 0;) {
          if (++at[d] < shape[d]) break;
          at[d] = 0;
        }
      }
      std::memcpy(whole.bytes.data() + static_cast<size_t>(to) * size,
                  part->bytes.data() + static_cast<size_t>(r * run) * size,
                  static_cast<size_t>(run) * size);
    }
    first_row += shape[0];
  }
  return whole;
}

Result<BatchRows> BatchRows::Of(const HostTensor& whole) {
  if (whole.shape.empty()) return InvalidArgumentError("a scalar has no batch dimension");
  PIER_RETURN_IF_ERROR(CheckTensorData(whole));
  const std::vector<int64_t> row_shape(whole.shape.begin() + 1, whole.shape.end());
  BatchRows rows(whole, ElementCount(row_shape));
  if (whole.type == ElementType::kBytes) {
    // Checked just above, so this cannot fail.
    rows.offsets_ = std::move(BytesElementOffsets(whole.bytes, ElementCount(whole.shape))).value();
  }
  return rows;
}

HostTensor BatchRows::Slice(int64_t first, int64_t count) const {
  PIER_CHECK(first >= 0 && count >= 0 && first + count <= rows(), "BatchRows::Slice out of range");
  HostTensor part;
  part.name = whole_->name;
  part.type = whole_->type;
  part.shape = whole_->shape;
  part.shape[0] = count;
  const auto begin_element = static_cast<size_t>(first * row_elements_);
  const auto end_element = static_cast<size_t>((first + count) * row_elements_);
  size_t begin = 0, end = 0;
  if (whole_->type == ElementType::kBytes) {
    begin = offsets_[begin_element];
    end = offsets_[end_element];
  } else {
    const auto size = static_cast<size_t>(ElementSize(whole_->type));
    begin = begin_element * size;
    end = end_element * size;
  }
  part.bytes.assign(whole_->bytes, begin, end - begin);
  return part;
}

}  // namespace pier::tensor_models
