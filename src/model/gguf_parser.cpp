// GgufParser: validates a GGUF image and fills a GgufFile (see gguf_file.h).
//
// Layout of a GGUF file (all little-endian):
//   magic "GGUF" | uint32 version | uint64 tensor_count | uint64 kv_count
//   kv_count x  { string key | uint32 type | value }
//   tensor_count x { string name | uint32 n_dims | uint64 dims[n_dims] | uint32 type |
//                    uint64 offset (relative to the data section) }
//   padding to `general.alignment` | data section
// A string is uint64 length + bytes; an array is uint32 element type + uint64 count + elements.
#include <limits>
#include <string>

#include "model/byte_reader.h"
#include "model/gguf_file.h"

namespace pier::model {
namespace {

constexpr uint32_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;
// Smallest encodings, used to bound hostile counts by the bytes left in the file:
// a KV is key length (8) + type (4) + at least a 1-byte value; a tensor info is
// name length (8) + n_dims (4) + one dim (8) + type (4) + offset (8).
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

std::string Quote(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    } else {
      out += c;
    }
    if (out.size() > 200) {
      out += "...";
      break;
    }
  }
  return out + "'";
}

bool IsValidType(uint32_t raw) { return raw <= static_cast<uint32_t>(GgufType::kFloat64); }

}  // namespace

class GgufParser {
 public:
  explicit GgufParser(GgufFile* file) : file_(file), reader_(file->base_, file->size_) {}

  Status Parse() {
    PIER_RETURN_IF_ERROR(ParseHeader());
    for (uint64_t i = 0; i < kv_count_; ++i) PIER_RETURN_IF_ERROR(ParseKeyValue(i));
    PIER_RETURN_IF_ERROR(ParseAlignment());
    for (uint64_t i = 0; i < tensor_count_; ++i) PIER_RETURN_IF_ERROR(ParseTensorInfo(i));
    return PlaceTensorData();
  }

 private:
  // "<file>: <message>" with the file's code.
  Status Error(StatusCode code, const std::string& message) const {
    return Status(code, file_->path_ + ": " + message);
  }
  Status Wrap(const Status& status, const std::string& context) const {
    return Status(status.code(), file_->path_ + ": " + context + ": " + status.message());
  }

  Status ParseHeader() {
    if (file_->size_ < 4) {
      return Error(StatusCode::kDataLoss,
                   "not a GGUF file (only " + std::to_string(file_->size_) + " bytes)");
    }
    PIER_ASSIGN_OR_RETURN(const uint32_t magic, reader_.Read<uint32_t>());
    if (magic != 0x46554747u) {  // "GGUF" read as little-endian uint32
      return Error(StatusCode::kDataLoss,
                   "not a GGUF file (magic " +
                       Quote(std::string_view(reinterpret_cast<const char*>(file_->base_), 4)) +
                       ", expected 'GGUF')");
    }
    auto version = reader_.Read<uint32_t>();
    if (!version.ok()) return Wrap(version.status(), "reading the version");
    file_->version_ = *version;
    if (*version == 1) {
      return Error(StatusCode::kUnsupported,
                   "GGUF version 1 is not supported (only versions 2 and 3); re-convert the "
                   "model with a current llama.cpp");
    }
    if (*version != 2 && *version != 3) {
      const bool swapped = *version == 0x02000000u || *version == 0x03000000u;
      return Error(StatusCode::kUnsupported, "GGUF version " + std::to_string(*version) +
                                                 (swapped ? " (a big-endian file)" : "") +
                                                 " is not supported (only versions 2 and 3)");
    }
    auto tensor_count = reader_.Read<uint64_t>();
    if (!tensor_count.ok()) return Wrap(tensor_count.status(), "reading the tensor count");
    auto kv_count = reader_.Read<uint64_t>();
    if (!kv_count.ok()) return Wrap(kv_count.status(), "reading the metadata count");
    tensor_count_ = *tensor_count;
    kv_count_ = *kv_count;
    const uint64_t left = reader_.remaining();
    if (kv_count_ > left / kMinKvBytes) {
      return Error(StatusCode::kDataLoss, "header claims " + std::to_string(kv_count_) +
                                              " metadata entries, more than the " +
                                              std::to_string(left) +
                                              " bytes left can hold (truncated or corrupt file)");
    }
    if (tensor_count_ > (left - kv_count_ * kMinKvBytes) / kMinTensorInfoBytes) {
      return Error(StatusCode::kDataLoss, "header claims " + std::to_string(tensor_count_) +
                                              " tensors, more than the " + std::to_string(left) +
                                              " bytes left can hold (truncated or corrupt file)");
    }
    file_->metadata_.reserve(kv_count_);
    file_->tensors_.reserve(tensor_count_);
    return Status::Ok();
  }

