// The tokenizer routes (llama.cpp's /tokenize and /detokenize): a model's tokenizer over HTTP,
// for clients that count or inspect tokens. The body names its model (the default one when it
// does not), which an on-demand model loads for, as the /v1 routes do.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "api/admin/admin_routes.h"
#include "api/json_shape.h"
#include "api/pending_response.h"
#include "tokenizer/unicode.h"

namespace pier::api {
namespace {

using Json = nlohmann::ordered_json;

HttpResponse JsonResponse(int status, const Json& body) {
  HttpResponse response;
  response.status = status;
  // Decoded text may hold bytes that are not UTF-8: replace rather than throw.
  response.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  return response;
}

// The request body as a JSON object, or a 400 response.
std::variant<Json, HttpResponse> ParseObject(const HttpRequest& request) {
  Json body;
  try {
    body = Json::parse(request.body);
  } catch (const Json::parse_error& e) {
    return ErrorResponse(400, "the request body is " + InvalidJsonMessage(e));
  }
  if (!body.is_object()) return ErrorResponse(400, "the request body must be a JSON object");
  return body;
}

// The body's optional `model` as the registry resolves it; or the 404 / 503 to answer, or a
// wait for an on-demand load after which `retry` handles the request again.
std::variant<serving::ModelRef, HttpResponse> ModelOfBody(serving::ModelRegistry* registry,
                                                          const Json& body,
                                                          std::chrono::milliseconds load_wait,
                                                          std::function<HttpResponse()> retry) {
  std::string name;
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string())
      return ErrorResponse(400, "\"model\" must be a string", "model");
    name = body["model"].get<std::string>();
  }
  Result<serving::ModelEntry> found = registry->Lookup(name);
  if (!found.ok()) return ErrorResponse(404, found.status().message(), "model", "model_not_found");
  if (found->state != serving::ModelState::kReady || found->model == nullptr) {
    return ModelNotReady(registry, *found, load_wait, std::move(retry));
  }
  return found->model;
}

HttpResponse TokenizeWith(const tokenizer::Tokenizer& model_tokenizer, const Json& body);
HttpResponse DetokenizeWith(const tokenizer::Tokenizer& model_tokenizer, const Json& body);

// A tokenizer route: the body as a JSON object, its model (waiting for an on-demand load, then
// `retry`), then `work` with the model's tokenizer; the response counts under the model.
HttpResponse WithModelOfBody(serving::ModelRegistry* registry, std::chrono::milliseconds load_wait,
                             const HttpRequest& request,
                             HttpResponse (*work)(const tokenizer::Tokenizer&, const Json&),
                             std::function<HttpResponse()> retry) {
  auto parsed = ParseObject(request);
  if (HttpResponse* error = std::get_if<HttpResponse>(&parsed)) return std::move(*error);
  const Json& body = std::get<Json>(parsed);
  auto model = ModelOfBody(registry, body, load_wait, std::move(retry));
  if (HttpResponse* error = std::get_if<HttpResponse>(&model)) return std::move(*error);
  const serving::ModelRef served = std::get<serving::ModelRef>(model);
  HttpResponse response = work(*served->tokenizer, body);
  response.model = served->id;
  return response;
}
}  // namespace

HttpResponse AdminRoutes::Tokenize(const HttpRequest& request) {
  if (auto denied = RequireKey(request)) return std::move(*denied);
  return WithModelOfBody(registry_, options_.load_wait, request, &TokenizeWith,
                         [this, request] { return Tokenize(request); });
}

namespace {

// /tokenize's work once the body is parsed and its model ready.
HttpResponse TokenizeWith(const tokenizer::Tokenizer& model_tokenizer, const Json& body) {
  const tokenizer::Tokenizer* tokenizer = &model_tokenizer;
  if (!body.contains("content")) return ErrorResponse(400, "\"content\" is required", "content");
  if (!body["content"].is_string()) {
    return ErrorResponse(400, "\"content\" must be a string", "content");
  }
  tokenizer::EncodeOptions encode;
  if (body.contains("add_special")) {
    if (!body["add_special"].is_boolean()) {
      return ErrorResponse(400, "\"add_special\" must be a boolean", "add_special");
    }
    encode.add_special = body["add_special"].get<bool>();
  }
  bool with_pieces = false;
  if (body.contains("with_pieces")) {
    if (!body["with_pieces"].is_boolean()) {
      return ErrorResponse(400, "\"with_pieces\" must be a boolean", "with_pieces");
    }
    with_pieces = body["with_pieces"].get<bool>();
  }
  Result<std::vector<tokenizer::TokenId>> ids =
      tokenizer->Encode(body["content"].get_ref<const std::string&>(), encode);
  if (!ids.ok()) return ErrorResponse(400, ids.status().message(), "content");
  if (!with_pieces) return JsonResponse(200, Json{{"tokens", *ids}});
  // llama.cpp's form: each token with its text, or its bytes when they are not UTF-8 alone
  // (a piece of a multi-byte character).
  Json tokens = Json::array();
  for (tokenizer::TokenId id : *ids) {
    const std::string piece = tokenizer->Decode(std::span<const tokenizer::TokenId>(&id, 1));
    Json entry = {{"id", id}};
    if (tokenizer::ValidateUtf8(piece).ok()) {
      entry["piece"] = piece;
    } else {
      Json bytes = Json::array();
      for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
      entry["piece"] = std::move(bytes);
    }
    tokens.push_back(std::move(entry));
  }
  return JsonResponse(200, Json{{"tokens", std::move(tokens)}});
}

}  // namespace

HttpResponse AdminRoutes::Detokenize(const HttpRequest& request) {
  if (auto denied = RequireKey(request)) return std::move(*denied);
  return WithModelOfBody(registry_, options_.load_wait, request, &DetokenizeWith,
                         [this, request] { return Detokenize(request); });
}

namespace {

// /detokenize's work once the body is parsed and its model ready.
HttpResponse DetokenizeWith(const tokenizer::Tokenizer& model_tokenizer, const Json& body) {
  const tokenizer::Tokenizer* tokenizer = &model_tokenizer;
  if (!body.contains("tokens")) return ErrorResponse(400, "\"tokens\" is required", "tokens");
  const Json& tokens = body["tokens"];
  if (!tokens.is_array())
    return ErrorResponse(400, "\"tokens\" must be a list of token ids", "tokens");
  const int64_t vocab = tokenizer->vocab_size();
  std::vector<tokenizer::TokenId> ids;
  ids.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const Json& t = tokens[i];
    if (!t.is_number_integer()) {
      return ErrorResponse(400, "tokens[" + std::to_string(i) + "] is not an integer", "tokens");
    }
    const int64_t id = t.is_number_unsigned() && t.get<uint64_t>() > uint64_t{INT64_MAX}
                           ? INT64_MAX
                           : t.get<int64_t>();
    if (id < 0 || id >= vocab) {
      return ErrorResponse(400,
                           "tokens[" + std::to_string(i) + "] = " + t.dump() +
                               " is outside the vocabulary [0, " + std::to_string(vocab) + ")",
                           "tokens");
    }
    ids.push_back(static_cast<tokenizer::TokenId>(id));
  }
  return JsonResponse(200, Json{{"content", tokenizer->Decode(ids, /*skip_special=*/false)}});
}

}  // namespace

}  // namespace pier::api
