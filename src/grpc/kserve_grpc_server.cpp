#include "grpc/kserve_grpc_server.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <future>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api/kserve/embed_infer.h"
#include "api/kserve/kserve_api.h"
#include "api/kserve/kserve_infer_request.h"
#include "api/kserve/tensor_infer.h"
#include "api/kserve/tensor_infer_request.h"
#include "api/kserve/tensor_model_json.h"
#include "api/openai/embeddings_api.h"
#include "common/build_info.h"
#include "grpc/grpc_status.h"
#include "grpc_predict_v2.grpc.pb.h"
#include "serving/embedder.h"
#include "serving/tensor_runner.h"

namespace pier::grpc_api {
namespace {

using grpc::ServerContext;
using grpc::StatusCode;

// The route infer requests show under on the live request board.
constexpr const char* kInferRoute = "/inference.GRPCInferenceService/ModelInfer";

grpc::Status Refuse(StatusCode code, const std::string& message) {
  return grpc::Status(code, message);
}

// A parameter as the JSON value the HTTP form carries: JSON reads an integer that is 0 or more
// as unsigned, so a non-negative int64 becomes one too.
nlohmann::json ParameterAsJson(const inference::InferParameter& p) {
  switch (p.parameter_choice_case()) {
    case inference::InferParameter::kBoolParam:
      return p.bool_param();
    case inference::InferParameter::kInt64Param:
      if (p.int64_param() >= 0) return static_cast<uint64_t>(p.int64_param());
      return p.int64_param();
    case inference::InferParameter::kUint64Param:
      return p.uint64_param();
    case inference::InferParameter::kStringParam:
      return p.string_param();
    case inference::InferParameter::kDoubleParam:
      return p.double_param();
    default:
      return nullptr;
  }
}

nlohmann::json ParametersAsJson(
    const google::protobuf::Map<std::string, inference::InferParameter>& parameters) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, value] : parameters) out[key] = ParameterAsJson(value);
  return out;
}

// Whether `contents` holds any value, in whichever field.
bool HoldsValues(const inference::InferTensorContents& c) {
  return c.bool_contents_size() + c.int_contents_size() + c.int64_contents_size() +
             c.uint_contents_size() + c.uint64_contents_size() + c.fp32_contents_size() +
             c.fp64_contents_size() + c.bytes_contents_size() >
         0;
}

// The `contents` field that holds a datatype's values (KServe's gRPC: the 8- to 32-bit
// integers share int_contents and uint_contents); null for FP16 and BF16, which have none
// (their values travel in raw_input_contents) and for a name KServe does not know.
const char* ContentsField(const std::string& datatype) {
  if (datatype == "BOOL") return "bool_contents";
  if (datatype == "UINT8" || datatype == "UINT16" || datatype == "UINT32") return "uint_contents";
  if (datatype == "UINT64") return "uint64_contents";
  if (datatype == "INT8" || datatype == "INT16" || datatype == "INT32") return "int_contents";
  if (datatype == "INT64") return "int64_contents";
  if (datatype == "FP32") return "fp32_contents";
  if (datatype == "FP64") return "fp64_contents";
  if (datatype == "BYTES") return "bytes_contents";
  return nullptr;
}

template <typename T, typename Repeated>
nlohmann::json ListOf(const Repeated& values) {
  return std::vector<T>(values.begin(), values.end());
}

