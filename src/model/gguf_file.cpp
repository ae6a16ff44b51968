#include "model/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "model/byte_reader.h"
#include "tensor/dequantize.h"

namespace pier::model {

// Defined in gguf_parser.cpp: validates file->base_/size_ and fills the rest.
Status ParseGguf(GgufFile* file);

namespace {

bool IsIntegerType(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64:
      return true;
    default:
      return false;
  }
}

// Decodes a scalar of `type` from its raw little-endian bits.
std::optional<int64_t> DecodeInt(GgufType type, uint64_t bits) {
  switch (type) {
    case GgufType::kUint8:
      return static_cast<int64_t>(static_cast<uint8_t>(bits));
    case GgufType::kInt8:
      return static_cast<int64_t>(static_cast<int8_t>(static_cast<uint8_t>(bits)));
    case GgufType::kUint16:
      return static_cast<int64_t>(static_cast<uint16_t>(bits));
    case GgufType::kInt16:
      return static_cast<int64_t>(static_cast<int16_t>(static_cast<uint16_t>(bits)));
    case GgufType::kUint32:
      return static_cast<int64_t>(static_cast<uint32_t>(bits));
    case GgufType::kInt32:
      return static_cast<int64_t>(static_cast<int32_t>(static_cast<uint32_t>(bits)));
    case GgufType::kUint64:
      if (bits > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(bits);
    case GgufType::kInt64:
      return static_cast<int64_t>(bits);
    default:
      return std::nullopt;
  }
}

std::optional<double> DecodeFloat(GgufType type, uint64_t bits) {
  if (type == GgufType::kFloat32) {
    float value;
    const auto low = static_cast<uint32_t>(bits);
    std::memcpy(&value, &low, sizeof(value));
    return value;
  }
  if (type == GgufType::kFloat64) {
    double value;
    std::memcpy(&value, &bits, sizeof(value));
    return value;
  }
  if (type == GgufType::kUint64) return static_cast<double>(bits);
  std::optional<int64_t> integer = DecodeInt(type, bits);
  if (integer.has_value()) return static_cast<double>(*integer);
  return std::nullopt;
}

uint64_t LoadBits(const uint8_t* data, uint64_t size) {
  uint64_t bits = 0;
  std::memcpy(&bits, data, size);
  return bits;
}

std::string TypeDescription(const GgufValue& value) {
  if (value.type() == GgufType::kArray) {
    return "array of " + std::string(GgufTypeName(value.array_type()));
  }
  return std::string(GgufTypeName(value.type()));
}

}  // namespace

std::string_view GgufTypeName(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
      return "uint8";
    case GgufType::kInt8:
      return "int8";
    case GgufType::kUint16:
      return "uint16";
    case GgufType::kInt16:
      return "int16";
    case GgufType::kUint32:
      return "uint32";
    case GgufType::kInt32:
      return "int32";
    case GgufType::kFloat32:
      return "float32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kUint64:
      return "uint64";
    case GgufType::kInt64:
      return "int64";
    case GgufType::kFloat64:
      return "float64";
  }
  return "unknown";
}

uint64_t GgufScalarSize(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return 0;
}

// ---- GgufValue ----

std::optional<int64_t> GgufValue::AsInt() const { return DecodeInt(type_, scalar_bits_); }

std::optional<double> GgufValue::AsFloat() const { return DecodeFloat(type_, scalar_bits_); }

std::optional<bool> GgufValue::AsBool() const {
  if (type_ != GgufType::kBool) return std::nullopt;
  return (scalar_bits_ & 0xff) != 0;
}

std::optional<std::string_view> GgufValue::AsString() const {
  if (type_ != GgufType::kString) return std::nullopt;
  return std::string_view(reinterpret_cast<const char*>(data_), data_size_);
}

std::optional<std::vector<std::string_view>> GgufValue::AsStringArray() const {
  if (type_ != GgufType::kArray || array_type_ != GgufType::kString) return std::nullopt;
  // The parser validated every length; the reader re-checks them anyway.
  ByteReader reader(data_, data_size_);
  std::vector<std::string_view> out;
  out.reserve(array_size_);
  for (uint64_t i = 0; i < array_size_; ++i) {
    Result<std::string_view> text = reader.ReadString();
    if (!text.ok()) return std::nullopt;
    out.push_back(*text);
  }
  return out;
}

