// Helpers for tensor model tests: the tiny ONNX graphs' paths, tensors from values, values
// back from tensors.
#pragma once

#include <cstring>
#include <future>
#include <string>
#include <utility>
#include <vector>

#include "tensor/host_tensor.h"
#include "tensor_models/batch_tensors.h"
#include "tensor_models/tensor_request.h"

namespace pier::tensor_models::testing {

// Submits `request` to `runner` (a TensorBatcher, or any serving::TensorRunner) and waits for
// its answer; a refused Submit comes back as the result's status.
template <typename Runner>
TensorResult SubmitAndWait(Runner& runner, TensorRequest request) {
  std::promise<TensorResult> promise;
  Status queued =
      runner.Submit(std::move(request), [&](TensorResult r) { promise.set_value(std::move(r)); });
  if (!queued.ok()) {
    TensorResult refused;
    refused.status = queued;
    return refused;
  }
  return promise.get_future().get();
}

// A graph of models/onnx-tiny/ (scripts/bootstrap makes them; tests/fixtures/tensor_models/
// onnx_tiny.json describes them).
inline std::string TinyOnnxModel(const std::string& name) {
  return std::string(PIER_MODELS_DIR) + "/onnx-tiny/" + name;
}

inline HostTensor Fp32(std::string name, std::vector<int64_t> shape,
                       const std::vector<float>& values) {
  HostTensor t{
      .name = std::move(name), .type = ElementType::kFp32, .shape = std::move(shape), .bytes = {}};
  t.bytes.resize(values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

inline std::vector<float> Floats(const HostTensor& t) {
  std::vector<float> values(t.bytes.size() / sizeof(float));
  if (!values.empty()) std::memcpy(values.data(), t.bytes.data(), values.size() * sizeof(float));
  return values;
}

inline HostTensor Strings(std::string name, std::vector<int64_t> shape,
                          const std::vector<std::string>& values) {
  return {.name = std::move(name),
          .type = ElementType::kBytes,
          .shape = std::move(shape),
          .bytes = JoinBytesElements(values)};
}

inline std::vector<std::string> StringsOf(const HostTensor& t) {
  std::vector<std::string> values;
  auto elements = SplitBytesElements(t.bytes, ElementCount(t.shape));
  if (!elements.ok()) return {"<" + elements.status().ToString() + ">"};
  for (std::string_view e : *elements) values.emplace_back(e);
  return values;
}

}  // namespace pier::tensor_models::testing
