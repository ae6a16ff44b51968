#include "api/kserve/kserve_api.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/json_shape.h"
#include "api/kserve/embed_infer.h"
#include "api/kserve/infer_body.h"
#include "api/kserve/kserve_generate.h"
#include "api/kserve/kserve_infer_request.h"
#include "api/kserve/tensor_fallback.h"
#include "api/kserve/tensor_infer.h"
#include "api/kserve/tensor_infer_request.h"
#include "api/kserve/tensor_infer_response.h"
#include "api/kserve/tensor_model_json.h"
#include "api/openai/embeddings_api.h"
#include "api/pending_response.h"
#include "api/status_map.h"
#include "common/build_info.h"
#include "serving/embedder.h"
#include "serving/tensor_runner.h"
#include "tensor_models/batch_tensors.h"

namespace pier::api {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kModelsPrefix = "/v2/models/";
constexpr std::string_view kOutputName = "embedding";

HttpResponse JsonReply(int status, const Json& body) {
  HttpResponse response;
  response.status = status;
  response.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  return response;
}

// KServe's error shape.
HttpResponse Error(int status, std::string message) {
  return JsonReply(status, Json{{"error", std::move(message)}});
}

// "/v2/models/m/versions/1/infer" -> model "m", action "infer" (empty for metadata).
struct ModelPath {
  std::string model;
  std::string action;
  std::string version;  // empty when the path names none
};

std::optional<ModelPath> SplitModelPath(std::string_view path) {
  path.remove_prefix(kModelsPrefix.size());
  ModelPath out;
  const size_t slash = path.find('/');
  out.model = std::string(path.substr(0, slash));
  if (out.model.empty()) return std::nullopt;
  std::string_view rest = slash == std::string_view::npos ? "" : path.substr(slash + 1);
  if (rest.starts_with("versions/")) {
    rest.remove_prefix(9);
    const size_t end = rest.find('/');
    out.version = std::string(rest.substr(0, end));
    rest = end == std::string_view::npos ? "" : rest.substr(end + 1);
  }
  out.action = std::string(rest);
  return out;
}

Json ModelMetadata(const serving::ServedModel& model) {
  if (model.kind == serving::ModelKind::kTensor && model.tensors != nullptr) {
    return TensorModelMetadata(model);
  }
  Json metadata{{"name", model.id}, {"versions", {"1"}}, {"platform", "pier"}};
  if (model.kind == serving::ModelKind::kEmbed) {
    metadata["inputs"] = {{{"name", "text"}, {"datatype", "BYTES"}, {"shape", {-1}}}};
    metadata["outputs"] = {{{"name", kOutputName},
                            {"datatype", "FP32"},
                            {"shape", model.per_token_embeddings ? Json{-1, -1, model.embedding_dim}
                                                                 : Json{-1, model.embedding_dim}}}};
  } else {
    metadata["inputs"] = {{{"name", "text_input"}, {"datatype", "BYTES"}, {"shape", {1}}}};
    metadata["outputs"] = {{{"name", "text_output"}, {"datatype", "BYTES"}, {"shape", {1}}}};
  }
  metadata["parameters"] = {{"kind", serving::ModelKindName(model.kind)},
                            {"max_tokens_per_input", model.max_request_tokens}};
  return metadata;
}

// Triton's model configuration (the part tritonclient reads): a tensor model's own
// (tensor_model_json.h); for the others, their metadata's tensors with no batching.
Json ModelConfig(const serving::ServedModel& model) {
  if (model.kind == serving::ModelKind::kTensor && model.tensors != nullptr) {
    return TensorModelConfig(model);
  }
  const Json metadata = ModelMetadata(model);
  Json config{{"name", model.id}, {"platform", "pier"}, {"max_batch_size", 0}};
  for (const char* side : {"input", "output"}) {
    Json tensors = Json::array();
    for (const Json& t : metadata[std::string(side) + "s"]) {
      const std::optional<ElementType> type = ParseElementType(t["datatype"].get<std::string>());
      tensors.push_back({{"name", t["name"]},
                         {"data_type", TritonConfigType(type.value_or(ElementType::kBytes))},
                         {"dims", t["shape"]}});
    }
    config[side] = std::move(tensors);
  }
  return config;
}

HttpResponse RefusalResponse(const EmbedInferRefusal& refused) {
  HttpResponse response = Error(HttpStatusOf(refused.status), refused.status.message());
  if (refused.retry_after_s.has_value()) {
    response.headers.emplace_back("Retry-After", std::to_string(*refused.retry_after_s));
  }
  return response;
}

HttpResponse FailureResponse(const Status& status) {
  const int code = HttpStatusOf(status);
  HttpResponse response = Error(code, status.message());
  if (code == 429 || code == 503) response.headers.emplace_back("Retry-After", "1");
  return response;
}

}  // namespace