// The values of `contents` as the HTTP form's `data`, from the datatype's field (the shared
// reading then checks each value against the datatype's range). INVALID_ARGUMENT when values
// are in another field, or the datatype has none (FP16, BF16).
Result<nlohmann::json> ContentsAsJson(const std::string& name, const std::string& datatype,
                                      const inference::InferTensorContents& c) {
  const std::string field = ContentsField(datatype) == nullptr ? "" : ContentsField(datatype);
  nlohmann::json data = nlohmann::json::array();
  size_t in_field = 0;
  if (field == "bool_contents") {
    data = ListOf<bool>(c.bool_contents());
  } else if (field == "uint_contents") {
    data = ListOf<uint32_t>(c.uint_contents());
  } else if (field == "uint64_contents") {
    data = ListOf<uint64_t>(c.uint64_contents());
  } else if (field == "int_contents") {
    data = ListOf<int32_t>(c.int_contents());
  } else if (field == "int64_contents") {
    data = ListOf<int64_t>(c.int64_contents());
  } else if (field == "fp32_contents") {
    data = ListOf<float>(c.fp32_contents());
  } else if (field == "fp64_contents") {
    data = ListOf<double>(c.fp64_contents());
  } else if (field == "bytes_contents") {
    data = ListOf<std::string>(c.bytes_contents());
  } else if (datatype == "FP16" || datatype == "BF16") {
    return InvalidArgumentError("input '" + name + "': " + datatype +
                                " has no `contents` field in KServe's gRPC: send its values in "
                                "raw_input_contents");
  }
  in_field = data.size();
  const size_t total = c.bool_contents_size() + c.int_contents_size() + c.int64_contents_size() +
                       c.uint_contents_size() + c.uint64_contents_size() + c.fp32_contents_size() +
                       c.fp64_contents_size() + c.bytes_contents_size();
  if (!field.empty() && total != in_field) {
    return InvalidArgumentError("input '" + name + "': " + datatype + " values go in contents." +
                                field);
  }
  return data;
}

// `request` in KServe's JSON form, as the HTTP route reads it (http/kserve_infer_request.h),
// with its raw_input_contents concatenated in input order into `binary`, each one that input's
// binary data. Checked here only what gRPC alone can get wrong: raw contents that do not go
// one per input.
Result<nlohmann::json> RequestAsJson(const inference::ModelInferRequest& request,
                                     std::string* binary) {
  const int raw = request.raw_input_contents_size();
  if (raw != 0 && raw != request.inputs_size()) {
    return InvalidArgumentError("raw_input_contents holds " + std::to_string(raw) +
                                " entries for " + std::to_string(request.inputs_size()) +
                                " inputs: one per input, in input order (or none)");
  }
  nlohmann::json inputs = nlohmann::json::array();
  for (int i = 0; i < request.inputs_size(); ++i) {
    const auto& in = request.inputs(i);
    nlohmann::json input = {{"name", in.name()},
                            {"datatype", in.datatype()},
                            {"shape", std::vector<int64_t>(in.shape().begin(), in.shape().end())}};
    // Both may be set: the shared reading then refuses the input naming both.
    if (HoldsValues(in.contents()) || raw == 0) {
      PIER_ASSIGN_OR_RETURN(input["data"], ContentsAsJson(in.name(), in.datatype(), in.contents()));
    }
    if (raw != 0) {
      input["parameters"] = {{"binary_data_size", request.raw_input_contents(i).size()}};
      *binary += request.raw_input_contents(i);
    }
    inputs.push_back(std::move(input));
  }
  nlohmann::json outputs = nlohmann::json::array();
  for (const auto& output : request.outputs()) {
    nlohmann::json one = {{"name", output.name()}};
    // classification (an integer); binary_data means nothing here (outputs are always raw).
    nlohmann::json parameters = ParametersAsJson(output.parameters());
    parameters.erase("binary_data");
    if (!parameters.empty()) one["parameters"] = std::move(parameters);
    outputs.push_back(std::move(one));
  }
  nlohmann::json out = {{"id", request.id()},
                        {"inputs", std::move(inputs)},
                        {"parameters", ParametersAsJson(request.parameters())}};
  if (!outputs.empty()) out["outputs"] = std::move(outputs);
  return out;
}

}  // namespace

struct KServeGrpcServer::Impl final : public inference::GRPCInferenceService::Service {
  KServeGrpcOptions options;
  serving::ModelRegistry* registry;
  const api::ApiKeys* keys;
  std::unique_ptr<grpc::Server> server;
  int bound_port = 0;

  Impl(KServeGrpcOptions o, serving::ModelRegistry* r, const api::ApiKeys* k)
      : options(std::move(o)), registry(r), keys(k) {}

