#include "api/kserve/infer_body.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "api/json_shape.h"

namespace pier::api {

Result<InferBody> ReadInferBody(const HttpRequest& http) {
  // The JSON header, and what follows it with the binary extension.
  std::string_view header_text = http.body;
  std::string_view binary;
  const auto lengths = std::count_if(http.headers.begin(), http.headers.end(), [](const auto& h) {
    return h.first == "inference-header-content-length";
  });
  if (lengths > 1) {
    return InvalidArgumentError("Inference-Header-Content-Length is given " +
                                std::to_string(lengths) + " times; send it once");
  }
  if (std::optional<std::string_view> length = http.Header("inference-header-content-length")) {
    size_t n = 0;
    const std::string text(*length);
    char* end = nullptr;
    const unsigned long long parsed = std::strtoull(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || parsed > http.body.size()) {
      return InvalidArgumentError("Inference-Header-Content-Length '" + text +
                                  "' is not a length within the body of " +
                                  std::to_string(http.body.size()) + " bytes");
    }
    n = static_cast<size_t>(parsed);
    header_text = std::string_view(http.body).substr(0, n);
    binary = std::string_view(http.body).substr(n);
  }
  if (std::optional<std::string> shape = CheckJsonShape(header_text)) {
    return InvalidArgumentError(*shape);
  }
  nlohmann::json request;
  try {
    request = nlohmann::json::parse(header_text.begin(), header_text.end());
  } catch (const nlohmann::json::exception& e) {
    const bool split = http.Header("inference-header-content-length").has_value();
    return InvalidArgumentError(InvalidJsonMessage(
        e, split ? "the inference header (the body's first " + std::to_string(header_text.size()) +
                       " bytes, by Inference-Header-Content-Length)"
                 : ""));
  }
  return InferBody{std::move(request), binary};
}

}  // namespace pier::api
