#include "api/openai/embeddings_api.h"

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "api/pending_response.h"
#include "api/request_json.h"
#include "api/status_map.h"
#include "serving/embedder.h"
#include "serving/request_policy.h"

namespace pier::api {
namespace {

using request_json::Bad;
using request_json::Field;
using request_json::json;
using request_json::Show;

// What the body asks for, before tokenization.
struct EmbeddingsRequest {
  std::string model;
  std::vector<std::string> texts;              // either texts...
  std::vector<std::vector<int32_t>> id_lists;  // ...or token ids
  bool base64 = false;
  int64_t dimensions = 0;  // 0: the model's
  bool truncate = true;
  std::optional<engine::Priority> priority;
};

std::variant<EmbeddingsRequest, OpenAiError> Parse(std::string_view body, int64_t max_inputs) {
  std::variant<json, OpenAiError> parsed = request_json::ParseObjectBody(body);
  if (auto* error = std::get_if<OpenAiError>(&parsed)) return *error;
  const json& b = std::get<json>(parsed);
  EmbeddingsRequest r;
  if (const json* model = Field(b, "model")) {
    if (!model->is_string()) return Bad("model", "model must be a string");
    r.model = model->get<std::string>();
  }
  const json* input = Field(b, "input");
  if (input == nullptr) return Bad("input", "input is required");
  constexpr std::string_view kForms =
      "a string, an array of strings, an array of token ids or an array of arrays of token ids";
  auto read_ids = [&](const json& list, std::string where,
                      std::vector<int32_t>* ids) -> std::optional<OpenAiError> {
    if (list.empty()) return Bad("input", where + " is an empty list of token ids");
    for (const json& id : list) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return Bad("input", where + " holds " + Show(id) + ", not a token id");
      }
      ids->push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    return std::nullopt;
  };
  if (input->is_string()) {
    r.texts.push_back(input->get<std::string>());
  } else if (input->is_array()) {
    if (input->empty()) return Bad("input", "input is an empty list");
    if (static_cast<int64_t>(input->size()) > max_inputs) {
      return Bad("input", "input has " + std::to_string(input->size()) + " items; at most " +
                              std::to_string(max_inputs) + " are allowed");
    }
    const json& first = input->front();
    if (first.is_string()) {
      for (size_t i = 0; i < input->size(); ++i) {
        if (!(*input)[i].is_string()) {
          return Bad("input", "input[" + std::to_string(i) + "] is not a string (input must be " +
                                  std::string(kForms) + ")");
        }
        r.texts.push_back((*input)[i].get<std::string>());
      }
    } else if (first.is_number()) {
      r.id_lists.emplace_back();
      if (auto error = read_ids(*input, "input", &r.id_lists.back())) return *error;
    } else if (first.is_array()) {
      for (size_t i = 0; i < input->size(); ++i) {
        const std::string where = "input[" + std::to_string(i) + "]";
        if (!(*input)[i].is_array()) {
          return Bad("input", where + " is not a list of token ids");
        }
        r.id_lists.emplace_back();
        if (auto error = read_ids((*input)[i], where, &r.id_lists.back())) return *error;
      }
    } else {
      return Bad("input", "input must be " + std::string(kForms));
    }
  } else {
    return Bad("input", "input must be " + std::string(kForms));
  }
  for (size_t i = 0; i < r.texts.size(); ++i) {
    if (r.texts[i].empty()) {
      return Bad("input", "input[" + std::to_string(i) + "] is an empty string");
    }
  }
  if (const json* format = Field(b, "encoding_format")) {
    if (!format->is_string() || (*format != "float" && *format != "base64")) {
      return Bad("encoding_format",
                 "encoding_format must be \"float\" or \"base64\", got " + Show(*format));
    }
    r.base64 = *format == "base64";
  }
  if (const json* dimensions = Field(b, "dimensions")) {
    if (!dimensions->is_number_integer() || dimensions->get<int64_t>() < 1) {
      return Bad("dimensions", "dimensions must be a positive integer, got " + Show(*dimensions));
    }
    r.dimensions = dimensions->get<int64_t>();
  }
  if (const json* truncate = Field(b, "truncate")) {
    if (!truncate->is_boolean()) return Bad("truncate", "truncate must be true or false");
    r.truncate = truncate->get<bool>();
  }
  if (const json* user = Field(b, "user"); user != nullptr && !user->is_string()) {
    return Bad("user", "user must be a string");
  }
  if (const json* priority = Field(b, "priority")) {
    std::optional<engine::Priority> p;
    if (priority->is_string()) p = serving::ParsePriorityValue(priority->get<std::string>());
    if (priority->is_number_integer()) {
      p = serving::ParsePriorityValue(std::to_string(priority->get<int64_t>()));
    }
    if (!p.has_value()) {
      return Bad("priority", "priority must be critical, high, normal or low (or 0..3), got " +
                                 Show(*priority));
    }
    r.priority = p;
  }
  return r;
}

// The response header naming the class a request ran in (or was refused in).
constexpr const char* kPriorityApplied = "X-Priority-Applied";

// The answer to 429 / 503 / 400 from the batcher.
HttpResponse FromBatcherStatus(const Status& status) {
  const int http = HttpStatusOf(status);
  HttpResponse response = ErrorResponse(http, status.message(), http == 400 ? "input" : "",
                                        http == 429   ? "rate_limit_exceeded"
                                        : http == 503 ? "model_unavailable"
                                                      : "");
  if (http == 429) response.headers.emplace_back("Retry-After", "1");
  return response;
}

}  // namespace

