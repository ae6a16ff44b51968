#include "tensor_models/input_pad.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "common/setting_text.h"
#include "tensor/float16.h"

namespace pier::tensor_models {
namespace {

template <typename T>
std::string ElementOf(T value) {
  std::string bytes(sizeof(T), '\0');
  std::memcpy(bytes.data(), &value, sizeof(T));  // little-endian hosts only, as HostTensor
  return bytes;
}

// `value` as an integer of type T when it is a whole number in T's range.
template <typename T>
Result<std::string> IntegerElement(double value, ElementType type) {
  // The range's ends as doubles: 2^63 and 2^64 are exact, so `< max + 1` holds the boundary.
  const double low = static_cast<double>(std::numeric_limits<T>::min());
  const double above = static_cast<double>(std::numeric_limits<T>::max()) + 1.0;
  if (value != std::trunc(value) || value < low || value >= above) {
    return InvalidArgumentError("pad value " + ExactDecimal(value) + " is not a whole number in " +
                                std::string(ElementTypeName(type)) + "'s range");
  }
  return ElementOf(static_cast<T>(value));
}

}  // namespace

bool InputPad::any() const {
  for (bool p : padded) {
    if (p) return true;
  }
  return false;
}

Result<std::string> PadElementBytes(ElementType type, double value) {
  const std::string name(ElementTypeName(type));
  if (!std::isfinite(value)) {
    return InvalidArgumentError("pad value " + ExactDecimal(value) + " is not a finite number");
  }
  const auto not_finite = [&] {
    return InvalidArgumentError("pad value " + ExactDecimal(value) + " is out of " + name +
                                "'s range");
  };
  switch (type) {
    case ElementType::kBool:
      if (value != 0 && value != 1) {
        return InvalidArgumentError("pad value " + ExactDecimal(value) + " is not a BOOL (0 or 1)");
      }
      return ElementOf<uint8_t>(value == 1 ? 1 : 0);
    case ElementType::kUint8:
      return IntegerElement<uint8_t>(value, type);
    case ElementType::kUint16:
      return IntegerElement<uint16_t>(value, type);
    case ElementType::kUint32:
      return IntegerElement<uint32_t>(value, type);
    case ElementType::kUint64:
      return IntegerElement<uint64_t>(value, type);
    case ElementType::kInt8:
      return IntegerElement<int8_t>(value, type);
    case ElementType::kInt16:
      return IntegerElement<int16_t>(value, type);
    case ElementType::kInt32:
      return IntegerElement<int32_t>(value, type);
    case ElementType::kInt64:
      return IntegerElement<int64_t>(value, type);
    case ElementType::kFp16: {
      const uint16_t h = Fp32ToFp16(static_cast<float>(value));
      if ((h & 0x7c00u) == 0x7c00u || !std::isfinite(static_cast<float>(value))) {
        return not_finite();
      }
      return ElementOf(h);
    }
    case ElementType::kBf16: {
      const uint16_t b = Fp32ToBf16(static_cast<float>(value));
      if ((b & 0x7f80u) == 0x7f80u || !std::isfinite(static_cast<float>(value))) {
        return not_finite();
      }
      return ElementOf(b);
    }
    case ElementType::kFp32: {
      const auto f = static_cast<float>(value);
      if (!std::isfinite(f)) return not_finite();
      return ElementOf(f);
    }
    case ElementType::kFp64:
      return ElementOf(value);
    case ElementType::kBytes:
      break;
  }
  return InvalidArgumentError("a BYTES input cannot be padded (its elements are strings)");
}

Result<std::vector<InputPad>> ResolvePadRules(const TensorModelInfo& info,
                                              const std::map<std::string, PadRule>& rules) {
  std::vector<InputPad> pads(info.inputs.size());
  for (size_t i = 0; i < info.inputs.size(); ++i) {
    pads[i].padded.assign(info.inputs[i].shape.size(), false);
  }
  const bool batchable = info.max_batch_size > 0;
  for (const auto& [name, rule] : rules) {
    size_t i = 0;
    while (i < info.inputs.size() && info.inputs[i].name != name) ++i;
    const std::string where = "inputs: '" + name + "': ";
    if (i == info.inputs.size()) {
      return InvalidArgumentError(where + "pad names no input of the model");
    }
    const TensorSpec& spec = info.inputs[i];
    if (rule.axes.empty()) return InvalidArgumentError(where + "pad names no axes");
    for (int64_t axis : rule.axes) {
      const std::string at = where + "pad axis " + std::to_string(axis) + ": ";
      if (axis < 0 || axis >= static_cast<int64_t>(spec.shape.size())) {
        return InvalidArgumentError(at + "the input has " + std::to_string(spec.shape.size()) +
                                    " dimensions (" + ShapeText(spec.shape) + ")");
      }
      if (axis == 0 && batchable) {
        return InvalidArgumentError(at + "dimension 0 is the batch (pad axes start at 1)");
      }
      if (spec.shape[axis] >= 0) {
        return InvalidArgumentError(at + "that dimension is fixed at " +
                                    std::to_string(spec.shape[axis]) + " (" +
                                    ShapeText(spec.shape) + ")");
      }
      pads[i].padded[axis] = true;
    }
    Result<std::string> element = PadElementBytes(spec.type, rule.value);
    if (!element.ok()) return InvalidArgumentError(where + element.status().message());
    pads[i].element = std::move(*element);
  }
  return pads;
}

}  // namespace pier::tensor_models
