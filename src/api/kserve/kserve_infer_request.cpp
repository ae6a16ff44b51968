#include "api/kserve/kserve_infer_request.h"

#include <string>
#include <utility>

#include "api/kserve/kserve_api.h"
#include "api/kserve/kserve_token_ids.h"

namespace pier::api {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kOutputName = "embedding";

std::string StringField(const Json& object, const char* key) {
  return object.is_object() && object.contains(key) && object[key].is_string()
             ? object[key].get<std::string>()
             : std::string();
}

// A value as a refusal shows it: numbers and bools as written, anything else by its type (a
// string may be long, or not UTF-8 when it came over gRPC).
std::string Shown(const Json& value) {
  if (value.is_number() || value.is_boolean()) return value.dump();
  return std::string("a ") + value.type_name();
}

// The binary_data_size parameter of `input`, or null when it has none.
const Json* BinaryDataSize(const Json& input) {
  if (!input.is_object() || !input.contains("parameters")) return nullptr;
  const Json& parameters = input["parameters"];
  if (!parameters.is_object() || !parameters.contains("binary_data_size")) return nullptr;
  return &parameters["binary_data_size"];
}

// An input whose values come twice is refused rather than one copy silently winning.
Status CheckValuesComeOnce(const Json& inputs) {
  if (!inputs.is_array()) return Status::Ok();
  for (const Json& input : inputs) {
    if (input.is_object() && input.contains("data") && BinaryDataSize(input) != nullptr) {
      return InvalidArgumentError("input '" + StringField(input, "name") +
                                  "' has both `data` and binary data (binary_data_size; over "
                                  "gRPC: contents and raw_input_contents): send its values once");
    }
  }
  return Status::Ok();
}

// Bytes after the JSON header that no input claims mean the header's length or a size is wrong.
// Runs after the inputs were read, so each binary_data_size is a number within `binary`.
Status CheckBinaryIsClaimed(const Json* inputs, size_t binary_bytes) {
  uint64_t claimed = 0;
  if (inputs != nullptr && inputs->is_array()) {
    for (const Json& input : *inputs) {
      if (const Json* size = BinaryDataSize(input)) claimed += size->get<uint64_t>();
    }
  }
  if (claimed == binary_bytes) return Status::Ok();
  return InvalidArgumentError(
      "the binary data after the JSON header is " + std::to_string(binary_bytes) +
      " bytes but the inputs' binary_data_size add up to " + std::to_string(claimed) +
      " (Inference-Header-Content-Length is the JSON header's length)");
}

// The texts of a BYTES tensor given as JSON data: a list, nested lists flattened row-major.
bool FlattenStrings(const Json& data, std::vector<std::string>* out) {
  if (!data.is_array()) return false;
  for (const Json& item : data) {
    if (item.is_string()) {
      out->push_back(item.get<std::string>());
    } else if (!FlattenStrings(item, out)) {
      return false;
    }
  }
  return true;
}

Result<std::vector<std::string>> ReadTexts(std::string_view model, const Json* inputs,
                                           std::string_view binary) {
  if (inputs == nullptr || !inputs->is_array() || inputs->size() != 1) {
    return InvalidArgumentError(
        "model '" + std::string(model) +
        "' takes one input: a BYTES tensor of texts, shape [n] (or token ids: INT32/INT64 "
        "[n, len] with an optional attention_mask)");
  }
  const Json& input = (*inputs)[0];
  if (!input.is_object()) return InvalidArgumentError("inputs[0] must be an object");
  const std::string name = StringField(input, "name");
  const std::string datatype = StringField(input, "datatype");
  std::vector<int64_t> shape;
  if (!input.contains("shape") || !input["shape"].is_array() || input["shape"].size() > 2) {
    return InvalidArgumentError("input '" + name + "' needs a shape [n] or [n, 1]");
  }
  for (const Json& dim : input["shape"]) {
    if (!dim.is_number_integer()) {
      return InvalidArgumentError("input '" + name + "': a shape of integers");
    }
    shape.push_back(dim.get<int64_t>());
  }
  if (!shape.empty() && (shape[0] < 1 || static_cast<uint64_t>(shape[0]) > kMaxInferTexts)) {
    return CheckTextTensor(model, name, datatype, shape, 0);
  }
  if (datatype != "BYTES") {  // before the data, which is then not texts
    return CheckTextTensor(model, name, datatype, shape, 0);
  }
  std::vector<std::string> texts;
  if (const Json* size = BinaryDataSize(input)) {
    if (!size->is_number_unsigned() || size->get<uint64_t>() > binary.size()) {
      return InvalidArgumentError("input '" + name + "': binary_data_size is not within the " +
                                  std::to_string(binary.size()) + " bytes after the JSON header");
    }
    if (!ParseBinaryStrings(binary.substr(0, size->get<size_t>()), &texts)) {
      return InvalidArgumentError(
          "input '" + name + "': its binary data is not a sequence of length-prefixed strings");
    }
  } else if (!input.contains("data") || !FlattenStrings(input["data"], &texts)) {
    return InvalidArgumentError("input '" + name + "' needs `data`: a list of strings");
  }
  PIER_RETURN_IF_ERROR(CheckTextTensor(model, name, datatype, shape, texts.size()));
  return texts;
}

}  // namespace

