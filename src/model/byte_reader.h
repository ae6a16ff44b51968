// ByteReader: a bounded little-endian cursor over an immutable byte range.
//
// Every read checks the bytes left first and returns a DATA_LOSS Status at the
// end of the range, so a parser built on it can never read past the range,
// whatever lengths a hostile file claims. Values are copied out with
// tensor/byte_load.h's loads (GGUF fields are unaligned). Internal to src/model.
//
// Ownership: borrows the range, which must outlive the reader. Thread-safety:
// one reader per thread; the range itself is only read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "tensor/byte_load.h"

namespace pier::model {

class ByteReader {
 public:
  ByteReader(const uint8_t* data, uint64_t size) : data_(data), size_(size) {}

  uint64_t offset() const { return offset_; }
  uint64_t remaining() const { return size_ - offset_; }
  const uint8_t* current() const { return data_ + offset_; }

  // Reads one little-endian scalar.
  template <typename T>
  Result<T> Read() {
    PIER_RETURN_IF_ERROR(Require(sizeof(T)));
    const T value = LoadLittleEndian<T>(data_ + offset_);
    offset_ += sizeof(T);
    return value;
  }

  // Reads a GGUF string: uint64 length, then that many bytes (not NUL-terminated).
  Result<std::string_view> ReadString() {
    PIER_ASSIGN_OR_RETURN(const uint64_t length, Read<uint64_t>());
    if (length > remaining()) {
      return DataLossError("string length " + std::to_string(length) + " at offset " +
                           std::to_string(offset_ - sizeof(uint64_t)) + " exceeds the " +
                           std::to_string(remaining()) + " bytes left in the file");
    }
    std::string_view text(reinterpret_cast<const char*>(data_ + offset_), length);
    offset_ += length;
    return text;
  }

  // Advances by `n` bytes.
  Status Skip(uint64_t n) {
    PIER_RETURN_IF_ERROR(Require(n));
    offset_ += n;
    return Status::Ok();
  }

 private:
  Status Require(uint64_t n) const {
    if (n > remaining()) {
      return DataLossError("unexpected end of file at offset " + std::to_string(offset_) +
                           " (needed " + std::to_string(n) + " bytes, " +
                           std::to_string(remaining()) + " left)");
    }
    return Status::Ok();
  }

  const uint8_t* data_;
  uint64_t size_;
  uint64_t offset_ = 0;
};

}  // namespace pier::model
