// The one reading of a KServe v2 infer request for an embedding model, shared by the HTTP route
// (kserve_api.h) and the gRPC service (grpc/kserve_grpc_server.h): both protocols take and
// refuse the same requests, with the same messages, because both call ReadEmbedInferRequest.
//
// Each protocol first brings its request into KServe's JSON form: HTTP parses its JSON header
// and keeps the bytes after it (Triton's binary extension); gRPC writes each input's `contents`
// as `data`, each `raw_input_contents` as that input's binary data (`binary_data_size`, the
// bytes concatenated in input order) and its parameters as JSON values. What only one protocol
// can get wrong stays with it: a repeated Inference-Header-Content-Length (HTTP), a count of
// raw_input_contents other than the inputs' (gRPC). Everything else is checked here:
//
//   inputs      one BYTES tensor of texts, [n] or [n, 1] (CheckTextTensor): `data` a list of
//               strings, or binary length-prefixed strings; or token ids (kserve_token_ids.h)
//   values      each input's values come once, in `data` or as binary data, and the binary
//               data is exactly what the inputs' binary_data_size add up to
//   outputs     only "embedding"; `binary_data` on it (HTTP) asks for a binary response
//   parameters  truncate (a bool, default true); priority (an integer, 0 or more: Triton's
//               level, 1 the highest, 0 the default); binary_data_output (HTTP); others ignored
//
// Every refusal is INVALID_ARGUMENT naming the input, field or parameter.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace pier::api {

// What an infer request for an embedding model asks for, once read and checked.
struct EmbedInferRequest {
  std::vector<std::string> texts;  // a BYTES input, one text per row
  // Token-id inputs (INT32/INT64, the attention mask applied) instead of texts.
  std::optional<std::vector<std::vector<int32_t>>> token_ids;
  bool truncate = true;
  uint64_t priority = 0;  // Triton's level: 1 the highest, 0 the default
  bool binary_output = false;
  std::string id;  // the request's `id`, echoed in the response
};

// Reads `request` (KServe's JSON form) for embedding model `model`, with `binary` the bytes that
// follow its JSON header (empty without the binary extension).
[[nodiscard]] Result<EmbedInferRequest> ReadEmbedInferRequest(std::string_view model,
                                                              const nlohmann::json& request,
                                                              std::string_view binary);

}  // namespace pier::api