Result<EmbedInferRequest> ReadEmbedInferRequest(std::string_view model, const Json& request,
                                                std::string_view binary) {
  if (!request.is_object()) {
    return InvalidArgumentError("the inference request must be a JSON object");
  }
  const std::string prefix = "model '" + std::string(model) + "': ";
  EmbedInferRequest out;
  const Json* inputs = request.contains("inputs") ? &request["inputs"] : nullptr;
  if (inputs != nullptr) PIER_RETURN_IF_ERROR(CheckValuesComeOnce(*inputs));
  // Token ids (INT32/INT64, optionally with an attention_mask) instead of texts.
  if (inputs != nullptr && inputs->is_array() && !inputs->empty() &&
      IsTokenIdDatatype(StringField((*inputs)[0], "datatype"))) {
    Result<std::vector<std::vector<int32_t>>> lists = ReadTokenIdInputs(*inputs, binary);
    if (!lists.ok()) return InvalidArgumentError(prefix + lists.status().message());
    if (lists->size() > kMaxInferTexts) {
      return InvalidArgumentError(prefix + "1 to " + std::to_string(kMaxInferTexts) +
                                  " sequences per request");
    }
    out.token_ids = std::move(lists).value();
  } else {
    PIER_ASSIGN_OR_RETURN(out.texts, ReadTexts(model, inputs, binary));
  }
  PIER_RETURN_IF_ERROR(CheckBinaryIsClaimed(inputs, binary.size()));

  // Outputs: only "embedding"; binary when asked.
  const Json no_parameters = Json::object();
  const Json& parameters = request.contains("parameters") && !request["parameters"].is_null()
                               ? request["parameters"]
                               : no_parameters;
  if (!parameters.is_object()) return InvalidArgumentError("parameters must be an object");
  out.binary_output =
      parameters.contains("binary_data_output") && parameters["binary_data_output"] == true;
  if (request.contains("outputs")) {
    if (!request["outputs"].is_array()) return InvalidArgumentError("outputs must be a list");
    for (const Json& output : request["outputs"]) {
      const std::string output_name = StringField(output, "name");
      if (output_name != kOutputName) {
        return InvalidArgumentError("model '" + std::string(model) + "' has no output '" +
                                    output_name + "' (its output is '" + std::string(kOutputName) +
                                    "')");
      }
      if (output.contains("parameters") && output["parameters"].is_object()) {
        const Json& p = output["parameters"];
        if (p.contains("binary_data")) out.binary_output = p["binary_data"] == true;
      }
    }
  }
  if (parameters.contains("truncate")) {
    const Json& truncate = parameters["truncate"];
    if (!truncate.is_boolean()) {
      return InvalidArgumentError("parameter truncate must be true or false; got " +
                                  Shown(truncate));
    }
    out.truncate = truncate.get<bool>();
  }
  if (parameters.contains("priority")) {
    const Json& priority = parameters["priority"];
    if (!priority.is_number_unsigned()) {
      return InvalidArgumentError(
          "parameter priority must be an integer, 0 or more (1 is the highest); got " +
          Shown(priority));
    }
    out.priority = priority.get<uint64_t>();
  }
  out.id = StringField(request, "id");
  return out;
}

}  // namespace pier::api
