#include "api/kserve/tensor_infer_response.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "api/kserve/tensor_json.h"

namespace pier::api {

std::string TensorServerTiming(const TensorInferAnswer& answer) {
  char text[160];
  std::snprintf(text, sizeof(text), "decode;dur=%.3f, queue;dur=%.3f, compute;dur=%.3f",
                answer.decode_seconds * 1e3, answer.queue_seconds * 1e3,
                answer.compute_seconds * 1e3);
  return text;
}

HttpResponse WriteTensorInferResponse(std::string_view model, std::string_view id,
                                      TensorInferAnswer answer) {
  using Json = nlohmann::json;
  Json body{{"model_name", model}, {"model_version", "1"}};
  if (!id.empty()) body["id"] = id;
  Json outputs = Json::array();
  std::string binary;
  for (size_t i = 0; i < answer.outputs.size(); ++i) {
    HostTensor& tensor = answer.outputs[i];
    Json output{
        {"name", tensor.name}, {"datatype", ElementTypeName(tensor.type)}, {"shape", tensor.shape}};
    if (answer.binary[i]) {
      output["parameters"] = {{"binary_data_size", tensor.bytes.size()}};
      binary += tensor.bytes;
    } else {
      output["data"] = TensorBytesToJson(tensor);
    }
    outputs.push_back(std::move(output));
  }
  body["outputs"] = std::move(outputs);
  HttpResponse response;
  response.model = std::string(model);
  response.headers.emplace_back("Server-Timing", TensorServerTiming(answer));
  // BYTES that are not UTF-8 are written with U+FFFD rather than failing the answer.
  response.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  const bool any_binary =
      std::find(answer.binary.begin(), answer.binary.end(), true) != answer.binary.end();
  if (any_binary) {
    response.headers.emplace_back("Inference-Header-Content-Length",
                                  std::to_string(response.body.size()));
    response.content_type = "application/octet-stream";
    response.body += binary;
  }
  return response;
}

}  // namespace pier::api
