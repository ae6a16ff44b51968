// The HTTP answer of a KServe v2 infer request for a tensor model, as Triton writes it and its
// clients (tritonclient.http's InferResult) read it:
//
//   {"model_name", "model_version": "1", "id" (when the request had one),
//    "outputs": [{"name", "datatype", "shape", "data": [...]}, ...]}
//
// with `data` a flat list (tensor_json.h: FP16 as JSON numbers, BYTES as strings). When any
// output is binary, the body is that JSON header (its length in the Inference-Header-Content-
// Length header, content type application/octet-stream) followed by each binary output's bytes
// in output order; such an output has `parameters: {"binary_data_size": N}` instead of `data`
// (BYTES in the 4-byte length-prefixed form). Every answer carries a Server-Timing header.
//
// Thread-safety: a pure function.
#pragma once

#include <string>
#include <string_view>

#include "api/http_types.h"
#include "api/kserve/tensor_infer.h"

namespace pier::api {

HttpResponse WriteTensorInferResponse(std::string_view model, std::string_view id,
                                      TensorInferAnswer answer);

// The answer's Server-Timing header: "decode;dur=0.000, queue;dur=0.091, compute;dur=5.312"
// (milliseconds: images decoded in the front end, waiting for the batch, the batch's run).
std::string TensorServerTiming(const TensorInferAnswer& answer);

}  // namespace pier::api
