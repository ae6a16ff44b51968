#include "grpc/kserve_grpc_server.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>
#include <future>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/build_info.h"
#include "encoder/embedding_batcher.h"
#include "grpc_predict_v2.grpc.pb.h"
#include "http/embeddings_api.h"
#include "http/kserve_api.h"
#include "http/kserve_token_ids.h"

namespace pier::grpc_api {
namespace {

using grpc::ServerContext;
using grpc::StatusCode;

grpc::Status Refuse(StatusCode code, const std::string& message) {
  return grpc::Status(code, message);
}

// The gRPC code for a Pier status from the batcher or the tokenizer.
StatusCode CodeOf(pier::StatusCode code) {
  switch (code) {
    case pier::StatusCode::kInvalidArgument:
    case pier::StatusCode::kFailedPrecondition:
      return StatusCode::INVALID_ARGUMENT;
    case pier::StatusCode::kResourceExhausted:
      return StatusCode::RESOURCE_EXHAUSTED;
    case pier::StatusCode::kNotFound:
      return StatusCode::NOT_FOUND;
    case pier::StatusCode::kUnavailable:
      return StatusCode::UNAVAILABLE;
    default:
      return StatusCode::INTERNAL;
  }
}

// The gRPC code for an HTTP error status the shared helpers answer with.
StatusCode CodeOfHttp(int status) {
  switch (status) {
    case 400:
      return StatusCode::INVALID_ARGUMENT;
    case 401:
      return StatusCode::UNAUTHENTICATED;
    case 404:
      return StatusCode::NOT_FOUND;
    case 429:
      return StatusCode::RESOURCE_EXHAUSTED;
    default:
      return StatusCode::UNAVAILABLE;
  }
}

// The message of an OpenAI-shaped error body.
std::string MessageOf(const http::HttpResponse& response) {
  try {
    return nlohmann::json::parse(response.body)["error"]["message"].get<std::string>();
  } catch (const nlohmann::json::exception&) {
    return "refused (HTTP " + std::to_string(response.status) + ")";
  }
}

}  // namespace

struct KServeGrpcServer::Impl final : public inference::GRPCInferenceService::Service {
  KServeGrpcOptions options;
  serving::ModelRegistry* registry;
  const http::ApiKeys* keys;
  std::unique_ptr<grpc::Server> server;
  int bound_port = 0;

  Impl(KServeGrpcOptions o, serving::ModelRegistry* r, const http::ApiKeys* k)
      : options(std::move(o)), registry(r), keys(k) {}

  // The caller's principal from `authorization` metadata, or the refusal.
  grpc::Status Authenticate(ServerContext* context, http::Principal* principal) const {
    if (keys == nullptr || !keys->enabled()) return grpc::Status::OK;
    http::HttpRequest request;
    for (const auto& [name, value] : context->client_metadata()) {
      std::string lower(name.data(), name.size());
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      request.headers.emplace_back(lower, std::string(value.data(), value.size()));
    }
    auto auth = keys->Authenticate(request);
    if (auto* denied = std::get_if<http::HttpResponse>(&auth)) {
      return Refuse(StatusCode::UNAUTHENTICATED, MessageOf(*denied));
    }
    *principal = std::get<http::Principal>(std::move(auth));
    return grpc::Status::OK;
  }

  // The ready model `name` at `version` ("" or "1").
  grpc::Status Find(const std::string& name, const std::string& version,
                    serving::ModelRef* model) const {
    if (!version.empty() && version != "1") {
      return Refuse(StatusCode::NOT_FOUND, "model '" + name + "' has no version '" + version +
                                               "' (Pier serves version 1)");
    }
    Result<serving::ModelEntry> entry = registry->Lookup(name);
    if (!entry.ok() || name.empty()) {
      return Refuse(StatusCode::NOT_FOUND,
                    name.empty() ? "no model named" : entry.status().message());
    }
    if (entry->state != serving::ModelState::kReady || entry->model == nullptr) {
      return Refuse(StatusCode::UNAVAILABLE,
                    "model '" + entry->id + "' is " +
                        std::string(serving::ModelStateName(entry->state)) +
                        (entry->reason.empty() ? "" : ": " + entry->reason));
    }
    *model = entry->model;
    return grpc::Status::OK;
  }

