#include "api/kserve/classify_api.h"

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "api/kserve/classify_request.h"
#include "api/kserve/kserve_api.h"
#include "api/kserve/tensor_infer.h"
#include "api/kserve/tensor_infer_response.h"
#include "api/pending_response.h"
#include "api/status_map.h"
#include "serving/tensor_runner.h"
#include "tensor_models/batch_tensors.h"

namespace pier::api {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kPath = "/v1/classify";

// The output classified: `asked`, the one labels name, or the only one.
Result<std::string> ClassifiedOutput(const serving::ServedModel& model, const std::string& asked) {
  const serving::TensorModelInfo& info = model.tensors->info();
  if (!asked.empty()) return asked;  // the runner refuses an unknown one
  if (info.labels.size() == 1) return info.labels.begin()->first;
  if (info.outputs.size() == 1) return info.outputs[0].name;
  std::string names;
  for (const TensorSpec& o : info.outputs) names += (names.empty() ? "" : ", ") + o.name;
  return InvalidArgumentError("model '" + model.id + "' has " +
                              std::to_string(info.outputs.size()) + " outputs (" + names +
                              "); name the one to classify with output");
}

}  // namespace

struct ClassifyApi::Impl {
  ClassifyApiOptions options;
  serving::ModelRegistry* registry;
  const ApiKeys* keys;

  HttpResponse Handle(const HttpRequest& http);
  HttpResponse Serve(const HttpRequest& http, ClassifyRequest r, const serving::ModelRef& primary,
                     const Principal& principal);
};

HttpResponse ClassifyApi::Impl::Handle(const HttpRequest& http) {
  Principal principal;
  if (keys != nullptr) {
    auto auth = keys->Authenticate(CredentialsOf(http));
    if (auto* denied = std::get_if<AuthRefusal>(&auth)) return ResponseOf(*denied);
    principal = std::get<Principal>(std::move(auth));
  }
  const std::optional<std::string_view> type = http.Header("content-type");
  const bool raw = type.has_value() && type->starts_with("image/");
  Result<ClassifyRequest> read =
      raw ? ReadRawClassifyRequest(http.query, http.body, options.max_top_k)
          : ReadJsonClassifyRequest(http.body, options.max_top_k);
  if (!read.ok()) return ErrorResponse(400, read.status().message());
  Result<serving::ModelEntry> found = registry->Lookup(read->model);
  if (!found.ok()) return ErrorResponse(404, found.status().message(), "model", "model_not_found");
  if (found->state != serving::ModelState::kReady || found->model == nullptr) {
    return ModelNotReady(registry, *found, options.load_wait,
                         [this, http] { return Handle(http); });
  }
  const serving::ModelRef& model = found->model;
  if (model->kind != serving::ModelKind::kTensor || model->tensors == nullptr) {
    return ErrorResponse(400,
                         "model '" + model->id +
                             "' is not a tensor model: /v1/classify serves "
                             "image classifiers (ONNX models with preprocess:)",
                         "model");
  }
  return Serve(http, std::move(read).value(), model, principal);
}