namespace {

// Cuts `ids` ([CLS] ... [SEP]) to `limit`, [SEP] kept, or refuses it (FAILED_PRECONDITION).
Status FitToLimit(std::vector<int32_t>* ids, size_t index, int64_t limit, bool truncate,
                  int32_t sep) {
  if (static_cast<int64_t>(ids->size()) <= limit) return Status::Ok();
  if (!truncate) {
    return FailedPreconditionError(
        "input[" + std::to_string(index) + "] has " + std::to_string(ids->size()) +
        " tokens; the model takes at most " + std::to_string(limit) + " (truncate is false)");
  }
  ids->resize(static_cast<size_t>(limit));
  ids->back() = sep;
  return Status::Ok();
}

}  // namespace

Result<std::vector<std::vector<int32_t>>> TokenizeTexts(const tokenizer::Tokenizer& tokenizer,
                                                        std::span<const std::string> texts,
                                                        int64_t limit, bool truncate) {
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < texts.size(); ++i) {
    if (texts[i].empty()) {
      return InvalidArgumentError("input[" + std::to_string(i) + "] is an empty string");
    }
    Result<std::vector<int32_t>> encoded = tokenizer.Encode(texts[i]);
    if (!encoded.ok()) {
      return InvalidArgumentError("input[" + std::to_string(i) +
                                  "]: " + encoded.status().message());
    }
    out.push_back(std::move(encoded).value());
    PIER_RETURN_IF_ERROR(FitToLimit(&out.back(), i, limit, truncate, tokenizer.eos_id()));
  }
  return out;
}

Result<std::vector<std::vector<int32_t>>> PrepareTokenIds(
    const tokenizer::Tokenizer& tokenizer, std::vector<std::vector<int32_t>> id_lists,
    int64_t limit, bool truncate) {
  const int32_t cls = tokenizer.bos_id(), sep = tokenizer.eos_id();
  for (size_t i = 0; i < id_lists.size(); ++i) {
    std::vector<int32_t>& ids = id_lists[i];
    if (ids.empty()) {
      return InvalidArgumentError("input[" + std::to_string(i) + "] is an empty list of ids");
    }
    for (int32_t id : ids) {
      if (id < 0 || id >= tokenizer.vocab_size()) {
        return InvalidArgumentError("input[" + std::to_string(i) + "]: token id " +
                                    std::to_string(id) + " is outside the vocabulary (size " +
                                    std::to_string(tokenizer.vocab_size()) + ")");
      }
    }
    if (ids.front() != cls) ids.insert(ids.begin(), cls);
    if (ids.back() != sep || ids.size() == 1) ids.push_back(sep);
    PIER_RETURN_IF_ERROR(FitToLimit(&ids, i, limit, truncate, sep));
  }
  return id_lists;
}