  Status ParseKeyValue(uint64_t index) {
    const std::string where = "metadata entry " + std::to_string(index);
    auto key = reader_.ReadString();
    if (!key.ok()) return Wrap(key.status(), where + ": reading the key");
    const std::string key_context = where + " (key " + Quote(*key) + ")";
    auto raw_type = reader_.Read<uint32_t>();
    if (!raw_type.ok()) return Wrap(raw_type.status(), key_context);
    if (!IsValidType(*raw_type)) {
      return Error(StatusCode::kDataLoss,
                   key_context + " has unknown value type " + std::to_string(*raw_type));
    }
    GgufValue value;
    value.type_ = static_cast<GgufType>(*raw_type);
    Status status = ParseValue(&value);
    if (!status.ok()) return Wrap(status, key_context);
    if (!file_->metadata_index_.emplace(*key, file_->metadata_.size()).second) {
      return Error(StatusCode::kDataLoss, "duplicate metadata key " + Quote(*key));
    }
    file_->metadata_.emplace_back(std::string(*key), value);
    return Status::Ok();
  }

  // Reads the value of `value->type_` at the cursor.
  Status ParseValue(GgufValue* value) {
    if (value->type_ == GgufType::kString) {
      PIER_ASSIGN_OR_RETURN(const std::string_view text, reader_.ReadString());
      value->data_ = reinterpret_cast<const uint8_t*>(text.data());
      value->data_size_ = text.size();
      return Status::Ok();
    }
    if (value->type_ == GgufType::kArray) return ParseArray(value);
    const uint64_t size = GgufScalarSize(value->type_);
    const uint8_t* start = reader_.current();
    PIER_RETURN_IF_ERROR(reader_.Skip(size));
    uint64_t bits = 0;
    std::memcpy(&bits, start, size);  // little-endian: low bytes first
    value->scalar_bits_ = bits;
    return Status::Ok();
  }

  Status ParseArray(GgufValue* value) {
    PIER_ASSIGN_OR_RETURN(const uint32_t raw_type, reader_.Read<uint32_t>());
    if (!IsValidType(raw_type)) {
      return DataLossError("array has unknown element type " + std::to_string(raw_type));
    }
    if (raw_type == static_cast<uint32_t>(GgufType::kArray)) {
      return UnsupportedError("nested arrays are not supported");
    }
    PIER_ASSIGN_OR_RETURN(const uint64_t count, reader_.Read<uint64_t>());
    value->array_type_ = static_cast<GgufType>(raw_type);
    value->array_size_ = count;
    value->data_ = reader_.current();
    const uint64_t start = reader_.offset();
    if (value->array_type_ == GgufType::kString) {
      // Each string takes at least its 8-byte length.
      if (count > reader_.remaining() / 8) {
        return DataLossError("array of " + std::to_string(count) + " strings exceeds the " +
                             std::to_string(reader_.remaining()) + " bytes left in the file");
      }
      for (uint64_t i = 0; i < count; ++i) {
        auto text = reader_.ReadString();
        if (!text.ok()) {
          return Status(text.status().code(),
                        "array element " + std::to_string(i) + ": " + text.status().message());
        }
      }
    } else {
      const uint64_t element_size = GgufScalarSize(value->array_type_);
      if (count > reader_.remaining() / element_size) {
        return DataLossError("array of " + std::to_string(count) + " " +
                             std::string(GgufTypeName(value->array_type_)) +
                             " values exceeds the " + std::to_string(reader_.remaining()) +
                             " bytes left in the file");
      }
      PIER_RETURN_IF_ERROR(reader_.Skip(count * element_size));
    }
    value->data_size_ = reader_.offset() - start;
    return Status::Ok();
  }

  Status ParseAlignment() {
    file_->alignment_ = kDefaultAlignment;
    const GgufValue* value = file_->Find("general.alignment");
    if (value == nullptr) return Status::Ok();
    const std::optional<int64_t> alignment = value->AsInt();
    if (!alignment.has_value()) {
      return Error(StatusCode::kDataLoss, "general.alignment has type " +
                                              std::string(GgufTypeName(value->type())) +
                                              ", expected an unsigned integer");
    }
    if (*alignment <= 0 || *alignment > std::numeric_limits<uint32_t>::max() ||
        (*alignment & (*alignment - 1)) != 0) {
      return Error(StatusCode::kDataLoss, "general.alignment is " + std::to_string(*alignment) +
                                              ", expected a non-zero power of two");
    }
    file_->alignment_ = static_cast<uint32_t>(*alignment);
    return Status::Ok();
  }