HttpResponse ClassifyApi::Impl::Serve(const HttpRequest& http, ClassifyRequest r,
                                      const serving::ModelRef& primary,
                                      const Principal& principal) {
  std::string diverted_from;
  const serving::ModelRef model_ref = ChooseTensorModel(
      options.fallback, FallbackAllowed(http.Header("x-pier-no-fallback")), primary,
      BatcherPriority(r.priority, principal.max_priority), principal, &diverted_from);
  const serving::ServedModel& model = *model_ref;
  const serving::TensorModelInfo& info = model.tensors->info();
  if (info.inputs.size() != 1 || info.inputs[0].type != ElementType::kBytes ||
      info.max_element_bytes.count(info.inputs[0].name) == 0) {
    return ErrorResponse(400,
                         "model '" + model.id +
                             "' does not take images (declare preprocess: "
                             "for its image input)",
                         "model");
  }
  Result<std::string> output = ClassifiedOutput(model, r.output);
  if (!output.ok()) return ErrorResponse(400, output.status().message(), "output");
  const bool batched = info.max_batch_size > 0;
  if (!batched && r.images.size() > 1) {
    return ErrorResponse(400, "model '" + model.id + "' takes one image per request", "image");
  }
  TensorInferRequest request;
  HostTensor images;
  images.name = info.inputs[0].name;
  images.type = ElementType::kBytes;
  images.shape = {static_cast<int64_t>(r.images.size())};
  for (const std::string& image : r.images) tensor_models::AppendBytesElement(images.bytes, image);
  request.inputs.push_back(std::move(images));
  request.outputs.push_back({.name = *output});
  request.priority = r.priority;

  auto pending = std::make_shared<CancellableResponse>();
  pending->Hold(model_ref);
  std::weak_ptr<CancellableResponse> weak = pending;
  auto labels_it = info.labels.find(*output);
  const std::vector<std::string> labels =
      labels_it == info.labels.end() ? std::vector<std::string>() : labels_it->second;
  const std::string model_id = model.id;
  const int64_t k = r.top_k;
  std::shared_ptr<serving::RequestBoard::Ticket> live;
  if (options.board != nullptr) {
    const engine::Priority level =
        ClassOfBatcherPriority(BatcherPriority(request.priority, principal.max_priority));
    live = options.board->Open({.request_id = "",
                                .model = model_id,
                                .route = "/v1/classify",
                                .tenant = principal.tenant,
                                .priority_class = std::string(engine::PriorityName(level))});
  }
  std::optional<TensorInferRefusal> refused = StartTensorInfer(
      model, principal, std::move(request), options.class_max_queue, pending->flag(),
      [weak, model_id, diverted_from, labels, k, batched, live](Result<TensorInferAnswer> answer) {
        std::shared_ptr<CancellableResponse> pending = weak.lock();
        if (pending == nullptr) return;
        auto fail = [&](const Status& status) {
          HttpResponse response = ErrorResponse(HttpStatusOf(status), status.message());
          if (response.status == 429 || response.status == 503) {
            response.headers.emplace_back("Retry-After", "1");
          }
          pending->Resolve(std::move(response));
        };
        if (!answer.ok()) return fail(answer.status());
        Result<std::vector<std::vector<ClassScore>>> classes =
            TopClasses(answer->outputs.at(0), k, batched, labels.empty() ? nullptr : &labels);
        if (!classes.ok()) return fail(classes.status());
        Json data = Json::array();
        for (size_t i = 0; i < classes->size(); ++i) {
          Json row = Json::array();
          for (const ClassScore& c : (*classes)[i]) {
            Json entry{{"class", c.index}, {"score", c.score}};
            if (!c.label.empty()) entry["label"] = c.label;
            row.push_back(std::move(entry));
          }
          data.push_back({{"index", i}, {"classes", std::move(row)}});
        }
        Json body{{"object", "classification"},
                  {"model", model_id},
                  {"data", std::move(data)},
                  {"timing",
                   {{"decode_ms", answer->decode_seconds * 1e3},
                    {"queue_ms", answer->queue_seconds * 1e3},
                    {"compute_ms", answer->compute_seconds * 1e3}}}};
        HttpResponse response;
        response.model = model_id;
        response.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
        response.headers.emplace_back("Server-Timing", TensorServerTiming(*answer));
        if (!diverted_from.empty()) response.headers.emplace_back("X-Pier-Fallback", diverted_from);
        pending->Resolve(std::move(response));
      });
  if (refused.has_value()) {
    HttpResponse response = ErrorResponse(HttpStatusOf(refused->status), refused->status.message());
    if (refused->retry_after_s.has_value()) {
      response.headers.emplace_back("Retry-After", std::to_string(*refused->retry_after_s));
    }
    return response;
  }
  HttpResponse response;
  response.deferred = pending;
  return response;
}

ClassifyApi::ClassifyApi(ClassifyApiOptions options, serving::ModelRegistry* registry,
                         const ApiKeys* keys)
    : impl_(std::make_shared<Impl>(Impl{std::move(options), registry, keys})) {}

ClassifyApi::~ClassifyApi() = default;

void ClassifyApi::Register(Router& router) {
  std::shared_ptr<Impl> impl = impl_;
  router.Add("POST", std::string(kPath),
             [impl](const HttpRequest& request) { return impl->Handle(request); });
  const auto limit = static_cast<size_t>(impl->options.max_body_bytes);
  router.SetBodyLimit(std::string(kPath),
                      [limit](const HttpRequest&) -> std::optional<size_t> { return limit; });
}

}  // namespace pier::api