bool ParseBinaryStrings(std::string_view bytes, std::vector<std::string>* out, size_t max_count) {
  while (!bytes.empty()) {
    if (bytes.size() < 4 || out->size() >= max_count) return false;
    uint32_t length = 0;
    for (int i = 0; i < 4; ++i) {
      length |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
    }
    bytes.remove_prefix(4);
    if (length > bytes.size()) return false;
    out->emplace_back(bytes.substr(0, length));
    bytes.remove_prefix(length);
  }
  return true;
}

Status CheckTextTensor(std::string_view model, std::string_view name, std::string_view datatype,
                       const std::vector<int64_t>& shape, size_t texts) {
  const std::string input = "input '" + std::string(name) + "'";
  if (datatype != "BYTES") {
    return InvalidArgumentError(input + " has datatype '" + std::string(datatype) + "'; model '" +
                                std::string(model) +
                                "' takes BYTES (texts) or INT32/INT64 (token ids)");
  }
  std::string shown = "[";
  for (size_t i = 0; i < shape.size(); ++i) shown += (i ? ", " : "") + std::to_string(shape[i]);
  shown += "]";
  if (shape.empty() || shape.size() > 2 || (shape.size() == 2 && shape[1] != 1)) {
    return InvalidArgumentError(input + " has shape " + shown + "; a text per row: [n] or [n, 1]");
  }
  if (shape[0] < 1 || static_cast<uint64_t>(shape[0]) > kMaxInferTexts) {
    return InvalidArgumentError(input + " has shape " + shown + ": 1 to " +
                                std::to_string(kMaxInferTexts) + " texts per request");
  }
  if (static_cast<uint64_t>(shape[0]) != texts) {
    return InvalidArgumentError(input + " has shape " + shown + " but " + std::to_string(texts) +
                                " texts");
  }
  return Status::Ok();
}

int BatcherPriority(uint64_t triton_level, engine::Priority ceiling) {
  const int level = triton_level == 0   ? 1
                    : triton_level == 1 ? 3
                    : triton_level == 2 ? 2
                    : triton_level == 3 ? 1
                                        : 0;
  return std::min(level, 3 - static_cast<int>(ceiling));
}

std::shared_ptr<serving::RequestBoard::Ticket> OpenInferTicket(serving::RequestBoard* board,
                                                               std::string request_id,
                                                               std::string model, std::string route,
                                                               const Principal& principal,
                                                               int batcher_priority) {
  if (board == nullptr) return nullptr;
  const engine::Priority level = ClassOfBatcherPriority(batcher_priority);
  return board->Open({.request_id = std::move(request_id),
                      .model = std::move(model),
                      .route = std::move(route),
                      .tenant = principal.tenant,
                      .priority_class = std::string(engine::PriorityName(level))});
}

struct KServeApi::Impl {
  KServeApiOptions options;
  serving::ModelRegistry* registry;
  const ApiKeys* keys;

  std::optional<HttpResponse> Authenticate(const HttpRequest& http, Principal* principal) const {
    if (keys == nullptr) return std::nullopt;
    auto auth = keys->Authenticate(CredentialsOf(http));
    if (auto* denied = std::get_if<AuthRefusal>(&auth)) {
      // KServe's error shape, with the 401's challenge as every route sends it.
      HttpResponse response = Error(401, denied->message);
      response.headers = ResponseOf(*denied).headers;
      return response;
    }
    *principal = std::get<Principal>(std::move(auth));
    return std::nullopt;
  }