  Status ParseTensorInfo(uint64_t index) {
    const std::string where = "tensor info " + std::to_string(index);
    auto name = reader_.ReadString();
    if (!name.ok()) return Wrap(name.status(), where + ": reading the name");
    GgufTensorInfo info;
    info.name = std::string(*name);
    const std::string context = "tensor " + Quote(*name);
    auto n_dims = reader_.Read<uint32_t>();
    if (!n_dims.ok()) return Wrap(n_dims.status(), context);
    if (*n_dims == 0 || *n_dims > kMaxDims) {
      return Error(StatusCode::kDataLoss,
                   context + " has " + std::to_string(*n_dims) + " dimensions (expected 1 to 4)");
    }
    info.element_count = 1;
    for (uint32_t d = 0; d < *n_dims; ++d) {
      auto dim = reader_.Read<uint64_t>();
      if (!dim.ok()) return Wrap(dim.status(), context);
      if (*dim == 0 || *dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Error(StatusCode::kDataLoss, context + " has dimension " + std::to_string(d) +
                                                " of " + std::to_string(*dim) +
                                                " (expected 1 to 2^63-1)");
      }
      const auto extent = static_cast<int64_t>(*dim);
      if (info.element_count > std::numeric_limits<int64_t>::max() / extent) {
        return Error(StatusCode::kDataLoss, context + " has an element count that overflows");
      }
      info.element_count *= extent;
      info.dims.push_back(extent);
    }
    auto raw_type = reader_.Read<uint32_t>();
    if (!raw_type.ok()) return Wrap(raw_type.status(), context);
    const std::optional<DTypeTraits> traits = GetDTypeTraits(*raw_type);
    if (!traits.has_value()) {
      return Error(StatusCode::kUnsupported,
                   context + " has unknown tensor type " + std::to_string(*raw_type));
    }
    info.type = static_cast<DType>(*raw_type);
    if (info.dims[0] % traits->block_size != 0) {
      return Error(StatusCode::kDataLoss, context + " has rows of " + std::to_string(info.dims[0]) +
                                              " elements, not a multiple of the " +
                                              std::string(traits->name) + " block size " +
                                              std::to_string(traits->block_size));
    }
    // element_count is a multiple of dims[0], hence of the block size.
    const std::optional<uint64_t> size = RowBytes(info.type, info.element_count);
    if (!size.has_value()) {
      return Error(StatusCode::kDataLoss, context + " has a byte size that overflows");
    }
    info.size_bytes = *size;
    auto offset = reader_.Read<uint64_t>();
    if (!offset.ok()) return Wrap(offset.status(), context);
    if (*offset % file_->alignment_ != 0) {
      return Error(StatusCode::kDataLoss, context + " has data offset " + std::to_string(*offset) +
                                              ", not a multiple of the alignment " +
                                              std::to_string(file_->alignment_));
    }
    info.file_offset = *offset;  // relative for now; PlaceTensorData makes it absolute
    info.data = nullptr;
    if (!file_->tensor_index_.emplace(*name, file_->tensors_.size()).second) {
      return Error(StatusCode::kDataLoss, "duplicate tensor name " + Quote(*name));
    }
    file_->tensors_.push_back(std::move(info));
    return Status::Ok();
  }

  Status PlaceTensorData() {
    const uint64_t header_end = reader_.offset();
    const uint64_t alignment = file_->alignment_;
    const uint64_t padding = (alignment - header_end % alignment) % alignment;
    const uint64_t data_start = header_end + padding;  // header_end <= size_, no overflow
    if (file_->tensors_.empty()) return Status::Ok();
    if (data_start > file_->size_) {
      return Error(StatusCode::kDataLoss,
                   "data section would start at offset " + std::to_string(data_start) +
                       ", past the end of the file (size " + std::to_string(file_->size_) + ")");
    }
    const uint64_t data_size = file_->size_ - data_start;
    for (GgufTensorInfo& info : file_->tensors_) {
      const uint64_t relative = info.file_offset;
      if (relative > data_size || info.size_bytes > data_size - relative) {
        const bool offset_overflows = relative > std::numeric_limits<uint64_t>::max() - data_start;
        return Error(
            StatusCode::kDataLoss,
            "tensor " + Quote(info.name) + " (offset " +
                (offset_overflows ? "beyond 2^64" : std::to_string(data_start + relative)) + ", " +
                std::to_string(info.size_bytes) +
                " bytes) extends past the end of the file (size " + std::to_string(file_->size_) +
                ")");
      }
      info.file_offset = data_start + relative;
      info.data = file_->base_ + info.file_offset;
    }
    return Status::Ok();
  }

  GgufFile* file_;
  ByteReader reader_;
  uint64_t tensor_count_ = 0;
  uint64_t kv_count_ = 0;
};

Status ParseGguf(GgufFile* file) { return GgufParser(file).Parse(); }

}  // namespace pier::model
