// What a POST /v1/classify request asks (classify_api.h), read from its two forms: the raw
// form (the body is the image; model, top_k and output in the query) and the JSON form
// ({"model", "image": base64 or a data: URL, or a list of them, "top_k", "output",
// "priority"}). Both refuse with INVALID_ARGUMENT naming the key; nothing here knows a model.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace pier::api {

inline constexpr int64_t kDefaultTopK = 5;

struct ClassifyRequest {
  std::string model;
  std::vector<std::string> images;  // encoded, at least one
  int64_t top_k = kDefaultTopK;     // 1..max_top_k
  std::string output;               // empty: the labelled (or only) output
  uint64_t priority = 0;            // Triton's level: 1 the highest, 0 the default
};

// The raw form: `query` is the target after '?' ("model=m&top_k=3"; no percent-decoding:
// model and output names are [A-Za-z0-9._:-]).
[[nodiscard]] Result<ClassifyRequest> ReadRawClassifyRequest(std::string_view query,
                                                             std::string_view body,
                                                             int64_t max_top_k);

// The JSON form; the body passes CheckJsonShape first.
[[nodiscard]] Result<ClassifyRequest> ReadJsonClassifyRequest(std::string_view body,
                                                              int64_t max_top_k);

}  // namespace pier::api
