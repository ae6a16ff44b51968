// The one reading of a KServe v2 infer request for a tensor model (an ONNX graph), shared by
// the HTTP route (kserve_api.h) and the gRPC service (grpc/kserve_grpc_server.h) as
// ReadEmbedInferRequest is for embedding models (kserve_infer_request.h): each protocol brings
// its request into KServe's JSON form first (gRPC: `contents` as `data`, raw_input_contents as
// each input's binary data), then both take and refuse the same requests with the same
// messages.
//
//   inputs      any number, each {name, datatype, shape, data | parameters.binary_data_size};
//               datatype one of element_type.h's (BOOL, UINT8..UINT64, INT8..INT64, FP16,
//               BF16, FP32, FP64, BYTES); `data` a list, flat or nested (row-major), checked
//               value by value (tensor_json.h); binary data taken in input order, exactly
//               count x element size bytes (BYTES: `count` whole length-prefixed elements),
//               and the bytes after the JSON header exactly what the sizes add up to
//   outputs     optional; each {name, parameters: {binary_data: bool, classification: k}}
//   parameters  priority (Triton's level, an integer >= 0, 1 the highest, 0 the default);
//               binary_data_output (HTTP: every output binary unless it says otherwise);
//               others ignored
//
// What the model takes (names, types, shapes, the batch) is checked later, by the runner's
// Submit (CheckTensorRequest, tensor_models/tensor_request.h). Every refusal here is
// INVALID_ARGUMENT naming the input, output, field or parameter.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tensor/host_tensor.h"

namespace pier::api {

struct TensorOutputRequest {
  std::string name;
  std::optional<bool> binary =
      std::nullopt;  // `binary_data`; unset: the request's binary_data_output
  // Triton's classification extension: the top k of each batch row as BYTES "score:index"
  // strings instead of the tensor; 0: the tensor itself.
  int64_t classification = 0;
};

// What an infer request for a tensor model asks for, once read.
struct TensorInferRequest {
  std::vector<HostTensor> inputs;
  std::vector<TensorOutputRequest> outputs;  // empty: every output of the model
  uint64_t priority = 0;                     // Triton's level: 1 the highest, 0 the default
  bool binary_output = false;                // binary_data_output
  std::string id;                            // echoed in the response
};

// Reads `request` (KServe's JSON form) for tensor model `model`, with `binary` the bytes that
// follow its JSON header (empty without the binary extension).
[[nodiscard]] Result<TensorInferRequest> ReadTensorInferRequest(std::string_view model,
                                                                const nlohmann::json& request,
                                                                std::string_view binary);

}  // namespace pier::api
