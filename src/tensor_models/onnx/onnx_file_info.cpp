#include "tensor_models/onnx/onnx_file_info.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>

#include "tensor/element_type.h"
#include "tensor/host_tensor.h"

namespace pier::tensor_models {
namespace {

// A protobuf message's fields, one at a time (wire types 0, 1, 2 and 5; groups are not used
// by ONNX and end the walk as malformed).
class WireReader {
 public:
  explicit WireReader(std::string_view bytes) : bytes_(bytes) {}

  struct Field {
    uint32_t number = 0;
    uint32_t wire_type = 0;
    uint64_t varint = 0;       // wire type 0
    std::string_view payload;  // wire type 2
  };

  bool done() const { return pos_ >= bytes_.size(); }
  bool failed() const { return failed_; }

  std::optional<Field> Next() {
    Field field;
    std::optional<uint64_t> key = Varint();
    if (!key) return Fail();
    field.number = static_cast<uint32_t>(*key >> 3);
    field.wire_type = static_cast<uint32_t>(*key & 7);
    switch (field.wire_type) {
      case 0: {
        std::optional<uint64_t> v = Varint();
        if (!v) return Fail();
        field.varint = *v;
        break;
      }
      case 1:
        if (bytes_.size() - pos_ < 8) return Fail();
        pos_ += 8;
        break;
      case 5:
        if (bytes_.size() - pos_ < 4) return Fail();
        pos_ += 4;
        break;
      case 2: {
        std::optional<uint64_t> length = Varint();
        if (!length || *length > bytes_.size() - pos_) return Fail();
        field.payload = bytes_.substr(pos_, *length);
        pos_ += *length;
        break;
      }
      default:
        return Fail();
    }
    return field;
  }

  std::optional<uint64_t> Varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= bytes_.size()) return std::nullopt;
      const uint8_t byte = static_cast<uint8_t>(bytes_[pos_++]);
      value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    return std::nullopt;
  }

 private:
  std::nullopt_t Fail() {
    failed_ = true;
    return std::nullopt;
  }
  std::string_view bytes_;
  size_t pos_ = 0;
  bool failed_ = false;
};

// Bytes per element of an ONNX TensorProto data type (0: unknown or variable).
uint64_t OnnxElementBytes(uint64_t data_type) {
  switch (data_type) {
    case 1:
      return 4;  // FLOAT
    case 2:
      return 1;  // UINT8
    case 3:
      return 1;  // INT8
    case 4:
      return 2;  // UINT16
    case 5:
      return 2;  // INT16
    case 6:
      return 4;  // INT32
    case 7:
      return 8;  // INT64
    case 9:
      return 1;  // BOOL
    case 10:
      return 2;  // FLOAT16
    case 11:
      return 8;  // DOUBLE
    case 12:
      return 4;  // UINT32
    case 13:
      return 8;  // UINT64
    case 14:
      return 8;  // COMPLEX64
    case 15:
      return 16;  // COMPLEX128
    case 16:
      return 2;  // BFLOAT16
    default:
      return 0;
  }
}

// a * b, or the largest uint64_t when that overflows (a hostile file's dimensions must not wrap
// around to a small size).
uint64_t SaturatingProduct(uint64_t a, uint64_t b) {
  uint64_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? std::numeric_limits<uint64_t>::max() : product;
}

// An initializer's bytes: its dims' product times its element size (strings: their bytes).
std::optional<uint64_t> TensorProtoBytes(std::string_view tensor) {
  WireReader reader(tensor);
  uint64_t elements = 1;
  uint64_t data_type = 0;
  uint64_t string_bytes = 0;
  while (!reader.done()) {
    std::optional<WireReader::Field> field = reader.Next();
    if (!field) return std::nullopt;
    if (field->number == 1) {  // dims: packed or one per field
      if (field->wire_type == 0) {
        elements = SaturatingProduct(elements, field->varint);
      } else if (field->wire_type == 2) {
        WireReader dims(field->payload);
        while (!dims.done()) {
          std::optional<uint64_t> dim = dims.Varint();
          if (!dim) return std::nullopt;
          elements = SaturatingProduct(elements, *dim);
        }
      }
    } else if (field->number == 2 && field->wire_type == 0) {
      data_type = field->varint;
    } else if (field->number == 6 && field->wire_type == 2) {  // string_data
      string_bytes += field->payload.size();
    }
  }
  if (data_type == 8) return string_bytes;
  return SaturatingProduct(elements, OnnxElementBytes(data_type));
}

// A graph input (ValueInfoProto): its name, and whether a dimension past the first is open
// (type = 2 -> tensor_type = 1 -> shape = 2 -> dim = 1 -> dim_value = 1 | dim_param = 2).
struct GraphInput {
  std::string_view name;
  bool open_inner_dim = false;
};

std::optional<std::string_view> SubMessage(std::string_view message, uint32_t number) {
  WireReader reader(message);
  while (!reader.done()) {
    std::optional<WireReader::Field> field = reader.Next();
    if (!field) return std::nullopt;
    if (field->number == number && field->wire_type == 2) return field->payload;
  }
  return std::nullopt;
}