  HttpResponse Model(const HttpRequest& http);
  HttpResponse Infer(const HttpRequest& http, const serving::ModelRef& model,
                     const Principal& principal);
  HttpResponse InferTensors(const HttpRequest& http, TensorInferRequest request,
                            const serving::ModelRef& model, const Principal& principal);
  // POST .../infer with an image as the body (Content-Type image/*).
  HttpResponse InferImage(const HttpRequest& http, const serving::ModelRef& model,
                          const Principal& principal);

  TensorFallbackContext FallbackContext() {
    return {options.fallback_of, options.fallback_switch, registry, options.metrics};
  }
  // The body limit of POST /v2/models/{m}/infer for a ready tensor model; nullopt otherwise.
  std::optional<size_t> BodyLimit(const HttpRequest& head) const;
};

HttpResponse KServeApi::Impl::Model(const HttpRequest& http) {
  std::optional<ModelPath> path = SplitModelPath(http.path);
  if (!path.has_value()) return Error(404, "no model named in " + http.path);
  if (!path->version.empty() && path->version != "1") {
    return Error(404, "model '" + path->model + "' has no version '" + path->version +
                          "' (Pier serves version 1)");
  }
  Principal principal;
  if (auto denied = Authenticate(http, &principal)) return std::move(*denied);
  if (options.pipeline_route && !path->model.empty()) {
    if (std::optional<HttpResponse> answer =
            options.pipeline_route(http, path->model, path->action, principal)) {
      return std::move(*answer);
    }
  }
  Result<serving::ModelEntry> entry = registry->Lookup(path->model);
  if (!entry.ok() || path->model.empty()) return Error(404, entry.status().message());
  const bool ready = entry->state == serving::ModelState::kReady && entry->model != nullptr;
  const std::string state(serving::ModelStateName(entry->state));
  if (http.method == "GET" && path->action == "ready") {
    return JsonReply(ready ? 200 : 503, Json{{"name", entry->id}, {"ready", ready}});
  }
  if (http.method == "GET" && path->action.empty()) {
    if (!ready) return Error(503, "model '" + entry->id + "' is " + state);
    return JsonReply(200, ModelMetadata(*entry->model));
  }
  if (http.method == "GET" && path->action == "config") {
    if (!ready) return Error(503, "model '" + entry->id + "' is " + state);
    return JsonReply(200, ModelConfig(*entry->model));
  }
  if (http.method == "POST" && path->action == "infer") {
    if (!ready) {
      if (options.load_wait.count() > 0) {
        // An on_demand model loads for it (or one loading is waited for), as on /v1.
        return ModelNotReady(registry, *entry, options.load_wait,
                             [this, http] { return Model(http); });
      }
      HttpResponse response = Error(503, "model '" + entry->id + "' is " + state +
                                             (entry->reason.empty() ? "" : ": " + entry->reason));
      response.headers.emplace_back("Retry-After", "1");
      return response;
    }
    return Infer(http, entry->model, principal);
  }
  if (http.method == "POST" && (path->action == "generate" || path->action == "generate_stream")) {
    if (!ready) return Error(503, "model '" + entry->id + "' is " + state);
    if (entry->model->kind != serving::ModelKind::kGenerate) {
      return Error(400,
                   "model '" + entry->id + "' is " +
                       (entry->model->kind == serving::ModelKind::kTensor ? "a tensor model"
                                                                          : "an embedding model") +
                       ": " + path->action + " serves LLMs; use infer");
    }
    return ServeGenerate(http, entry->id, path->action == "generate_stream", options.completions);
  }
  return Error(404, "no route " + http.method + " " + http.path);
}

