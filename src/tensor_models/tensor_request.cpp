#include "tensor_models/tensor_request.h"

#include <string>

#include "tensor_models/batch_tensors.h"

namespace pier::tensor_models {
namespace {

// "'a', 'b'": the names a model declares, for messages.
std::string NameList(const std::vector<TensorSpec>& specs) {
  std::string text;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (i > 0) text += ", ";
    text += "'" + specs[i].name + "'";
  }
  return text.empty() ? "none" : text;
}

int FindSpec(const std::vector<TensorSpec>& specs, std::string_view name) {
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

// Whether `shape` fits `spec`: the same rank, no negative dimension, each fixed dimension
// equal. A batchable model's first dimension is the batch, checked on its own.
bool ShapeFits(const std::vector<int64_t>& spec, const std::vector<int64_t>& shape,
               bool batchable) {
  if (spec.size() != shape.size()) return false;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) return false;
    if (d == 0 && batchable) continue;
    if (spec[d] >= 0 && spec[d] != shape[d]) return false;
  }
  return true;
}

}  // namespace

Status CheckTensorRequest(std::string_view model, const TensorModelInfo& info,
                          const TensorRequest& request) {
  const std::string prefix = "model '" + std::string(model) + "': ";
  const bool batchable = info.max_batch_size > 0;
  std::vector<bool> seen(info.inputs.size(), false);
  int64_t batch = -1;                 // the first input's batch
  const HostTensor* first = nullptr;  // and that input
  for (const HostTensor& input : request.inputs) {
    const int i = FindSpec(info.inputs, input.name);
    if (i < 0) {
      return InvalidArgumentError(prefix + "unknown input '" + input.name + "' (the model takes " +
                                  NameList(info.inputs) + ")");
    }
    if (seen[i]) return InvalidArgumentError(prefix + "input '" + input.name + "' is given twice");
    seen[i] = true;
    const TensorSpec& spec = info.inputs[i];
    const std::string where = prefix + "input '" + input.name + "': ";
    if (input.type != spec.type) {
      return InvalidArgumentError(where + "expected " + std::string(ElementTypeName(spec.type)) +
                                  ", got " + std::string(ElementTypeName(input.type)));
    }
    if (!ShapeFits(spec.shape, input.shape, batchable) || (batchable && input.shape.empty())) {
      return InvalidArgumentError(where + "expected shape " + ShapeText(spec.shape) + ", got " +
                                  ShapeText(input.shape));
    }
    if (batchable) {
      const int64_t b = input.shape[0];
      if (b < 1) {
        return InvalidArgumentError(where + "batch " + std::to_string(b) +
                                    ": the first dimension (the batch) must be at least 1");
      }
      if (b > info.max_batch_size) {
        return InvalidArgumentError(where + "batch " + std::to_string(b) +
                                    " is above the model's max_batch_size " +
                                    std::to_string(info.max_batch_size));
      }
      if (first == nullptr) {
        first = &input;
        batch = b;
      } else if (b != batch) {
        return InvalidArgumentError(where + "batch " + std::to_string(b) + ", but input '" +
                                    first->name + "' has batch " + std::to_string(batch) +
                                    ": every input has the same first dimension");
      }
    }
    Status data = CheckTensorData(input);
    if (!data.ok()) return InvalidArgumentError(where + data.message());
  }
  for (size_t i = 0; i < info.inputs.size(); ++i) {
    if (!seen[i]) {
      return InvalidArgumentError(prefix + "input '" + info.inputs[i].name + "' is missing");
    }
  }
  std::vector<bool> asked(info.outputs.size(), false);
  for (const std::string& name : request.outputs) {
    const int o = FindSpec(info.outputs, name);
    if (o < 0) {
      return InvalidArgumentError(prefix + "unknown output '" + name + "' (the model gives " +
                                  NameList(info.outputs) + ")");
    }
    if (asked[o]) return InvalidArgumentError(prefix + "output '" + name + "' is asked twice");
    asked[o] = true;
  }
  return Status::Ok();
}

}  // namespace pier::tensor_models