  // The caller's principal from `authorization` metadata, or the refusal.
  grpc::Status Authenticate(ServerContext* context, api::Principal* principal) const {
    if (keys == nullptr || !keys->enabled()) return grpc::Status::OK;
    // gRPC metadata keys arrive lower-case; the first of each counts, as with HTTP headers
    // (a multimap keeps equal keys in arrival order).
    const auto& metadata = context->client_metadata();
    auto first = [&metadata](const char* key) -> std::optional<std::string_view> {
      auto it = metadata.lower_bound(key);
      if (it == metadata.end() || it->first != key) return std::nullopt;
      return std::string_view(it->second.data(), it->second.size());
    };
    auto auth = keys->Authenticate(api::Credentials{first("authorization"), first("x-api-key")});
    if (auto* denied = std::get_if<api::AuthRefusal>(&auth)) {
      return Refuse(StatusCode::UNAUTHENTICATED, denied->message);
    }
    *principal = std::get<api::Principal>(std::move(auth));
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
    api::Principal principal;
    if (grpc::Status auth = Authenticate(context, &principal); !auth.ok()) return auth;
    if (PipelineOf(request->name()) != nullptr) {
      response->set_ready(true);
      return grpc::Status::OK;
    }
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
    api::Principal principal;
    if (grpc::Status auth = Authenticate(context, &principal); !auth.ok()) return auth;
    if (std::shared_ptr<pipelines::Pipeline> pipeline = PipelineOf(request->name())) {
      const pipelines::PipelineSpec& spec = pipeline->spec();
      response->set_name(spec.name);
      response->add_versions("1");
      response->set_platform("pier_pipeline");
      auto add = [](const pipelines::PipelineTensor& t, auto* tensor) {
        tensor->set_name(t.name);
        tensor->set_datatype(std::string(ElementTypeName(t.type)));
        for (int64_t d : t.shape) tensor->add_shape(d);
      };
      for (const auto& t : spec.inputs) add(t, response->add_inputs());
      for (const auto& t : spec.outputs) add(t, response->add_outputs());
      return grpc::Status::OK;
    }
    serving::ModelRef model;
    if (grpc::Status found = Find(request->name(), request->version(), &model); !found.ok()) {
      return found;
    }
    response->set_name(model->id);
    response->add_versions("1");
    if (model->kind == serving::ModelKind::kTensor && model->tensors != nullptr) {
      const serving::TensorModelInfo& info = model->tensors->info();
      response->set_platform(info.platform);
      auto add = [](const TensorSpec& spec, auto* tensor) {
        tensor->set_name(spec.name);
        tensor->set_datatype(std::string(ElementTypeName(spec.type)));
        for (int64_t d : spec.shape) tensor->add_shape(d);
      };
      for (const TensorSpec& spec : info.inputs) add(spec, response->add_inputs());
      for (const TensorSpec& spec : info.outputs) add(spec, response->add_outputs());
      return grpc::Status::OK;
    }
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
    api::Principal principal;
    if (grpc::Status auth = Authenticate(context, &principal); !auth.ok()) return auth;
    if (std::shared_ptr<pipelines::Pipeline> pipeline = PipelineOf(request->model_name())) {
      return InferPipeline(context, *request, pipeline, principal, response);
    }
    serving::ModelRef model_ref;
    if (grpc::Status found = Find(request->model_name(), request->model_version(), &model_ref);
        !found.ok()) {
      return found;
    }
    const serving::ServedModel& model = *model_ref;
    const bool tensors = model.kind == serving::ModelKind::kTensor && model.tensors != nullptr;
    if (!tensors && (model.kind != serving::ModelKind::kEmbed || model.embedder == nullptr)) {
      return Refuse(StatusCode::INVALID_ARGUMENT,
                    "model '" + model.id + "' is a " +
                        std::string(serving::ModelKindName(model.kind)) +
                        " model (an LLM): infer serves embedding and tensor models; use the "
                        "OpenAI routes for text");
    }
    // The server takes messages up to the largest any model may need; each model its own.
    const int64_t limit =
        tensors ? api::TensorInferBodyLimit(model.tensors->info(), options.max_message_bytes,
                                            /*json=*/false)
                : options.max_message_bytes;
    if (const auto size = static_cast<int64_t>(request->ByteSizeLong()); size > limit) {
      return Refuse(StatusCode::RESOURCE_EXHAUSTED,
                    "received message of " + std::to_string(size) + " bytes is larger than max (" +
                        std::to_string(limit) + " bytes) for model '" + model.id + "'");
    }
    // The HTTP route's reading of the same request, so that the two refuse alike.
    std::string binary;
    Result<nlohmann::json> as_json = RequestAsJson(*request, &binary);
    if (!as_json.ok()) return Refuse(StatusCode::INVALID_ARGUMENT, as_json.status().message());
    if (tensors) {
      return InferTensors(context, *request, *as_json, binary, model_ref, principal, response);
    }
    Result<api::EmbedInferRequest> read = api::ReadEmbedInferRequest(model.id, *as_json, binary);
    if (!read.ok()) return Refuse(StatusCode::INVALID_ARGUMENT, read.status().message());
    // On the board until this call returns (it waits for the answer).
    const auto live =
        api::OpenInferTicket(options.board, request->id(), model.id, kInferRoute, principal,
                             api::BatcherPriority(read->priority, principal.max_priority));
    std::promise<Result<api::EmbedInferOutput>> promise;
    std::future<Result<api::EmbedInferOutput>> future = promise.get_future();
    if (std::optional<api::EmbedInferRefusal> refused = api::StartEmbedInfer(
            model, principal, std::move(read).value(), options.class_max_queue,
            [&promise](Result<api::EmbedInferOutput> r) { promise.set_value(std::move(r)); })) {
      return GrpcStatusOf(refused->status);
    }
    Result<api::EmbedInferOutput> result = future.get();
    if (!result.ok()) return GrpcStatusOf(result.status());
    response->set_model_name(model.id);
    response->set_model_version("1");
    response->set_id(request->id());
    auto* output = response->add_outputs();
    output->set_name("embedding");
    output->set_datatype("FP32");
    for (int64_t d : result->shape) output->add_shape(d);
    std::string* raw = response->add_raw_output_contents();
    raw->resize(result->values.size() * sizeof(float));
    std::memcpy(raw->data(), result->values.data(), raw->size());  // little-endian on x86-64
    return grpc::Status::OK;
  }