HttpResponse KServeApi::Impl::Infer(const HttpRequest& http, const serving::ModelRef& model_ref,
                                    const Principal& principal) {
  const serving::ServedModel& model = *model_ref;
  const bool tensors = model.kind == serving::ModelKind::kTensor && model.tensors != nullptr;
  if (!tensors && (model.kind != serving::ModelKind::kEmbed || model.embedder == nullptr)) {
    return Error(400, "model '" + model.id + "' is a " +
                          std::string(serving::ModelKindName(model.kind)) +
                          " model (an LLM): /infer serves embedding and tensor models; use POST "
                          "/v1/completions or /v1/chat/completions for text");
  }
  if (std::optional<std::string_view> type = http.Header("content-type");
      tensors && type.has_value() && type->starts_with("image/")) {
    return InferImage(http, model_ref, principal);
  }
  Result<InferBody> body = ReadInferBody(http);
  if (!body.ok()) return Error(400, body.status().message());
  const Json& request = body->request;
  const std::string_view binary = body->binary;
  if (tensors) {
    // The checks the gRPC form shares (tensor_infer_request.h), then the one run.
    Result<TensorInferRequest> read = ReadTensorInferRequest(model.id, request, binary);
    if (!read.ok()) return Error(400, read.status().message());
    return InferTensors(http, std::move(read).value(), model_ref, principal);
  }
  // Everything after the JSON: the checks the gRPC form shares (kserve_infer_request.h).
  Result<EmbedInferRequest> read = ReadEmbedInferRequest(model.id, request, binary);
  if (!read.ok()) return Error(400, read.status().message());
  const bool binary_output = read->binary_output;
  const std::string id = read->id;
  auto pending = std::make_shared<PendingResponse>();
  const std::string model_id = model.id;
  pending->Hold(model_ref);  // see embeddings_api.cpp: the batcher thread never holds the model
  std::weak_ptr<PendingResponse> weak = pending;
  std::shared_ptr<serving::RequestBoard::Ticket> live =
      OpenInferTicket(options.board, id, model_id, "/v2/models/{model}/infer", principal,
                      BatcherPriority(read->priority, principal.max_priority));
  std::optional<EmbedInferRefusal> refused = StartEmbedInfer(
      model, principal, std::move(read).value(), options.class_max_queue,
      [weak, binary_output, id, model_id, live](Result<EmbedInferOutput> result) {
        std::shared_ptr<PendingResponse> pending = weak.lock();
        if (pending == nullptr) return;  // the client is gone
        if (!result.ok()) {
          pending->Resolve(FailureResponse(result.status()));
          return;
        }
        Json output{{"name", kOutputName}, {"datatype", "FP32"}, {"shape", result->shape}};
        Json body{{"model_name", model_id}, {"model_version", "1"}};
        if (!id.empty()) body["id"] = id;
        HttpResponse response;
        response.model = model_id;
        const std::vector<float>& values = result->values;
        if (binary_output) {
          const size_t bytes = values.size() * sizeof(float);
          output["parameters"] = {{"binary_data_size", bytes}};
          body["outputs"] = Json::array({output});
          std::string header = body.dump();
          response.headers.emplace_back("Inference-Header-Content-Length",
                                        std::to_string(header.size()));
          response.content_type = "application/octet-stream";
          response.body = std::move(header);
          const size_t offset = response.body.size();
          response.body.resize(offset + bytes);
          std::memcpy(response.body.data() + offset, values.data(), bytes);  // x86: LE
        } else {
          output["data"] = values;
          body["outputs"] = Json::array({output});
          response.body = body.dump();
        }
        pending->Resolve(std::move(response));
      });
  if (refused.has_value()) return RefusalResponse(*refused);
  HttpResponse response;
  response.deferred = pending;
  return response;
}

