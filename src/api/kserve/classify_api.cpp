#include "api/kserve/classify_api.h"

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "api/json_shape.h"
#include "api/kserve/kserve_api.h"
#include "api/kserve/tensor_infer.h"
#include "api/kserve/tensor_infer_response.h"
#include "api/pending_response.h"
#include "api/status_map.h"
#include "common/base64.h"
#include "serving/tensor_runner.h"
#include "tensor_models/batch_tensors.h"

namespace pier::api {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kPath = "/v1/classify";
constexpr int64_t kDefaultTopK = 5;

// "a=1&b=x" -> the value of `key` (no percent-decoding: model names are [A-Za-z0-9._:-]).
std::optional<std::string> QueryValue(std::string_view query, std::string_view key) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) == key) {
      return std::string(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1));
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

// What one /v1/classify request asks, once read.
struct ClassifyRequest {
  std::string model;
  std::vector<std::string> images;  // encoded
  int64_t top_k = kDefaultTopK;
  std::string output;  // empty: the labelled (or only) output
  uint64_t priority = 0;
};

Result<int64_t> TopK(const std::string& text, int64_t max) {
  char* end = nullptr;
  const long long k = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || k < 1 || k > max) {
    return InvalidArgumentError("top_k must be a whole number 1.." + std::to_string(max) +
                                ", got '" + text + "'");
  }
  return static_cast<int64_t>(k);
}

// The raw form: the body is the image, the rest in the query.
Result<ClassifyRequest> ReadRaw(const HttpRequest& http, int64_t max_top_k) {
  ClassifyRequest r;
  std::optional<std::string> model = QueryValue(http.query, "model");
  if (!model.has_value() || model->empty()) {
    return InvalidArgumentError(
        "name the model: POST /v1/classify?model=NAME with the image "
        "as the body");
  }
  r.model = *model;
  if (std::optional<std::string> k = QueryValue(http.query, "top_k")) {
    PIER_ASSIGN_OR_RETURN(r.top_k, TopK(*k, max_top_k));
  }
  if (std::optional<std::string> output = QueryValue(http.query, "output")) r.output = *output;
  if (http.body.empty()) return InvalidArgumentError("the body holds no image");
  r.images.push_back(http.body);
  return r;
}

Result<std::string> Base64Image(const Json& value, const std::string& at) {
  if (!value.is_string()) return InvalidArgumentError(at + " must be a base64 string");
  std::string_view text = value.get_ref<const std::string&>();
  // A data URL ("data:image/png;base64,....") as browsers make them.
  if (text.starts_with("data:")) {
    const size_t comma = text.find(',');
    if (comma == std::string_view::npos ||
        text.substr(0, comma).find(";base64") == std::string_view::npos) {
      return InvalidArgumentError(at + " is a data URL without ';base64,'");
    }
    text.remove_prefix(comma + 1);
  }
  std::optional<std::string> bytes = DecodeBase64(text);
  if (!bytes.has_value()) return InvalidArgumentError(at + " is not base64");
  if (bytes->empty()) return InvalidArgumentError(at + " holds no bytes");
  return std::move(bytes).value();
}

Result<ClassifyRequest> ReadJson(const HttpRequest& http, int64_t max_top_k) {
  if (std::optional<std::string> shape = CheckJsonShape(http.body)) {
    return InvalidArgumentError(*shape);
  }
  Json body;
  try {
    body = Json::parse(http.body);
  } catch (const Json::exception& e) {
    return InvalidArgumentError("the body is not JSON (" + std::string(e.what()) +
                                "); send {\"model\", \"image\"} or an image with Content-Type "
                                "image/*");
  }
  if (!body.is_object()) return InvalidArgumentError("the body must be a JSON object");
  ClassifyRequest r;
  for (const auto& [key, value] : body.items()) {
    if (key == "model") {
      if (!value.is_string()) return InvalidArgumentError("model must be a string");
      r.model = value.get<std::string>();
    } else if (key == "image") {
      if (value.is_array()) {
        if (value.empty()) return InvalidArgumentError("image is an empty list");
        for (size_t i = 0; i < value.size(); ++i) {
          PIER_ASSIGN_OR_RETURN(std::string image,
                                Base64Image(value[i], "image[" + std::to_string(i) + "]"));
          r.images.push_back(std::move(image));
        }
      } else {
        PIER_ASSIGN_OR_RETURN(std::string image, Base64Image(value, "image"));
        r.images.push_back(std::move(image));
      }
    } else if (key == "top_k") {
      if (!value.is_number_integer()) return InvalidArgumentError("top_k must be a whole number");
      PIER_ASSIGN_OR_RETURN(r.top_k, TopK(std::to_string(value.get<int64_t>()), max_top_k));
    } else if (key == "output") {
      if (!value.is_string()) return InvalidArgumentError("output must be a string");
      r.output = value.get<std::string>();
    } else if (key == "priority") {
      if (!value.is_number_unsigned()) {
        return InvalidArgumentError("priority must be a whole number (Triton's: 1 the highest)");
      }
      r.priority = value.get<uint64_t>();
    } else {
      return InvalidArgumentError("unknown key \"" + key +
                                  "\" (known: model, image, top_k, output, priority)");
    }
  }
  if (r.model.empty()) return InvalidArgumentError("model is required");
  if (r.images.empty()) return InvalidArgumentError("image is required (base64)");
  return r;
}

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
      raw ? ReadRaw(http, options.max_top_k) : ReadJson(http, options.max_top_k);
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
      options.fallback, http, primary, BatcherPriority(r.priority, principal.max_priority),
      principal, &diverted_from);
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
  std::optional<TensorInferRefusal> refused = StartTensorInfer(
      model, principal, std::move(request), options.class_max_queue, pending->flag(),
      [weak, model_id, diverted_from, labels, k, batched](Result<TensorInferAnswer> answer) {
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