  std::shared_ptr<pipelines::Pipeline> PipelineOf(const std::string& name) const {
    return options.pipelines == nullptr || name.empty() ? nullptr : options.pipelines->Find(name);
  }

  // Infer on a pipeline: the HTTP route's reading and run (api/pipelines/pipeline_api.h), the
  // outputs as raw_output_contents; a call the client cancelled raises the request's flag,
  // which every stage checks.
  grpc::Status InferPipeline(ServerContext* context, const inference::ModelInferRequest& request,
                             const std::shared_ptr<pipelines::Pipeline>& pipeline,
                             const api::Principal& principal,
                             inference::ModelInferResponse* response) {
    const std::string& name = pipeline->spec().name;
    if (const auto size = static_cast<int64_t>(request.ByteSizeLong());
        size > options.max_message_bytes) {
      return Refuse(StatusCode::RESOURCE_EXHAUSTED, "received message of " + std::to_string(size) +
                                                        " bytes is larger than max (" +
                                                        std::to_string(options.max_message_bytes) +
                                                        " bytes) for pipeline '" + name + "'");
    }
    std::string binary;
    Result<nlohmann::json> as_json = RequestAsJson(request, &binary);
    if (!as_json.ok()) return Refuse(StatusCode::INVALID_ARGUMENT, as_json.status().message());
    Result<api::TensorInferRequest> read = api::ReadTensorInferRequest(name, *as_json, binary);
    if (!read.ok()) return Refuse(StatusCode::INVALID_ARGUMENT, read.status().message());
    auto promise = std::make_shared<std::promise<Result<std::vector<HostTensor>>>>();
    std::future<Result<std::vector<HostTensor>>> future = promise->get_future();
    auto cancelled = std::make_shared<std::atomic<bool>>(false);
    if (Status started = options.pipelines->StartInfer(
            pipeline, std::move(read).value(), principal, cancelled,
            [promise](Result<std::vector<HostTensor>> r) { promise->set_value(std::move(r)); });
        !started.ok()) {
      return GrpcStatusOf(started);
    }
    while (future.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) {
      if (context->IsCancelled()) cancelled->store(true);
    }
    Result<std::vector<HostTensor>> outputs = future.get();
    if (!outputs.ok()) return GrpcStatusOf(outputs.status());
    response->set_model_name(name);
    response->set_model_version("1");
    response->set_id(request.id());
    for (HostTensor& tensor : *outputs) {
      auto* output = response->add_outputs();
      output->set_name(tensor.name);
      output->set_datatype(std::string(ElementTypeName(tensor.type)));
      for (int64_t d : tensor.shape) output->add_shape(d);
      *response->add_raw_output_contents() = std::move(tensor.bytes);
    }
    return grpc::Status::OK;
  }

