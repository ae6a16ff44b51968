#include "api/kserve/tensor_model_json.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace pier::api {
namespace {

using Json = nlohmann::json;

Json MetadataTensors(const std::vector<TensorSpec>& specs) {
  Json out = Json::array();
  for (const TensorSpec& spec : specs) {
    out.push_back(
        {{"name", spec.name}, {"datatype", ElementTypeName(spec.type)}, {"shape", spec.shape}});
  }
  return out;
}

// Triton's config lists dims without the batch dimension when the model batches.
Json ConfigTensors(const std::vector<TensorSpec>& specs, bool batched) {
  Json out = Json::array();
  for (const TensorSpec& spec : specs) {
    std::vector<int64_t> dims = spec.shape;
    if (batched && !dims.empty()) dims.erase(dims.begin());
    out.push_back(
        {{"name", spec.name}, {"data_type", TritonConfigType(spec.type)}, {"dims", dims}});
  }
  return out;
}

}  // namespace

std::string TritonConfigType(ElementType type) {
  if (type == ElementType::kBytes) return "TYPE_STRING";
  return "TYPE_" + std::string(ElementTypeName(type));
}

Json TensorModelMetadata(const serving::ServedModel& model) {
  const serving::TensorModelInfo& info = model.tensors->info();
  return Json{
      {"name", model.id},
      {"versions", {"1"}},
      {"platform", info.platform},
      {"inputs", MetadataTensors(info.inputs)},
      {"outputs", MetadataTensors(info.outputs)},
      {"parameters",
       {{"kind", serving::ModelKindName(model.kind)}, {"max_batch_size", info.max_batch_size}}}};
}

Json TensorModelConfig(const serving::ServedModel& model) {
  const serving::TensorModelInfo& info = model.tensors->info();
  const bool batched = info.max_batch_size > 0;
  Json config{{"name", model.id},
              {"platform", info.platform},
              {"backend", "onnxruntime"},
              {"max_batch_size", info.max_batch_size},
              {"input", ConfigTensors(info.inputs, batched)},
              {"output", ConfigTensors(info.outputs, batched)}};
  if (batched) {
    const double window = model.tensors->Stats().window_seconds;
    config["dynamic_batching"] = {
        {"preferred_batch_size", info.preferred_batch_sizes},
        {"max_queue_delay_microseconds", static_cast<int64_t>(std::llround(window * 1e6))}};
  }
  return config;
}

int64_t TensorInferBodyLimit(const serving::TensorModelInfo& info, int64_t floor, bool json) {
  const int64_t batch = std::max<int64_t>(1, info.max_batch_size);
  const bool batched = info.max_batch_size > 0;
  // Every product saturates at the ceiling rather than overflowing.
  auto times = [](int64_t a, int64_t b) {
    return a != 0 && b > kMaxTensorBodyBytes / a ? kMaxTensorBodyBytes : a * b;
  };
  int64_t total = kInferHeaderAllowance;
  for (const TensorSpec& spec : info.inputs) {
    int64_t elements = batch;
    for (size_t d = batched ? 1 : 0; d < spec.shape.size(); ++d) {
      elements = times(elements, std::max<int64_t>(1, spec.shape[d]));
    }
    auto known = info.max_element_bytes.find(spec.name);
    const int64_t per_element = known != info.max_element_bytes.end() ? known->second
                                : spec.type == ElementType::kBytes    ? kBytesElementGuess
                                : json                                ? kJsonBytesPerElement
                                                                      : ElementSize(spec.type);
    total = std::min(kMaxTensorBodyBytes, total + times(elements, per_element));
  }
  return std::max(floor, total);
}

}  // namespace pier::api
