// ReadInferBody: a KServe v2 HTTP infer body split into its JSON header and the binary data
// after it (the binary extension: Inference-Header-Content-Length gives the header's length),
// the header parsed. Shared by infer on a model (kserve_api.h) and on a pipeline
// (api/pipelines/pipeline_api.h).
//
// Thread-safety: a pure function.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "api/http_types.h"
#include "common/status.h"

namespace pier::api {

struct InferBody {
  nlohmann::json request;
  std::string_view binary;  // into the request's body; empty without the binary extension
};

// INVALID_ARGUMENT (answered 400): a repeated or bad Inference-Header-Content-Length, a header
// that is not JSON (naming where it ends) or not of a shape Pier reads (json_shape.h).
[[nodiscard]] Result<InferBody> ReadInferBody(const HttpRequest& http);

}  // namespace pier::api