  // A tensor model's infer: the shared reading and run (api/kserve/tensor_infer.h), the
  // outputs as raw_output_contents (what tritonclient reads), BYTES length-prefixed. While it
  // waits, a call the client cancelled (or whose deadline passed) raises the runner's flag.
  grpc::Status InferTensors(ServerContext* context, const inference::ModelInferRequest& request,
                            const nlohmann::json& as_json, const std::string& binary,
                            const serving::ModelRef& primary, const api::Principal& principal,
                            inference::ModelInferResponse* response) {
    Result<api::TensorInferRequest> read =
        api::ReadTensorInferRequest(primary->id, as_json, binary);
    if (!read.ok()) return Refuse(StatusCode::INVALID_ARGUMENT, read.status().message());
    // The model that answers (its fallback under load); `model_ref` holds it for the call.
    const auto& metadata = context->client_metadata();
    std::optional<std::string_view> no_fallback;
    if (auto it = metadata.find("x-pier-no-fallback"); it != metadata.end()) {
      no_fallback = std::string_view(it->second.data(), it->second.size());
    }
    std::string diverted_from;
    const serving::ModelRef model_ref = api::ChooseTensorModel(
        options.fallback, api::FallbackAllowed(no_fallback), primary,
        api::BatcherPriority(read->priority, principal.max_priority), principal, &diverted_from);
    const serving::ServedModel& model = *model_ref;
    if (!diverted_from.empty()) context->AddInitialMetadata("x-pier-fallback", diverted_from);
    const auto live =
        api::OpenInferTicket(options.board, request.id(), model.id, kInferRoute, principal,
                             api::BatcherPriority(read->priority, principal.max_priority));
    // Shared with the runner's callback, which may outlive this call's wait only by a moment.
    auto promise = std::make_shared<std::promise<Result<api::TensorInferAnswer>>>();
    std::future<Result<api::TensorInferAnswer>> future = promise->get_future();
    auto cancelled = std::make_shared<std::atomic<bool>>(false);
    if (std::optional<api::TensorInferRefusal> refused = api::StartTensorInfer(
            model, principal, std::move(read).value(), options.class_max_queue, cancelled,
            [promise](Result<api::TensorInferAnswer> r) { promise->set_value(std::move(r)); })) {
      return GrpcStatusOf(refused->status);
    }
    while (future.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) {
      if (context->IsCancelled()) cancelled->store(true);
    }
    Result<api::TensorInferAnswer> answer = future.get();
    if (!answer.ok()) return GrpcStatusOf(answer.status());
    response->set_model_name(model.id);
    response->set_model_version("1");
    response->set_id(request.id());
    for (HostTensor& tensor : answer->outputs) {
      auto* output = response->add_outputs();
      output->set_name(tensor.name);
      output->set_datatype(std::string(ElementTypeName(tensor.type)));
      for (int64_t d : tensor.shape) output->add_shape(d);
      *response->add_raw_output_contents() = std::move(tensor.bytes);
    }
    return grpc::Status::OK;
  }
};

KServeGrpcServer::KServeGrpcServer(KServeGrpcOptions options, serving::ModelRegistry* registry,
                                   const api::ApiKeys* keys)
    : impl_(std::make_unique<Impl>(std::move(options), registry, keys)) {}

KServeGrpcServer::~KServeGrpcServer() { Shutdown(0); }

Status KServeGrpcServer::Start() {
  grpc::ServerBuilder builder;
  const std::string address = impl_->options.host + ":" + std::to_string(impl_->options.port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &impl_->bound_port);
  // Large enough for a tensor model's full batch (api::TensorInferBodyLimit); ModelInfer holds
  // each model to its own limit.
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::clamp<int64_t>(
      std::max(impl_->options.max_message_bytes, api::kMaxTensorBodyBytes), 1, INT_MAX)));
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
