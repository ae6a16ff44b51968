// What the KServe v2 routes say about a tensor model (an ONNX graph) and how large a request
// for it may be:
//
//   metadata  GET /v2/models/{m} (and gRPC ModelMetadata): its inputs and outputs with KServe
//             datatypes and shapes (-1 where the model leaves a dimension open, the batch
//             first for a model that batches), platform "onnxruntime_onnx"
//   config    GET /v2/models/{m}/config: the part of Triton's model configuration that
//             tritonclient reads: name, platform, backend, max_batch_size, input/output with
//             data_type "TYPE_FP32"... (BYTES is Triton's TYPE_STRING) and dims without the
//             batch dimension when max_batch_size > 0, and dynamic_batching
//             (preferred_batch_size, max_queue_delay_microseconds: the batching window in use)
//             for a model that batches
//   body      the largest infer body: see TensorInferBodyLimit
//
// Thread-safety: pure functions (Stats() of the runner is thread-safe).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "serving/model_registry.h"
#include "serving/tensor_runner.h"

namespace pier::api {

// `model` is of kind kTensor with a runner.
nlohmann::json TensorModelMetadata(const serving::ServedModel& model);
nlohmann::json TensorModelConfig(const serving::ServedModel& model);

// Triton's name of a datatype in a model configuration: "TYPE_" + KServe's, BYTES as
// "TYPE_STRING".
std::string TritonConfigType(ElementType type);

// The largest infer request for a tensor model, so that a full max_batch_size batch is always
// accepted: each input's elements for a batch of max(1, max_batch_size) (a dimension the model
// leaves open counted as 1), at element size in binary form and at kJsonBytesPerElement in
// JSON (BYTES elements at their max_element_bytes where the model gives one, else at
// kBytesElementGuess, either way), plus kInferHeaderAllowance for the
// JSON around them; the larger of `floor` (the server's body limit) and that, at most
// kMaxTensorBodyBytes. `json`: the JSON form's figure (HTTP); else the binary one (gRPC).
inline constexpr int64_t kJsonBytesPerElement = 32;  // "-1.2345678901234567e-308, " and brackets
inline constexpr int64_t kBytesElementGuess = 1024;
inline constexpr int64_t kInferHeaderAllowance = int64_t{64} << 10;
inline constexpr int64_t kMaxTensorBodyBytes = int64_t{256} << 20;
int64_t TensorInferBodyLimit(const serving::TensorModelInfo& info, int64_t floor, bool json);

}  // namespace pier::api
