#include "api/kserve/tensor_infer_request.h"

#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "api/kserve/tensor_json.h"

namespace pier::api {
namespace {

using Json = nlohmann::json;

std::string StringField(const Json& object, const char* key) {
  return object.is_object() && object.contains(key) && object[key].is_string()
             ? object[key].get<std::string>()
             : std::string();
}

std::string Shown(const Json& value) {
  if (value.is_number() || value.is_boolean()) return value.dump();
  return std::string("a ") + value.type_name();
}

// `object`'s "parameters" when it is an object; null when absent or JSON null.
Result<const Json*> ParametersOf(const Json& object, const std::string& what) {
  if (!object.contains("parameters") || object["parameters"].is_null()) return nullptr;
  const Json& parameters = object["parameters"];
  if (!parameters.is_object()) return InvalidArgumentError(what + "parameters must be an object");
  return &parameters;
}

std::string AllTypeNames() {
  std::string names;
  for (int t = 0; t <= static_cast<int>(ElementType::kBytes); ++t) {
    if (!names.empty()) names += ", ";
    names += ElementTypeName(static_cast<ElementType>(t));
  }
  return names;
}

// BYTES elements in binary form: exactly `count` whole ones, or why not.
Status CheckBinaryStrings(std::string_view bytes, int64_t count, const std::string& prefix) {
  for (int64_t i = 0; i < count; ++i) {
    if (bytes.size() < 4) {
      return InvalidArgumentError(prefix + "binary data holds " + std::to_string(i) +
                                  " BYTES elements, shape needs " + std::to_string(count));
    }
    uint32_t length = 0;
    std::memcpy(&length, bytes.data(), 4);  // little-endian
    bytes.remove_prefix(4);
    if (length > bytes.size()) {
      return InvalidArgumentError(prefix + "BYTES element " + std::to_string(i) + " says " +
                                  std::to_string(length) + " bytes, " +
                                  std::to_string(bytes.size()) + " remain");
    }
    bytes.remove_prefix(length);
  }
  if (!bytes.empty()) {
    return InvalidArgumentError(prefix + "binary data holds " + std::to_string(bytes.size()) +
                                " bytes more than the shape's " + std::to_string(count) +
                                " BYTES elements");
  }
  return Status::Ok();
}

// One input; `*offset` is where its binary data starts in `binary` (input order), moved past it.
Result<HostTensor> ReadInput(const Json& input, size_t index, std::string_view binary,
                             size_t* offset) {
  if (!input.is_object()) {
    return InvalidArgumentError("inputs[" + std::to_string(index) + "] must be an object");
  }
  HostTensor tensor;
  if (!input.contains("name") || !input["name"].is_string() ||
      input["name"].get_ref<const std::string&>().empty()) {
    return InvalidArgumentError("inputs[" + std::to_string(index) + "] needs a `name`");
  }
  tensor.name = input["name"].get<std::string>();
  const std::string prefix = "input '" + tensor.name + "': ";
  if (!input.contains("datatype") || !input["datatype"].is_string()) {
    return InvalidArgumentError(prefix + "needs a `datatype` (" + AllTypeNames() + ")");
  }
  const std::string datatype = input["datatype"].get<std::string>();
  std::optional<ElementType> type = ParseElementType(datatype);
  if (!type.has_value()) {
    return InvalidArgumentError(prefix + "unknown datatype '" + datatype +
                                "' (KServe's: " + AllTypeNames() + ")");
  }
  tensor.type = *type;
  if (!input.contains("shape") || !input["shape"].is_array()) {
    return InvalidArgumentError(prefix + "needs a `shape`: a list of dimensions");
  }
  for (const Json& dim : input["shape"]) {
    if (!dim.is_number_integer() || dim.get<int64_t>() < 0) {
      return InvalidArgumentError(prefix + "shape has " + Shown(dim) +
                                  ": each dimension is an integer, 0 or more");
    }
    tensor.shape.push_back(dim.get<int64_t>());
  }
  const int64_t count = ElementCount(tensor.shape);
  if (count < 0)
    return InvalidArgumentError(prefix + "shape " + ShapeText(tensor.shape) + " is too large");
  PIER_ASSIGN_OR_RETURN(const Json* parameters, ParametersOf(input, prefix));
  const Json* size = parameters != nullptr && parameters->contains("binary_data_size")
                         ? &(*parameters)["binary_data_size"]
                         : nullptr;
  if (size != nullptr && input.contains("data")) {
    return InvalidArgumentError(prefix +
                                "has both `data` and binary data (binary_data_size; over gRPC: "
                                "contents and raw_input_contents): send its values once");
  }
  if (size == nullptr) {
    if (!input.contains("data")) {
      return InvalidArgumentError(prefix + "needs `data` or binary data (binary_data_size)");
    }
    PIER_ASSIGN_OR_RETURN(
        tensor.bytes, TensorBytesFromJson(tensor.name, tensor.type, tensor.shape, input["data"]));
    return tensor;
  }
  if (!size->is_number_unsigned()) {
    return InvalidArgumentError(prefix + "binary_data_size must be an integer, 0 or more; got " +
                                Shown(*size));
  }
  const uint64_t bytes = size->get<uint64_t>();
  if (bytes > binary.size() - *offset) {
    return InvalidArgumentError(prefix + "binary_data_size " + std::to_string(bytes) +
                                " goes past the binary data (" + std::to_string(binary.size()) +
                                " bytes after the JSON header, " + std::to_string(*offset) +
                                " of them taken by the inputs before it)");
  }
  std::string_view mine = binary.substr(*offset, bytes);
  *offset += bytes;
  if (tensor.type == ElementType::kBytes) {
    PIER_RETURN_IF_ERROR(CheckBinaryStrings(mine, count, prefix));
  } else {
    // count is at most 2^62 (ElementCount), so count x size may not fit in 64 bits.
    const auto element_size = static_cast<uint64_t>(ElementSize(tensor.type));
    if (static_cast<uint64_t>(count) > std::numeric_limits<uint64_t>::max() / element_size) {
      return InvalidArgumentError(prefix + "shape " + ShapeText(tensor.shape) + " is too large");
    }
    const uint64_t want = static_cast<uint64_t>(count) * element_size;
    if (bytes != want) {
      return InvalidArgumentError(prefix + "binary_data_size is " + std::to_string(bytes) +
                                  " bytes, shape " + ShapeText(tensor.shape) + " of " + datatype +
                                  " needs " + std::to_string(want));
    }
  }
  tensor.bytes = std::string(mine);
  return tensor;
}

Result<TensorOutputRequest> ReadOutput(const Json& output, size_t index) {
  if (!output.is_object() || !output.contains("name") || !output["name"].is_string()) {
    return InvalidArgumentError("outputs[" + std::to_string(index) + "] needs a `name`");
  }
  TensorOutputRequest out;
  out.name = output["name"].get<std::string>();
  const std::string prefix = "output '" + out.name + "': ";
  PIER_ASSIGN_OR_RETURN(const Json* parameters, ParametersOf(output, prefix));
  if (parameters == nullptr) return out;
  if (parameters->contains("binary_data")) {
    const Json& binary = (*parameters)["binary_data"];
    if (!binary.is_boolean()) {
      return InvalidArgumentError(prefix + "binary_data must be true or false; got " +
                                  Shown(binary));
    }
    out.binary = binary.get<bool>();
  }
  if (parameters->contains("classification")) {
    const Json& k = (*parameters)["classification"];
    if (!k.is_number_unsigned() || k.get<uint64_t>() < 1 || k.get<uint64_t>() > (1u << 30)) {
      return InvalidArgumentError(prefix +
                                  "classification must be an integer, 1 or more (the "
                                  "classes to give); got " +
                                  Shown(k));
    }
    out.classification = k.get<int64_t>();
  }
  return out;
}

}  // namespace

Result<TensorInferRequest> ReadTensorInferRequest(std::string_view model, const Json& request,
                                                  std::string_view binary) {
  if (!request.is_object()) {
    return InvalidArgumentError("the inference request must be a JSON object");
  }
  TensorInferRequest out;
  if (!request.contains("inputs") || !request["inputs"].is_array() || request["inputs"].empty()) {
    return InvalidArgumentError("model '" + std::string(model) +
                                "': `inputs` must be a list of the model's input tensors (GET "
                                "/v2/models/" +
                                std::string(model) + " names them)");
  }
  size_t offset = 0;
  for (size_t i = 0; i < request["inputs"].size(); ++i) {
    PIER_ASSIGN_OR_RETURN(HostTensor input, ReadInput(request["inputs"][i], i, binary, &offset));
    out.inputs.push_back(std::move(input));
  }
  if (offset != binary.size()) {
    return InvalidArgumentError(
        "the binary data after the JSON header is " + std::to_string(binary.size()) +
        " bytes but the inputs' binary_data_size add up to " + std::to_string(offset) +
        " (Inference-Header-Content-Length is the JSON header's length)");
  }
  if (request.contains("outputs") && !request["outputs"].is_null()) {
    if (!request["outputs"].is_array()) return InvalidArgumentError("outputs must be a list");
    for (size_t i = 0; i < request["outputs"].size(); ++i) {
      PIER_ASSIGN_OR_RETURN(TensorOutputRequest output, ReadOutput(request["outputs"][i], i));
      out.outputs.push_back(std::move(output));
    }
  }
  PIER_ASSIGN_OR_RETURN(const Json* parameters, ParametersOf(request, ""));
  if (parameters != nullptr) {
    if (parameters->contains("binary_data_output")) {
      const Json& binary_output = (*parameters)["binary_data_output"];
      if (!binary_output.is_boolean()) {
        return InvalidArgumentError("parameter binary_data_output must be true or false; got " +
                                    Shown(binary_output));
      }
      out.binary_output = binary_output.get<bool>();
    }
    if (parameters->contains("priority")) {
      const Json& priority = (*parameters)["priority"];
      if (!priority.is_number_unsigned()) {
        return InvalidArgumentError(
            "parameter priority must be an integer, 0 or more (1 is the highest); got " +
            Shown(priority));
      }
      out.priority = priority.get<uint64_t>();
    }
  }
  out.id = StringField(request, "id");
  return out;
}

}  // namespace pier::api