std::optional<std::vector<int64_t>> GgufValue::AsIntArray() const {
  if (type_ != GgufType::kArray || !IsIntegerType(array_type_)) return std::nullopt;
  const uint64_t size = GgufScalarSize(array_type_);
  std::vector<int64_t> out;
  out.reserve(array_size_);
  for (uint64_t i = 0; i < array_size_; ++i) {
    std::optional<int64_t> value = DecodeInt(array_type_, LoadBits(data_ + i * size, size));
    if (!value.has_value()) return std::nullopt;
    out.push_back(*value);
  }
  return out;
}

std::optional<std::vector<float>> GgufValue::AsFloatArray() const {
  if (type_ != GgufType::kArray) return std::nullopt;
  if (array_type_ != GgufType::kFloat32 && array_type_ != GgufType::kFloat64 &&
      !IsIntegerType(array_type_)) {
    return std::nullopt;
  }
  const uint64_t size = GgufScalarSize(array_type_);
  std::vector<float> out;
  out.reserve(array_size_);
  for (uint64_t i = 0; i < array_size_; ++i) {
    std::optional<double> value = DecodeFloat(array_type_, LoadBits(data_ + i * size, size));
    out.push_back(static_cast<float>(value.value_or(0.0)));
  }
  return out;
}

std::string GgufValue::ToDisplayString(size_t max_items) const {
  auto scalar = [](GgufType type, uint64_t bits, const uint8_t* text, uint64_t text_size) {
    if (type == GgufType::kString) {
      return "\"" + std::string(reinterpret_cast<const char*>(text), text_size) + "\"";
    }
    if (type == GgufType::kBool) return std::string((bits & 0xff) != 0 ? "true" : "false");
    if (type == GgufType::kUint64) return std::to_string(bits);
    if (IsIntegerType(type)) return std::to_string(DecodeInt(type, bits).value_or(0));
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "%g", DecodeFloat(type, bits).value_or(0.0));
    return std::string(buffer);
  };
  if (type_ != GgufType::kArray) return scalar(type_, scalar_bits_, data_, data_size_);

  std::string out = "[";
  const uint64_t shown = std::min<uint64_t>(array_size_, max_items);
  if (array_type_ == GgufType::kString) {
    std::optional<std::vector<std::string_view>> items = AsStringArray();
    for (uint64_t i = 0; items.has_value() && i < shown; ++i) {
      if (i > 0) out += ", ";
      const std::string_view item = (*items)[i];
      out +=
          scalar(GgufType::kString, 0, reinterpret_cast<const uint8_t*>(item.data()), item.size());
    }
  } else {
    const uint64_t size = GgufScalarSize(array_type_);
    for (uint64_t i = 0; i < shown; ++i) {
      if (i > 0) out += ", ";
      out += scalar(array_type_, LoadBits(data_ + i * size, size), nullptr, 0);
    }
  }
  if (shown < array_size_) {
    out += ", ... (" + std::to_string(array_size_) + " items)";
  }
  return out + "]";
}

// ---- GgufFile ----

Result<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    std::string message = path + ": cannot open: " + std::strerror(error);
    if (error == ENOENT) return NotFoundError(message);
    return IoError(message);
  }
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    return IoError(path + ": cannot stat: " + std::strerror(error));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    return InvalidArgumentError(path + ": not a regular file");
  }
  if (info.st_size == 0) {
    ::close(fd);
    return DataLossError(path + ": not a GGUF file (the file is empty)");
  }
  const auto size = static_cast<uint64_t>(info.st_size);
  void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_error = errno;
  ::close(fd);  // the mapping keeps its own reference to the file
  if (mapping == MAP_FAILED) {
    return IoError(path + ": cannot map " + std::to_string(size) +
                   " bytes: " + std::strerror(map_error));
  }
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->base_ = static_cast<const uint8_t*>(mapping);
  file->size_ = size;
  file->mapped_ = true;
  PIER_RETURN_IF_ERROR(ParseGguf(file.get()));
  return file;
}

void GgufFile::ReleasePages(const uint8_t* data, size_t bytes) const {
  if (!mapped_ || data < base_ || bytes == 0) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = std::min(reinterpret_cast<uintptr_t>(data) + bytes,
                                 reinterpret_cast<uintptr_t>(base_) + size_) /
                        page * page;
  // Advice only: a refusal leaves the pages resident, which costs memory, not correctness.
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

Result<std::unique_ptr<GgufFile>> GgufFile::FromMemory(const uint8_t* bytes, size_t size,
                                                       std::string display_name) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = std::move(display_name);
  file->base_ = size == 0 ? nullptr : bytes;
  file->size_ = size;
  file->mapped_ = false;
  PIER_RETURN_IF_ERROR(ParseGguf(file.get()));
  return file;
}