std::string Base64Floats(const float* values, size_t n) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<unsigned char> bytes(n * 4);
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &values[i], 4);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + b] = static_cast<unsigned char>(bits >> (8 * b));
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t chunk = (uint32_t{bytes[i]} << 16) |
                           (i + 1 < bytes.size() ? uint32_t{bytes[i + 1]} << 8 : 0) |
                           (i + 2 < bytes.size() ? uint32_t{bytes[i + 2]} : 0);
    out += kAlphabet[(chunk >> 18) & 63];
    out += kAlphabet[(chunk >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(chunk >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[chunk & 63] : '=';
  }
  return out;
}

struct EmbeddingsApi::Impl {
  EmbeddingsApiOptions options;
  serving::ModelRegistry* registry;
  const ApiKeys* keys;
  serving::ServingMetrics* metrics;

  HttpResponse Handle(const HttpRequest& http);
  HttpResponse Serve(const HttpRequest& http, const EmbeddingsRequest& r,
                     const Principal& principal, const serving::ModelRef& model);
  // Serve() once the request's priority class is decided: tokenization, admission, the batcher.
  HttpResponse ServeInClass(const EmbeddingsRequest& r, const Principal& principal,
                            const serving::ModelRef& model,
                            const serving::RequestClass& request_class,
                            const std::string& class_name);
};

HttpResponse EmbeddingsApi::Impl::Handle(const HttpRequest& http) {
  Principal principal;
  if (keys != nullptr) {
    auto auth = keys->Authenticate(http);
    if (auto* denied = std::get_if<HttpResponse>(&auth)) return std::move(*denied);
    principal = std::get<Principal>(std::move(auth));
  }
  auto parsed = Parse(http.body, options.max_inputs);
  if (const auto* error = std::get_if<OpenAiError>(&parsed)) {
    return ErrorResponse(error->status, error->message, error->param, error->code);
  }
  const EmbeddingsRequest& r = std::get<EmbeddingsRequest>(parsed);
  Result<serving::ModelEntry> found = registry->Lookup(r.model);
  if (!found.ok()) {
    return ErrorResponse(404, found.status().message(), "model", "model_not_found");
  }
  if (found->state != serving::ModelState::kReady) {
    return ModelNotReady(registry, *found, options.load_wait,
                         [this, http] { return Handle(http); });
  }
  HttpResponse response = Serve(http, r, principal, found->model);
  response.model = found->id;
  return response;
}

HttpResponse EmbeddingsApi::Impl::Serve(const HttpRequest& http, const EmbeddingsRequest& r,
                                        const Principal& principal,
                                        const serving::ModelRef& model_ref) {
  const serving::ServedModel& model = *model_ref;
  if (model.kind != serving::ModelKind::kEmbed || model.embedder == nullptr) {
    return ErrorResponse(400,
                         "model '" + model.id + "' is a " +
                             std::string(serving::ModelKindName(model.kind)) +
                             " model (an LLM); it cannot embed: name an embedding model",
                         "model", "model_kind");
  }
  if (model.per_token_embeddings) {
    return ErrorResponse(400,
                         "model '" + model.id +
                             "' pools none: it gives a vector per token, and this API one per "
                             "input; ask KServe v2 (POST /v2/models/" +
                             model.id + "/infer) for the [texts, tokens, dim] tensor",
                         "model", "pooling_none");
  }
  const int64_t dim = model.embedding_dim;
  if (r.dimensions > dim) {
    return ErrorResponse(400,
                         "dimensions " + std::to_string(r.dimensions) + " is more than model '" +
                             model.id + "' gives (" + std::to_string(dim) + ")",
                         "dimensions");
  }
  Result<serving::RequestClass> request_class = serving::ResolveRequestClass(
      r.priority, http.Header("x-priority"), principal.tenant, principal.max_priority);
  if (!request_class.ok()) return ErrorResponse(400, request_class.status().message(), "priority");
  // Every answer from here on, refusals (429) included, names the class it was decided in:
  // the one given now, and the one the batcher resolves later.
  const std::string class_name(engine::PriorityName(request_class->priority));
  HttpResponse response = ServeInClass(r, principal, model_ref, *request_class, class_name);
  if (response.deferred == nullptr) response.headers.emplace_back(kPriorityApplied, class_name);
  return response;
}

HttpResponse EmbeddingsApi::Impl::ServeInClass(const EmbeddingsRequest& r,
                                               const Principal& principal,
                                               const serving::ModelRef& model_ref,
                                               const serving::RequestClass& request_class,
                                               const std::string& class_name) {
  const serving::ServedModel& model = *model_ref;
  const int64_t dim = model.embedding_dim;
  serving::EmbedRequest request;
  Result<std::vector<std::vector<int32_t>>> ids =
      r.texts.empty()
          ? PrepareTokenIds(*model.tokenizer, r.id_lists, model.max_request_tokens, r.truncate)
          : TokenizeTexts(*model.tokenizer, r.texts, model.max_request_tokens, r.truncate);
  if (!ids.ok()) {
    return ErrorResponse(
        400, "model '" + model.id + "': " + ids.status().message(), "input",
        ids.status().code() == StatusCode::kFailedPrecondition ? "context_length_exceeded" : "");
  }
  request.texts = std::move(ids).value();
  int64_t cost = 0;
  for (const auto& ids : request.texts) cost += static_cast<int64_t>(ids.size());
  std::shared_ptr<KeySlot> slot;
  if (std::optional<KeyRefusal> refused = AdmitKeyRequest(principal, request_class.priority, cost,
                                                          "input tokens", "input", &slot)) {
    return ResponseOf(*refused);
  }
  // Higher classes first: critical (0) is the highest.
  request.priority = 3 - static_cast<int>(request_class.priority);
  request.deadline = serving::QueueDeadline(options.class_max_queue, request_class.priority,
                                            std::chrono::steady_clock::now());
  request.normalize = true;

  auto pending = std::make_shared<PendingResponse>();
  const bool base64 = r.base64;
  const int64_t dims = r.dimensions > 0 ? r.dimensions : dim;
  const std::string id = model.id;
  std::shared_ptr<serving::RequestBoard::Ticket> live;
  if (options.board != nullptr) {
    live = options.board->Open({.request_id = "",
                                .model = model.id,
                                .route = "/v1/embeddings",
                                .tenant = principal.tenant,
                                .priority_class = class_name});
  }
  Status submitted =
      model.embedder->Submit(std::move(request), [pending, base64, dims, dim, id, model_ref, slot,
                                                  class_name, live](serving::EmbedResult result) {
        if (!result.status.ok()) {
          HttpResponse refused = FromBatcherStatus(result.status);
          refused.headers.emplace_back(kPriorityApplied, class_name);
          pending->Resolve(std::move(refused));
          return;
        }
        const size_t count = result.vectors.size() / static_cast<size_t>(dim);
        std::string body = "{\"object\":\"list\",\"data\":[";
        std::vector<float> v(static_cast<size_t>(dims));
        for (size_t i = 0; i < count; ++i) {
          std::memcpy(v.data(), result.vectors.data() + i * dim, sizeof(float) * dims);
          if (dims < dim) serving::NormalizeL2(v.data(), dims);
          if (i > 0) body += ',';
          body += "{\"object\":\"embedding\",\"index\":" + std::to_string(i) + ",\"embedding\":";
          if (base64) {
            body += '"' + Base64Floats(v.data(), v.size()) + '"';
          } else {
            body += json(v).dump();
          }
          body += '}';
        }
        body += "],\"model\":" + json(id).dump() +
                ",\"usage\":{\"prompt_tokens\":" + std::to_string(result.prompt_tokens) +
                ",\"total_tokens\":" + std::to_string(result.prompt_tokens) + "}}";
        HttpResponse response;
        response.body = std::move(body);
        response.model = id;
        response.headers.emplace_back(kPriorityApplied, class_name);
        pending->Resolve(std::move(response));
      });
  if (!submitted.ok()) return FromBatcherStatus(submitted);
  HttpResponse response;
  response.deferred = pending;
  return response;
}

EmbeddingsApi::EmbeddingsApi(EmbeddingsApiOptions options, serving::ModelRegistry* registry,
                             const ApiKeys* keys, serving::ServingMetrics* metrics)
    : impl_(std::make_shared<Impl>(Impl{options, registry, keys, metrics})) {}

EmbeddingsApi::~EmbeddingsApi() = default;

void EmbeddingsApi::Register(Router& router) {
  std::shared_ptr<Impl> impl = impl_;
  for (const char* path : {"/v1/embeddings", "/embeddings"}) {
    router.Add("POST", path, [impl](const HttpRequest& request) { return impl->Handle(request); });
  }
}

}  // namespace pier::api