std::optional<GraphInput> ReadGraphInput(std::string_view value_info) {
  GraphInput input;
  WireReader reader(value_info);
  std::string_view type;
  while (!reader.done()) {
    std::optional<WireReader::Field> field = reader.Next();
    if (!field) return std::nullopt;
    if (field->number == 1 && field->wire_type == 2) input.name = field->payload;
    if (field->number == 2 && field->wire_type == 2) type = field->payload;
  }
  std::optional<std::string_view> tensor = SubMessage(type, 1);
  std::optional<std::string_view> shape = tensor ? SubMessage(*tensor, 2) : std::nullopt;
  if (!shape) return input;  // not a tensor, or no shape at all: nothing to say
  WireReader dims(*shape);
  int index = 0;
  while (!dims.done()) {
    std::optional<WireReader::Field> dim = dims.Next();
    if (!dim) return std::nullopt;
    if (dim->number != 1 || dim->wire_type != 2) continue;
    bool fixed = false;
    WireReader parts(dim->payload);
    while (!parts.done()) {
      std::optional<WireReader::Field> part = parts.Next();
      if (!part) return std::nullopt;
      if (part->number == 1 && part->wire_type == 0) fixed = true;
    }
    if (index > 0 && !fixed) input.open_inner_dim = true;
    ++index;
  }
  return input;
}

// An initializer's name (TensorProto field 8).
std::string_view TensorProtoName(std::string_view tensor) {
  WireReader reader(tensor);
  while (!reader.done()) {
    std::optional<WireReader::Field> field = reader.Next();
    if (!field) break;
    if (field->number == 8 && field->wire_type == 2) return field->payload;
  }
  return {};
}

Status NotOnnx(std::string_view why) {
  return DataLossError("not an ONNX model: " + std::string(why));
}

}  // namespace

Result<OnnxFileInfo> ParseOnnxFileInfo(std::string_view bytes) {
  OnnxFileInfo info;
  info.file_bytes = bytes.size();
  std::string producer_name;
  std::string producer_version;
  bool has_graph = false;
  WireReader model(bytes);
  while (!model.done()) {
    std::optional<WireReader::Field> field = model.Next();
    if (!field) return NotOnnx("its protobuf is malformed or truncated");
    switch (field->number) {
      case 1:  // ir_version
        if (field->wire_type == 0) info.ir_version = static_cast<int64_t>(field->varint);
        break;
      case 2:  // producer_name
        if (field->wire_type == 2) producer_name = std::string(field->payload);
        break;
      case 3:  // producer_version
        if (field->wire_type == 2) producer_version = std::string(field->payload);
        break;
      case 7: {  // graph
        if (field->wire_type != 2) return NotOnnx("its graph field is not a message");
        has_graph = true;
        WireReader graph(field->payload);
        std::vector<std::string_view> initializer_names;
        std::vector<GraphInput> inputs;
        while (!graph.done()) {
          std::optional<WireReader::Field> g = graph.Next();
          if (!g) return NotOnnx("its graph is malformed or truncated");
          if (g->number == 1 && g->wire_type == 2) ++info.nodes;
          if (g->number == 5 && g->wire_type == 2) {  // initializer
            std::optional<uint64_t> tensor_bytes = TensorProtoBytes(g->payload);
            if (!tensor_bytes) return NotOnnx("an initializer is malformed");
            ++info.initializers;
            info.parameter_bytes =
                *tensor_bytes > std::numeric_limits<uint64_t>::max() - info.parameter_bytes
                    ? std::numeric_limits<uint64_t>::max()
                    : info.parameter_bytes + *tensor_bytes;
            initializer_names.push_back(TensorProtoName(g->payload));
          }
          if (g->number == 11 && g->wire_type == 2) {  // input
            std::optional<GraphInput> input = ReadGraphInput(g->payload);
            if (!input) return NotOnnx("a graph input is malformed");
            inputs.push_back(*input);
          }
        }
        for (const GraphInput& input : inputs) {
          if (!input.open_inner_dim) continue;
          if (std::find(initializer_names.begin(), initializer_names.end(), input.name) !=
              initializer_names.end()) {
            continue;
          }
          info.inputs_with_open_inner_dims.emplace_back(input.name);
        }
        break;
      }
      case 8: {  // opset_import: {domain = 1, version = 2}
        if (field->wire_type != 2) break;
        WireReader opset(field->payload);
        std::string_view domain;
        int64_t version = 0;
        while (!opset.done()) {
          std::optional<WireReader::Field> o = opset.Next();
          if (!o) return NotOnnx("an opset_import is malformed");
          if (o->number == 1 && o->wire_type == 2) domain = o->payload;
          if (o->number == 2 && o->wire_type == 0) version = static_cast<int64_t>(o->varint);
        }
        if (domain.empty() || domain == "ai.onnx") info.opset = version;
        break;
      }
      case 14: {  // metadata_props: StringStringEntryProto {key = 1, value = 2}
        if (field->wire_type != 2) break;
        WireReader entry(field->payload);
        std::string key;
        std::string value;
        while (!entry.done()) {
          std::optional<WireReader::Field> e = entry.Next();
          if (!e) return NotOnnx("a metadata_props entry is malformed");
          if (e->number == 1 && e->wire_type == 2) key = std::string(e->payload);
          if (e->number == 2 && e->wire_type == 2) value = std::string(e->payload);
        }
        info.metadata[key] = std::move(value);
        break;
      }
      default:
        break;
    }
  }
  if (!has_graph || info.ir_version <= 0) return NotOnnx("it has no graph or IR version");
  info.producer = producer_name;
  if (!producer_version.empty())
    info.producer += (info.producer.empty() ? "" : " ") + producer_version;
  return info;
}

Result<OnnxFileInfo> ReadOnnxFileInfo(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return NotFoundError("cannot read " + path);
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  Result<OnnxFileInfo> info = ParseOnnxFileInfo(bytes);
  if (!info.ok()) return Status(info.status().code(), path + ": " + info.status().message());
  return info;
}

}  // namespace pier::tensor_models