  grpc::Status ServerLive(ServerContext*, const inference::ServerLiveRequest*,
                          inference::ServerLiveResponse* response) override {
    response->set_live(true);
    return grpc::Status::OK;
  }

  grpc::Status ServerReady(ServerContext*, const inference::ServerReadyRequest*,
                           inference::ServerReadyResponse* response) override {
    std::string reason;
    response->set_ready(options.ready ? options.ready(&reason) : true);
    return grpc::Status::OK;
  }

  grpc::Status ModelReady(ServerContext* context, const inference::ModelReadyRequest* request,
                          inference::ModelReadyResponse* response) override {
    http::Principal principal;
    if (grpc::Status auth = Authenticate(context, &principal); !auth.ok()) return auth;
    serving::ModelRef model;
    grpc::Status found = Find(request->name(), request->version(), &model);
    if (found.error_code() == StatusCode::NOT_FOUND) return found;
    response->set_ready(found.ok());
    return grpc::Status::OK;
  }

  grpc::Status ServerMetadata(ServerContext*, const inference::ServerMetadataRequest*,
                              inference::ServerMetadataResponse* response) override {
    response->set_name("pier");
    response->set_version(std::string(BuildId()));
    response->add_extensions("binary_tensor_data");
    return grpc::Status::OK;
  }

  grpc::Status ModelMetadata(ServerContext* context, const inference::ModelMetadataRequest* request,
                             inference::ModelMetadataResponse* response) override {
    http::Principal principal;
    if (grpc::Status auth = Authenticate(context, &principal); !auth.ok()) return auth;
    serving::ModelRef model;
    if (grpc::Status found = Find(request->name(), request->version(), &model); !found.ok()) {
      return found;
    }
    response->set_name(model->id);
    response->add_versions("1");
    response->set_platform("pier");
    auto* input = response->add_inputs();
    auto* output = response->add_outputs();
    if (model->kind == serving::ModelKind::kEmbed) {
      input->set_name("text");
      input->set_datatype("BYTES");
      input->add_shape(-1);
      output->set_name("embedding");
      output->set_datatype("FP32");
      output->add_shape(-1);
      if (model->per_token_embeddings) output->add_shape(-1);  // tokens
      output->add_shape(model->embedding_dim);
    } else {
      input->set_name("text_input");
      input->set_datatype("BYTES");
      input->add_shape(1);
      output->set_name("text_output");
      output->set_datatype("BYTES");
      output->add_shape(1);
    }
    return grpc::Status::OK;
  }

