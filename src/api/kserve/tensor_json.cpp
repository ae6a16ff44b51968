#include "api/kserve/tensor_json.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "api/kserve/kserve_api.h"
#include "tensor/float16.h"
#include "tensor_models/batch_tensors.h"

namespace pier::api {
namespace {

using Json = nlohmann::json;
using tensor_models::AppendBytesElement;

template <typename T>
void Put(std::string& out, T value) {
  char raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));  // x86-64: little-endian, as the binary form is
  out.append(raw, sizeof(T));
}

template <typename T>
T Get(const std::string& bytes, size_t i) {
  T value;
  std::memcpy(&value, bytes.data() + i * sizeof(T), sizeof(T));
  return value;
}

// `data`'s leaves, row-major; false when something other than a list holds them.
bool Flatten(const Json& data, std::vector<const Json*>* out) {
  if (!data.is_array()) return false;
  for (const Json& item : data) {
    if (item.is_array()) {
      if (!Flatten(item, out)) return false;
    } else {
      out->push_back(&item);
    }
  }
  return true;
}

// A value as a refusal shows it: numbers and bools as written, strings short, else its kind.
std::string Shown(const Json& value) {
  if (value.is_number() || value.is_boolean()) return value.dump();
  if (value.is_string() && value.get_ref<const std::string&>().size() <= 32) {
    return value.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  return std::string("a ") + value.type_name();
}

struct IntegerRange {
  int64_t low;
  uint64_t high;
};

IntegerRange RangeOf(ElementType type) {
  switch (type) {
    case ElementType::kUint8:
      return {0, 255};
    case ElementType::kUint16:
      return {0, 65535};
    case ElementType::kUint32:
      return {0, 4294967295u};
    case ElementType::kUint64:
      return {0, std::numeric_limits<uint64_t>::max()};
    case ElementType::kInt8:
      return {-128, 127};
    case ElementType::kInt16:
      return {-32768, 32767};
    case ElementType::kInt32:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    default:
      return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  }
}

// Where element `i` of an input's data is, for a refusal: built only when one is made (a
// string per element cost more than the parse of the number itself).
struct Where {
  const std::string& prefix;
  size_t i;
  std::string Text() const { return prefix + "data[" + std::to_string(i) + "]"; }
};

// One integer element, appended in `type`'s width.
Status PutInteger(std::string& out, ElementType type, const Json& value, const Where& at) {
  if (!value.is_number_integer()) {
    const std::string where = at.Text();
    const std::string name(ElementTypeName(type));
    return InvalidArgumentError(where + " is " + Shown(value) + ": " + name + " takes integers" +
                                (value.is_number_float() ? " only" : ""));
  }
  const IntegerRange range = RangeOf(type);
  const bool negative = !value.is_number_unsigned() && value.get<int64_t>() < 0;
  const bool in_range =
      negative ? value.get<int64_t>() >= range.low : value.get<uint64_t>() <= range.high;
  if (!in_range) {
    const std::string where = at.Text();
    const std::string name(ElementTypeName(type));
    return InvalidArgumentError(where + " is " + value.dump() + ": out of " + name + "'s range [" +
                                std::to_string(range.low) + ", " + std::to_string(range.high) +
                                "]");
  }
  switch (type) {
    case ElementType::kUint8:
      Put(out, static_cast<uint8_t>(value.get<uint64_t>()));
      break;
    case ElementType::kUint16:
      Put(out, static_cast<uint16_t>(value.get<uint64_t>()));
      break;
    case ElementType::kUint32:
      Put(out, static_cast<uint32_t>(value.get<uint64_t>()));
      break;
    case ElementType::kUint64:
      Put(out, value.get<uint64_t>());
      break;
    case ElementType::kInt8:
      Put(out, static_cast<int8_t>(value.get<int64_t>()));
      break;
    case ElementType::kInt16:
      Put(out, static_cast<int16_t>(value.get<int64_t>()));
      break;
    case ElementType::kInt32:
      Put(out, static_cast<int32_t>(value.get<int64_t>()));
      break;
    default:
      Put(out, value.get<int64_t>());
      break;
  }
  return Status::Ok();
}

// One floating-point element: JSON numbers (integers too), rounded to nearest even into the
// type; a value the type cannot hold finitely is refused rather than sent as infinity.
Status PutFloat(std::string& out, ElementType type, const Json& value, const Where& at) {
  if (!value.is_number()) {
    return InvalidArgumentError(at.Text() + " is " + Shown(value) + ": " +
                                std::string(ElementTypeName(type)) + " takes numbers");
  }
  const double v = value.get<double>();
  bool finite = std::isfinite(v);
  if (type == ElementType::kFp64) {
    Put(out, v);
  } else {
    const float f = static_cast<float>(v);  // round to nearest even
    finite = finite && std::isfinite(f);
    if (type == ElementType::kFp32) {
      Put(out, f);
    } else if (type == ElementType::kFp16) {
      const uint16_t h = Fp32ToFp16(f);
      finite = finite && (h & 0x7c00u) != 0x7c00u;
      Put(out, h);
    } else {
      const uint16_t b = Fp32ToBf16(f);
      finite = finite && (b & 0x7f80u) != 0x7f80u;
      Put(out, b);
    }
  }
  if (!finite) {
    return InvalidArgumentError(at.Text() + " is " + value.dump() + ": out of " +
                                std::string(ElementTypeName(type)) + "'s finite range");
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> TensorBytesFromJson(std::string_view input, ElementType type,
                                        const std::vector<int64_t>& shape, const Json& data) {
  const std::string prefix = "input '" + std::string(input) + "': ";
  std::vector<const Json*> values;
  if (!Flatten(data, &values)) {
    return InvalidArgumentError(prefix + "`data` must be a list (flat or nested, row-major)");
  }
  const int64_t count = ElementCount(shape);
  if (count < 0 || static_cast<uint64_t>(count) != values.size()) {
    return InvalidArgumentError(prefix + "data holds " + std::to_string(values.size()) +
                                " values, shape " + ShapeText(shape) + " needs " +
                                std::to_string(count));
  }
  std::string out;
  if (type != ElementType::kBytes) out.reserve(values.size() * ElementSize(type));
  for (size_t i = 0; i < values.size(); ++i) {
    const Json& value = *values[i];
    const Where where{prefix, i};
    switch (type) {
      case ElementType::kBool:
        if (!value.is_boolean()) {
          return InvalidArgumentError(where.Text() + " is " + Shown(value) +
                                      ": BOOL takes true or false");
        }
        out.push_back(value.get<bool>() ? 1 : 0);
        break;
      case ElementType::kBytes:
        if (!value.is_string()) {
          return InvalidArgumentError(where.Text() + " is " + Shown(value) +
                                      ": BYTES takes strings");
        }
        AppendBytesElement(out, value.get_ref<const std::string&>());
        break;
      case ElementType::kFp16:
      case ElementType::kBf16:
      case ElementType::kFp32:
      case ElementType::kFp64:
        PIER_RETURN_IF_ERROR(PutFloat(out, type, value, where));
        break;
      default:
        PIER_RETURN_IF_ERROR(PutInteger(out, type, value, where));
        break;
    }
  }
  return out;
}

Json TensorBytesToJson(const HostTensor& tensor) {
  Json out = Json::array();
  const std::string& b = tensor.bytes;
  if (tensor.type == ElementType::kBytes) {
    std::vector<std::string> strings;
    ParseBinaryStrings(b, &strings, std::numeric_limits<size_t>::max());
    for (std::string& s : strings) out.push_back(std::move(s));
    return out;
  }
  const size_t n = b.size() / static_cast<size_t>(ElementSize(tensor.type));
  for (size_t i = 0; i < n; ++i) {
    switch (tensor.type) {
      case ElementType::kBool:
        out.push_back(b[i] != 0);
        break;
      case ElementType::kUint8:
        out.push_back(Get<uint8_t>(b, i));
        break;
      case ElementType::kUint16:
        out.push_back(Get<uint16_t>(b, i));
        break;
      case ElementType::kUint32:
        out.push_back(Get<uint32_t>(b, i));
        break;
      case ElementType::kUint64:
        out.push_back(Get<uint64_t>(b, i));
        break;
      case ElementType::kInt8:
        out.push_back(Get<int8_t>(b, i));
        break;
      case ElementType::kInt16:
        out.push_back(Get<int16_t>(b, i));
        break;
      case ElementType::kInt32:
        out.push_back(Get<int32_t>(b, i));
        break;
      case ElementType::kInt64:
        out.push_back(Get<int64_t>(b, i));
        break;
      case ElementType::kFp16:
        out.push_back(Fp16ToFp32(Get<uint16_t>(b, i)));
        break;
      case ElementType::kBf16:
        out.push_back(Bf16ToFp32(Get<uint16_t>(b, i)));
        break;
      case ElementType::kFp32:
        out.push_back(Get<float>(b, i));
        break;
      case ElementType::kFp64:
        out.push_back(Get<double>(b, i));
        break;
      case ElementType::kBytes:
        break;
    }
  }
  return out;
}

}  // namespace pier::api
