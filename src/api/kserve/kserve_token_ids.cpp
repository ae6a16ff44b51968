#include "api/kserve/kserve_token_ids.h"

#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace pier::api {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kMaskName = "attention_mask";

// Flattens a list of integers (nested lists row-major) into `out`; false on anything else,
// a bare number included: `data` is always a list.
bool FlattenIntegers(const Json& data, std::vector<int64_t>* out) {
  if (!data.is_array()) return false;
  for (const Json& item : data) {
    if (item.is_number_integer()) {
      out->push_back(item.get<int64_t>());
    } else if (!FlattenIntegers(item, out)) {
      return false;
    }
  }
  return true;
}

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;  // [len] or [n, len]
  std::vector<int64_t> values;
};

Result<Tensor> ReadTensor(const Json& input, size_t index, std::string_view binary,
                          size_t* binary_used) {
  const std::string where = "inputs[" + std::to_string(index) + "]";
  if (!input.is_object()) return InvalidArgumentError(where + " must be an object");
  Tensor t;
  t.name =
      input.contains("name") && input["name"].is_string() ? input["name"].get<std::string>() : "";
  const std::string label = "input '" + t.name + "'";
  const std::string datatype = input.contains("datatype") && input["datatype"].is_string()
                                   ? input["datatype"].get<std::string>()
                                   : "";
  if (!IsTokenIdDatatype(datatype)) {
    return InvalidArgumentError(label + " has datatype '" + datatype +
                                "'; token ids are INT32 or INT64");
  }
  if (!input.contains("shape") || !input["shape"].is_array() || input["shape"].empty() ||
      input["shape"].size() > 2) {
    return InvalidArgumentError(label + " needs a shape [len] or [n, len]");
  }
  int64_t count = 1;
  for (const Json& dim : input["shape"]) {
    if (!dim.is_number_integer() || dim.get<int64_t>() < 1 || dim.get<int64_t>() > (1 << 20)) {
      return InvalidArgumentError(label + ": each dimension of its shape is 1 to 1048576");
    }
    t.shape.push_back(dim.get<int64_t>());
    count *= dim.get<int64_t>();
  }
  if (count > (int64_t{1} << 22)) {
    return InvalidArgumentError(label + ": more than 4194304 token ids in one request");
  }
  const Json* parameters = input.contains("parameters") && input["parameters"].is_object()
                               ? &input["parameters"]
                               : nullptr;
  if (parameters != nullptr && parameters->contains("binary_data_size")) {
    const Json& size = (*parameters)["binary_data_size"];
    const size_t width = datatype == "INT64" ? 8 : 4;
    if (!size.is_number_unsigned() || size.get<uint64_t>() > binary.size() - *binary_used ||
        size.get<uint64_t>() != static_cast<uint64_t>(count) * width) {
      return InvalidArgumentError(label + ": binary_data_size must be " +
                                  std::to_string(count * static_cast<int64_t>(width)) + " bytes (" +
                                  std::to_string(count) + " x " + std::to_string(width) +
                                  ") within the binary data");
    }
    const char* p = binary.data() + *binary_used;
    for (int64_t i = 0; i < count; ++i, p += width) {
      if (width == 8) {
        int64_t v = 0;
        std::memcpy(&v, p, 8);  // little-endian, as the extension and this machine are
        t.values.push_back(v);
      } else {
        int32_t v = 0;
        std::memcpy(&v, p, 4);
        t.values.push_back(v);
      }
    }
    *binary_used += static_cast<size_t>(size.get<uint64_t>());
  } else {
    if (!input.contains("data") || !FlattenIntegers(input["data"], &t.values)) {
      return InvalidArgumentError(label + " needs `data`: a list of integers");
    }
    if (static_cast<int64_t>(t.values.size()) != count) {
      return InvalidArgumentError(label + " has " + std::to_string(t.values.size()) +
                                  " values for a shape of " + std::to_string(count));
    }
  }
  return t;
}

}  // namespace

bool IsTokenIdDatatype(std::string_view datatype) {
  return datatype == "INT32" || datatype == "INT64";
}

Result<std::vector<std::vector<int32_t>>> ReadTokenIdInputs(const nlohmann::json& inputs,
                                                            std::string_view binary) {
  if (!inputs.is_array() || inputs.empty() || inputs.size() > 2) {
    return InvalidArgumentError(
        "token ids are one INT32/INT64 input, optionally with an attention_mask input");
  }
  // Read in input order: that is the order of their binary data.
  size_t binary_used = 0;
  std::vector<Tensor> tensors;
  for (size_t i = 0; i < inputs.size(); ++i) {
    PIER_ASSIGN_OR_RETURN(Tensor t, ReadTensor(inputs[i], i, binary, &binary_used));
    tensors.push_back(std::move(t));
  }
  // The mask is the input named attention_mask, first or second; the ids are the other one.
  const bool first_is_mask = tensors[0].name == kMaskName;
  if (tensors.size() == 1 && first_is_mask) {
    return InvalidArgumentError(
        "input 'attention_mask' came alone: send the token ids (an INT32/INT64 input such as "
        "'input_ids') with it");
  }
  std::optional<Tensor> mask;
  if (tensors.size() == 2) {
    const bool second_is_mask = tensors[1].name == kMaskName;
    if (first_is_mask == second_is_mask) {
      return InvalidArgumentError("inputs '" + tensors[0].name + "' and '" + tensors[1].name +
                                  "': token ids and, beside them, only 'attention_mask' is taken");
    }
    mask = std::move(tensors[first_is_mask ? 0 : 1]);
    if (first_is_mask) tensors[0] = std::move(tensors[1]);
    tensors.resize(1);
  }
  const Tensor& ids = tensors[0];
  if (mask.has_value() && mask->shape != ids.shape) {
    return InvalidArgumentError("input 'attention_mask' must have the shape of input '" + ids.name +
                                "'");
  }
  const int64_t rows = ids.shape.size() == 2 ? ids.shape[0] : 1;
  const int64_t len = ids.shape.back();
  std::vector<std::vector<int32_t>> lists(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < len; ++i) {
      const size_t at = static_cast<size_t>(r * len + i);
      if (mask.has_value()) {
        const int64_t m = mask->values[at];
        if (m != 0 && m != 1) {
          return InvalidArgumentError("input 'attention_mask' holds " + std::to_string(m) +
                                      "; only 0 (padding) and 1 (a token)");
        }
        if (m == 0) continue;
      }
      const int64_t id = ids.values[at];
      if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
        return InvalidArgumentError("input '" + ids.name + "' row " + std::to_string(r) +
                                    " holds token id " + std::to_string(id));
      }
      lists[static_cast<size_t>(r)].push_back(static_cast<int32_t>(id));
    }
    if (lists[static_cast<size_t>(r)].empty()) {
      return InvalidArgumentError("input '" + ids.name + "' row " + std::to_string(r) +
                                  " has no token (its attention_mask is all 0)");
    }
  }
  return lists;
}

}  // namespace pier::api