  grpc::Status ModelInfer(ServerContext* context, const inference::ModelInferRequest* request,
                          inference::ModelInferResponse* response) override {
    http::Principal principal;
    if (grpc::Status auth = Authenticate(context, &principal); !auth.ok()) return auth;
    serving::ModelRef model_ref;
    if (grpc::Status found = Find(request->model_name(), request->model_version(), &model_ref);
        !found.ok()) {
      return found;
    }
    const serving::ServedModel& model = *model_ref;
    if (model.kind != serving::ModelKind::kEmbed || model.embedder == nullptr) {
      return Refuse(StatusCode::INVALID_ARGUMENT,
                    "model '" + model.id + "' is a " +
                        std::string(serving::ModelKindName(model.kind)) +
                        " model (an LLM): infer serves embedding models; use the OpenAI routes "
                        "for text");
    }
    // Token ids (INT32/INT64, optionally with an attention_mask): read as the HTTP route reads
    // them, from the same JSON form (contents as data, raw contents as binary, in input order).
    std::optional<std::vector<std::vector<int32_t>>> given_ids;
    std::vector<std::string> texts;
    if (request->inputs_size() >= 1 && http::IsTokenIdDatatype(request->inputs(0).datatype())) {
      nlohmann::json inputs = nlohmann::json::array();
      std::string binary;
      for (int i = 0; i < request->inputs_size(); ++i) {
        const auto& in = request->inputs(i);
        nlohmann::json j = {{"name", in.name()},
                            {"datatype", in.datatype()},
                            {"shape", std::vector<int64_t>(in.shape().begin(), in.shape().end())}};
        if (request->raw_input_contents_size() > i) {
          j["parameters"] = {{"binary_data_size", request->raw_input_contents(i).size()}};
          binary += request->raw_input_contents(i);
        } else if (in.datatype() == "INT64") {
          j["data"] = std::vector<int64_t>(in.contents().int64_contents().begin(),
                                           in.contents().int64_contents().end());
        } else {
          j["data"] = std::vector<int32_t>(in.contents().int_contents().begin(),
                                           in.contents().int_contents().end());
        }
        inputs.push_back(std::move(j));
      }
      Result<std::vector<std::vector<int32_t>>> lists = http::ReadTokenIdInputs(inputs, binary);
      if (!lists.ok()) {
        return Refuse(StatusCode::INVALID_ARGUMENT,
                      "model '" + model.id + "': " + lists.status().message());
      }
      if (lists->size() > http::kMaxInferTexts) {
        return Refuse(StatusCode::INVALID_ARGUMENT, "model '" + model.id + "': 1 to " +
                                                        std::to_string(http::kMaxInferTexts) +
                                                        " sequences per request");
      }
      given_ids = std::move(lists).value();
    }
    if (!given_ids.has_value()) {
      if (request->inputs_size() != 1) {
        return Refuse(StatusCode::INVALID_ARGUMENT,
                      "model '" + model.id +
                          "' takes one input: a BYTES tensor of texts, shape [n] (or token ids: "
                          "INT32/INT64 [n, len] with an optional attention_mask)");
      }
      const auto& input = request->inputs(0);
      std::vector<int64_t> shape(input.shape().begin(), input.shape().end());
      if (input.datatype() != "BYTES") {
        return Refuse(
            StatusCode::INVALID_ARGUMENT,
            http::CheckTextTensor(model.id, input.name(), input.datatype(), shape, 0).message());
      }
      if (!shape.empty() &&
          (shape[0] < 1 || static_cast<uint64_t>(shape[0]) > http::kMaxInferTexts)) {
        return Refuse(
            StatusCode::INVALID_ARGUMENT,
            http::CheckTextTensor(model.id, input.name(), input.datatype(), shape, 0).message());
      }
      if (request->raw_input_contents_size() > 0) {
        if (!http::ParseBinaryStrings(request->raw_input_contents(0), &texts)) {
          return Refuse(StatusCode::INVALID_ARGUMENT,
                        "input '" + input.name() +
                            "': raw_input_contents is not a sequence of length-prefixed strings");
        }
      } else if (static_cast<size_t>(input.contents().bytes_contents_size()) <=
                 http::kMaxInferTexts) {
        texts.assign(input.contents().bytes_contents().begin(),
                     input.contents().bytes_contents().end());
      } else {
        return Refuse(StatusCode::INVALID_ARGUMENT,
                      "input '" + input.name() + "' holds more than " +
                          std::to_string(http::kMaxInferTexts) + " texts");
      }
      if (Status tensor =
              http::CheckTextTensor(model.id, input.name(), input.datatype(), shape, texts.size());
          !tensor.ok()) {
        return Refuse(StatusCode::INVALID_ARGUMENT, tensor.message());
      }
    }
    for (const auto& output : request->outputs()) {
      if (output.name() != "embedding") {
        return Refuse(StatusCode::INVALID_ARGUMENT, "model '" + model.id + "' has no output '" +
                                                        output.name() +
                                                        "' (its output is 'embedding')");
      }
    }
    bool truncate = true;
    int priority = http::BatcherPriority(0, principal.max_priority);
    for (const auto& [key, value] : request->parameters()) {
      if (key == "truncate") {
        if (value.parameter_choice_case() != inference::InferParameter::kBoolParam) {
          return Refuse(StatusCode::INVALID_ARGUMENT, "parameter truncate must be a bool");
        }
        truncate = value.bool_param();
      } else if (key == "priority") {
        const uint64_t level =
            value.parameter_choice_case() == inference::InferParameter::kUint64Param
                ? value.uint64_param()
                : static_cast<uint64_t>(std::max<int64_t>(0, value.int64_param()));
        priority = http::BatcherPriority(level, principal.max_priority);
      }
    }
    Result<std::vector<std::vector<int32_t>>> ids =
        given_ids.has_value()
            ? http::PrepareTokenIds(*model.tokenizer, std::move(*given_ids),
                                    model.max_request_tokens, truncate)
            : http::TokenizeTexts(*model.tokenizer, texts, model.max_request_tokens, truncate);
    if (!ids.ok()) {
      return Refuse(StatusCode::INVALID_ARGUMENT,
                    "model '" + model.id + "': " + ids.status().message());
    }
    int64_t cost = 0;
    for (const auto& one : *ids) cost += static_cast<int64_t>(one.size());
    std::shared_ptr<http::KeySlot> slot;
    if (std::optional<http::HttpResponse> refused =
            http::AdmitKeyRequest(principal, http::ClassOfBatcherPriority(priority), cost,
                                  "input tokens", "inputs", &slot)) {
      return Refuse(CodeOfHttp(refused->status), MessageOf(*refused));
    }
    encoder::EmbedRequest embed;
    embed.texts = std::move(ids).value();
    embed.priority = priority;
    embed.deadline =
        serving::QueueDeadline(options.class_max_queue, http::ClassOfBatcherPriority(priority),
                               std::chrono::steady_clock::now());
    std::promise<encoder::EmbedResult> promise;
    std::future<encoder::EmbedResult> future = promise.get_future();
    Status submitted = model.embedder->Submit(
        std::move(embed), [&promise](encoder::EmbedResult r) { promise.set_value(std::move(r)); });
    if (!submitted.ok()) return Refuse(CodeOf(submitted.code()), submitted.message());
    encoder::EmbedResult result = future.get();
    if (!result.status.ok()) {
      return Refuse(CodeOf(result.status.code()), result.status.message());
    }
    response->set_model_name(model.id);
    response->set_model_version("1");
    response->set_id(request->id());
    auto* output = response->add_outputs();
    output->set_name("embedding");
    output->set_datatype("FP32");
    // Pooling none: [texts, longest, dim], shorter texts padded with zero vectors.
    int64_t longest = 0;
    if (!result.tokens_per_text.empty()) {
      result.vectors = encoder::PaddedTokenVectors(result, &longest);
    }
    output->add_shape(static_cast<int64_t>(result.vectors.size()) / result.dim /
                      std::max<int64_t>(1, longest));
    if (longest > 0) output->add_shape(longest);
    output->add_shape(result.dim);
    std::string* raw = response->add_raw_output_contents();
    raw->resize(result.vectors.size() * sizeof(float));
    std::memcpy(raw->data(), result.vectors.data(), raw->size());  // little-endian on x86-64
    return grpc::Status::OK;
  }
};

KServeGrpcServer::KServeGrpcServer(KServeGrpcOptions options, serving::ModelRegistry* registry,
                                   const http::ApiKeys* keys)
    : impl_(std::make_unique<Impl>(std::move(options), registry, keys)) {}

KServeGrpcServer::~KServeGrpcServer() { Shutdown(0); }

Status KServeGrpcServer::Start() {
  grpc::ServerBuilder builder;
  const std::string address = impl_->options.host + ":" + std::to_string(impl_->options.port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &impl_->bound_port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(impl_->options.max_message_bytes));
  builder.RegisterService(impl_.get());
  impl_->server = builder.BuildAndStart();
  if (impl_->server == nullptr || impl_->bound_port == 0) {
    impl_->server.reset();
    return UnavailableError("gRPC: cannot listen on " + address);
  }
  return Status::Ok();
}

int KServeGrpcServer::port() const { return impl_->bound_port; }

void KServeGrpcServer::Shutdown(double grace_seconds) {
  if (impl_->server == nullptr) return;
  impl_->server->Shutdown(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(grace_seconds * 1000)));
  impl_->server->Wait();
  impl_->server.reset();
}

}  // namespace pier::grpc_api