HttpResponse KServeApi::Impl::InferTensors(const HttpRequest& http, TensorInferRequest request,
                                           const serving::ModelRef& primary,
                                           const Principal& principal) {
  std::string diverted_from;
  const serving::ModelRef model_ref = ChooseTensorModel(
      FallbackContext(), FallbackAllowed(http.Header("x-pier-no-fallback")), primary,
      BatcherPriority(request.priority, principal.max_priority), principal, &diverted_from);
  const serving::ServedModel& model = *model_ref;
  auto pending = std::make_shared<CancellableResponse>();
  pending->Hold(model_ref);  // the runner's thread never holds the model
  std::weak_ptr<CancellableResponse> weak = pending;
  const std::string id = request.id;
  const std::string model_id = model.id;
  std::shared_ptr<serving::RequestBoard::Ticket> live =
      OpenInferTicket(options.board, id, model_id, "/v2/models/{model}/infer", principal,
                      BatcherPriority(request.priority, principal.max_priority));
  std::optional<TensorInferRefusal> refused = StartTensorInfer(
      model, principal, std::move(request), options.class_max_queue, pending->flag(),
      [weak, id, model_id, diverted_from, live](Result<TensorInferAnswer> answer) {
        std::shared_ptr<CancellableResponse> pending = weak.lock();
        if (pending == nullptr) return;  // the client is gone
        HttpResponse response =
            answer.ok() ? WriteTensorInferResponse(model_id, id, std::move(answer).value())
                        : FailureResponse(answer.status());
        if (!diverted_from.empty()) response.headers.emplace_back("X-Pier-Fallback", diverted_from);
        pending->Resolve(std::move(response));
      });
  if (refused.has_value()) return RefusalResponse(*refused);
  HttpResponse response;
  response.deferred = pending;
  return response;
}

HttpResponse KServeApi::Impl::InferImage(const HttpRequest& http, const serving::ModelRef& model,
                                         const Principal& principal) {
  const serving::TensorModelInfo& info = model->tensors->info();
  if (info.inputs.size() != 1 || info.inputs[0].type != ElementType::kBytes) {
    return Error(400, "model '" + model->id + "' takes " + std::to_string(info.inputs.size()) +
                          " input(s) and none of them an image alone (declare preprocess: for "
                          "its image input); send a KServe infer request (JSON)");
  }
  if (http.body.empty()) return Error(400, "the body holds no image");
  TensorInferRequest request;
  HostTensor image;
  image.name = info.inputs[0].name;
  image.type = ElementType::kBytes;
  image.shape = {1};
  tensor_models::AppendBytesElement(image.bytes, http.body);
  request.inputs.push_back(std::move(image));
  return InferTensors(http, std::move(request), model, principal);
}

std::optional<size_t> KServeApi::Impl::BodyLimit(const HttpRequest& head) const {
  if (head.method != "POST") return std::nullopt;
  std::optional<ModelPath> path = SplitModelPath(head.path);
  if (!path.has_value() || path->action != "infer") return std::nullopt;
  Result<serving::ModelRef> model = registry->Resolve(path->model);
  if (!model.ok() || (*model)->kind != serving::ModelKind::kTensor ||
      (*model)->tensors == nullptr) {
    return std::nullopt;
  }
  return static_cast<size_t>(
      TensorInferBodyLimit((*model)->tensors->info(), options.max_body_bytes, /*json=*/true));
}

KServeApi::KServeApi(KServeApiOptions options, serving::ModelRegistry* registry,
                     const ApiKeys* keys)
    : impl_(std::make_shared<Impl>(Impl{std::move(options), registry, keys})) {}

KServeApi::~KServeApi() = default;

void KServeApi::Register(Router& router) {
  std::shared_ptr<Impl> impl = impl_;
  router.Add("GET", "/v2/health/live", [](const HttpRequest&) {
    return JsonReply(200, Json{{"live", true}});
  });
  router.Add("GET", "/v2/health/ready", [impl](const HttpRequest&) {
    std::string reason;
    const bool ready = impl->options.ready ? impl->options.ready(&reason) : true;
    Json body{{"ready", ready}};
    if (!ready) body["reason"] = reason;
    return JsonReply(ready ? 200 : 503, body);
  });
  router.Add("GET", "/v2", [](const HttpRequest&) {
    return JsonReply(200, Json{{"name", "pier"},
                               {"version", std::string(BuildId())},
                               {"extensions", {"binary_tensor_data"}}});
  });
  router.SetBodyLimit(std::string(kModelsPrefix),
                      [impl](const HttpRequest& head) { return impl->BodyLimit(head); });
  for (const char* method : {"GET", "POST"}) {
    router.AddPrefix(method, std::string(kModelsPrefix),
                     [impl](const HttpRequest& request) { return impl->Model(request); });
  }
}

}  // namespace pier::api
