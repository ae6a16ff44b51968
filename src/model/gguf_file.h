// GgufFile: a validated, read-only, memory-mapped GGUF model file.
//
// Open() maps the file and validates everything before any tensor byte is
// touched: magic, version (2 or 3), counts, every string and array length,
// value types, `general.alignment` (default 32, a power of two), and that every
// tensor's offset is aligned and its data lies inside the file. A truncated,
// corrupt or hostile file yields a DATA_LOSS / UNSUPPORTED Status whose message
// names the file and the problem; nothing is ever read outside the mapping.
//
// Ownership: the GgufFile owns the mapping; GgufValue, GgufTensorInfo::data and
// string_views it hands out stay valid while it lives. Thread-safety: immutable
// after Open(), so any number of threads may read it concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "tensor/dtype.h"

namespace pier::model {

enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

std::string_view GgufTypeName(GgufType type);

// One metadata value. Scalars are decoded at Open(); strings and arrays point
// into the mapping (their bytes are unaligned, so element accessors copy).
class GgufValue {
 public:
  GgufType type() const { return type_; }
  // Element type and length of an array value (type() == kArray).
  GgufType array_type() const { return array_type_; }
  uint64_t array_size() const { return array_size_; }

  // Scalar accessors: nullopt when the value is not of a compatible kind.
  // Any integer type widens to int64 (a uint64 above INT64_MAX gives nullopt);
  // float accepts float32, float64 and integers.
  std::optional<int64_t> AsInt() const;
  std::optional<double> AsFloat() const;
  std::optional<bool> AsBool() const;
  std::optional<std::string_view> AsString() const;

  // Array accessors (copying); nullopt when the element type is incompatible.
  std::optional<std::vector<std::string_view>> AsStringArray() const;
  std::optional<std::vector<int64_t>> AsIntArray() const;
  std::optional<std::vector<float>> AsFloatArray() const;

  // Human-readable rendering for `pier inspect` (arrays are abbreviated).
  std::string ToDisplayString(size_t max_items = 8) const;

 private:
  friend class GgufFile;
  friend class GgufParser;
  GgufType type_ = GgufType::kUint8;
  GgufType array_type_ = GgufType::kUint8;
  uint64_t array_size_ = 0;
  uint64_t scalar_bits_ = 0;       // raw bits of a scalar value
  const uint8_t* data_ = nullptr;  // string bytes, or first array element
  uint64_t data_size_ = 0;         // bytes at data_ (string length or array payload)
};

struct GgufTensorInfo {
  std::string name;
  DType type;
  // ggml order: dims[0] is the innermost (contiguous) dimension, the row length.
  std::vector<int64_t> dims;
  int64_t element_count;
  uint64_t file_offset;  // absolute offset of the data in the file, aligned
  uint64_t size_bytes;
  const uint8_t* data;  // points into the mapping; size_bytes long

  // Elements per row (dims[0]) and number of rows (product of the other dims).
  int64_t row_length() const { return dims.empty() ? 0 : dims[0]; }
  int64_t row_count() const { return dims.empty() ? 0 : element_count / dims[0]; }
};

class GgufFile {
 public:
  // Maps and validates `path`. Errors name the path.
  static Result<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Validates an in-memory image (used by fuzzing and tests); `bytes` must outlive the result.
  static Result<std::unique_ptr<GgufFile>> FromMemory(const uint8_t* bytes, size_t size,
                                                      std::string display_name);

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t file_size() const { return size_; }
  uint32_t alignment() const { return alignment_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* Find(std::string_view key) const;
  bool Has(std::string_view key) const { return Find(key) != nullptr; }

  // Typed lookups. NOT_FOUND when absent, INVALID_ARGUMENT when of the wrong type;
  // messages name the file and the key.
  Result<int64_t> GetInt(std::string_view key) const;
  Result<double> GetFloat(std::string_view key) const;
  Result<bool> GetBool(std::string_view key) const;
  Result<std::string_view> GetString(std::string_view key) const;
  Result<std::vector<std::string_view>> GetStringArray(std::string_view key) const;
  Result<std::vector<int64_t>> GetIntArray(std::string_view key) const;
  Result<std::vector<float>> GetFloatArray(std::string_view key) const;

  // Tensors in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  // The tensor `name` holding a [rows, cols] matrix (ggml dims [cols, rows]): NOT_FOUND when
  // absent, INVALID_ARGUMENT when of another shape; messages name the file and the tensor.
  // Its type is the caller's to check.
  Result<const GgufTensorInfo*> FindMatrix(std::string_view name, int64_t rows, int64_t cols) const;

  // Lets the kernel drop the resident pages of [data, data + bytes) from this process (the
  // whole pages inside the range; madvise MADV_DONTNEED), e.g. after a tensor was copied
  // into another layout. The bytes stay readable: touching them again reads them back from
  // the file. A no-op for in-memory images.
  void ReleasePages(const uint8_t* data, size_t bytes) const;

 private:
  friend class GgufParser;
  GgufFile() = default;

  std::string path_;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  bool mapped_ = false;  // base_ is an mmap we own
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  // Lookup indexes; keys view the names' bytes inside the file image (stable).
  std::unordered_map<std::string_view, size_t> metadata_index_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

// Dequantizes rows [first_row, first_row + row_count) of `tensor` to f32.
//   dst: [row_count, tensor.row_length()]
// INVALID_ARGUMENT when the rows are out of range; UNSUPPORTED for a type that
// cannot be dequantized (see tensor/dequantize.h).
Status DequantizeRows(const GgufTensorInfo& tensor, int64_t first_row, int64_t row_count,
                      float* dst);

// Size in bytes of one scalar of `type`; 0 for kString and kArray.
uint64_t GgufScalarSize(GgufType type);

}  // namespace pier::model