GgufFile::~GgufFile() {
  if (mapped_ && base_ != nullptr) {
    ::munmap(const_cast<uint8_t*>(base_), size_);
  }
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<const GgufTensorInfo*> GgufFile::FindMatrix(std::string_view name, int64_t rows,
                                                   int64_t cols) const {
  const GgufTensorInfo* t = FindTensor(name);
  auto tensor = [&] { return path_ + ": tensor '" + std::string(name) + "'"; };
  if (t == nullptr) return NotFoundError(tensor() + " is missing");
  if (t->dims.size() != 2 || t->dims[0] != cols || t->dims[1] != rows) {
    return InvalidArgumentError(tensor() + " should be [" + std::to_string(cols) + ", " +
                                std::to_string(rows) + "] (ggml order)");
  }
  return t;
}

Status DequantizeRows(const GgufTensorInfo& tensor, int64_t first_row, int64_t row_count,
                      float* dst) {
  const int64_t rows = tensor.row_count();
  if (first_row < 0 || row_count < 0 || first_row > rows || row_count > rows - first_row) {
    return InvalidArgumentError("tensor '" + tensor.name + "' has " + std::to_string(rows) +
                                " rows; cannot read rows " + std::to_string(first_row) + " to " +
                                std::to_string(first_row + row_count));
  }
  const int64_t row_length = tensor.row_length();
  // The parser checked that every row is whole blocks and all rows lie in the file.
  const uint64_t row_bytes = RowBytes(tensor.type, row_length).value_or(0);
  const uint8_t* src = tensor.data + static_cast<uint64_t>(first_row) * row_bytes;
  Status status = DequantizeRow(tensor.type, src, dst, row_count * row_length);
  if (!status.ok()) return status.WithContext("tensor '" + tensor.name + "'");
  return Status::Ok();
}

namespace {

// Looks up `key` and converts it with `convert`; errors name the file, key and types.
template <typename T, typename Convert>
Result<T> Lookup(const GgufFile& file, std::string_view key, std::string_view expected,
                 Convert convert) {
  const GgufValue* value = file.Find(key);
  if (value == nullptr) {
    return NotFoundError(file.path() + ": metadata key '" + std::string(key) + "' not found");
  }
  std::optional<T> converted = convert(*value);
  if (!converted.has_value()) {
    return InvalidArgumentError(file.path() + ": metadata key '" + std::string(key) +
                                "' has type " + TypeDescription(*value) + ", expected " +
                                std::string(expected));
  }
  return std::move(*converted);
}

}  // namespace

Result<int64_t> GgufFile::GetInt(std::string_view key) const {
  return Lookup<int64_t>(*this, key, "an integer", [](const GgufValue& v) { return v.AsInt(); });
}
Result<double> GgufFile::GetFloat(std::string_view key) const {
  return Lookup<double>(*this, key, "a number", [](const GgufValue& v) { return v.AsFloat(); });
}
Result<bool> GgufFile::GetBool(std::string_view key) const {
  return Lookup<bool>(*this, key, "a bool", [](const GgufValue& v) { return v.AsBool(); });
}
Result<std::string_view> GgufFile::GetString(std::string_view key) const {
  return Lookup<std::string_view>(*this, key, "a string",
                                  [](const GgufValue& v) { return v.AsString(); });
}
Result<std::vector<std::string_view>> GgufFile::GetStringArray(std::string_view key) const {
  return Lookup<std::vector<std::string_view>>(
      *this, key, "an array of strings", [](const GgufValue& v) { return v.AsStringArray(); });
}
Result<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  return Lookup<std::vector<int64_t>>(*this, key, "an array of integers",
                                      [](const GgufValue& v) { return v.AsIntArray(); });
}
Result<std::vector<float>> GgufFile::GetFloatArray(std::string_view key) const {
  return Lookup<std::vector<float>>(*this, key, "an array of numbers",
                                    [](const GgufValue& v) { return v.AsFloatArray(); });
}

}  // namespace pier::model
