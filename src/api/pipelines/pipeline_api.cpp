#include "api/pipelines/pipeline_api.h"

#include <algorithm>
#include <cstdio>
#include <mutex>

#include "api/json_shape.h"
#include "api/kserve/infer_body.h"
#include "api/kserve/kserve_api.h"
#include "api/kserve/tensor_infer_request.h"
#include "api/kserve/tensor_infer_response.h"
#include "api/kserve/tensor_json.h"
#include "api/pending_response.h"
#include "api/status_map.h"
#include "common/base64.h"
#include "tensor_models/batch_tensors.h"
#include "tokenizer/unicode.h"

namespace pier::api {
namespace {

using Json = nlohmann::json;
using pipelines::Pipeline;
using pipelines::PipelineRequest;
using pipelines::PipelineResult;

constexpr std::string_view kPrefix = "/v1/pipelines/";

// A pipeline request in flight: the answer when it comes, and a client that goes away cancels
// the request in whatever stage it is.
class PipelineResponse final : public DeferredResponse {
 public:
  void Resolve(HttpResponse response) { pending_.Resolve(std::move(response)); }
  std::shared_ptr<const std::atomic<bool>> flag() const { return cancelled_; }
  void SetCancel(std::function<void()> cancel) {
    std::lock_guard<std::mutex> lock(mutex_);
    cancel_ = std::move(cancel);
  }
  void Start(std::function<void()> wake) override { pending_.Start(std::move(wake)); }
  std::optional<HttpResponse> Poll() override { return pending_.Poll(); }
  void Cancel(std::string_view reason) override {
    cancelled_->store(true);
    std::function<void()> cancel;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      cancel = std::move(cancel_);
    }
    if (cancel) cancel();
    pending_.Cancel(reason);
  }

 private:
  PendingResponse pending_;
  std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
  std::mutex mutex_;
  std::function<void()> cancel_;
};

HttpResponse JsonReply(int status, const Json& body) {
  HttpResponse response;
  response.status = status;
  response.body = body.dump();
  return response;
}

HttpResponse StatusResponse(const Status& status) {
  HttpResponse response = ErrorResponse(HttpStatusOf(status), status.message());
  if (status.code() == StatusCode::kResourceExhausted) {
    response.headers.emplace_back("Retry-After", "1");
  }
  return response;
}

// A Server-Timing metric name is an HTTP token: a step's name keeps letters, digits, - _ .
std::string TimingName(std::string_view step) {
  std::string name(step);
  for (char& c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) c = '_';
  }
  return name;
}

std::string ServerTiming(const PipelineResult& result) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "admission;dur=%.3f", result.admission_seconds * 1e3);
  std::string header = buffer;
  for (const pipelines::StageTiming& stage : result.stages) {
    const std::string name = TimingName(stage.step);
    std::snprintf(buffer, sizeof(buffer), ";dur=%.3f", stage.queue_seconds * 1e3);
    header += ", " + name + "-queue" + buffer;
    std::snprintf(buffer, sizeof(buffer), ";dur=%.3f", stage.compute_seconds * 1e3);
    header += ", " + name + buffer;
  }
  return header;
}

void SetServerTiming(HttpResponse* response, const PipelineResult& result) {
  auto& headers = response->headers;
  headers.erase(std::remove_if(headers.begin(), headers.end(),
                               [](const auto& h) { return h.first == "Server-Timing"; }),
                headers.end());
  headers.emplace_back("Server-Timing", ServerTiming(result));
}

Json TimingJson(const PipelineResult& result) {
  Json stages = Json::array();
  for (const pipelines::StageTiming& stage : result.stages) {
    stages.push_back({{"step", stage.step},
                      {"queue_ms", stage.queue_seconds * 1e3},
                      {"compute_ms", stage.compute_seconds * 1e3},
                      {"start_unix_us", stage.start_unix_us},
                      {"end_unix_us", stage.end_unix_us},
                      {"items", stage.items},
                      {"batch_size", stage.batch_size}});
  }
  return stages;
}

int PriorityOf(std::string_view name) {
  if (name == "critical") return 3;
  if (name == "high") return 2;
  if (name == "normal") return 1;
  if (name == "low") return 0;
  return -1;
}

// One input of the JSON form.
Result<HostTensor> InputFromJson(const pipelines::PipelineTensor& declared, const Json& value) {
  HostTensor tensor;
  tensor.name = declared.name;
  tensor.type = declared.type;
  const std::string where = "inputs." + declared.name;
  if (declared.type == ElementType::kBytes) {
    auto element = [&](const Json& v, std::string* out) -> Status {
      if (v.is_string()) {
        *out = v.get<std::string>();
        return Status::Ok();
      }
      if (v.is_object() && v.size() == 1 && v.contains("b64") && v["b64"].is_string()) {
        std::optional<std::string> bytes = DecodeBase64(v["b64"].get<std::string>());
        if (!bytes.has_value()) return InvalidArgumentError(where + ".b64 is not valid base64");
        *out = std::move(*bytes);
        return Status::Ok();
      }
      return InvalidArgumentError(where +
                                  " must be a string, {\"b64\": \"...\"} or a list of "
                                  "those");
    };
    std::vector<std::string> elements;
    if (value.is_array()) {
      for (const Json& v : value) {
        std::string e;
        PIER_RETURN_IF_ERROR(element(v, &e));
        elements.push_back(std::move(e));
      }
    } else {
      std::string e;
      PIER_RETURN_IF_ERROR(element(value, &e));
      elements.push_back(std::move(e));
    }
    tensor.shape = {static_cast<int64_t>(elements.size())};
    for (const std::string& e : elements) tensor_models::AppendBytesElement(tensor.bytes, e);
    return tensor;
  }
  if (!value.is_object() || !value.contains("shape") || !value.contains("data") ||
      !value["shape"].is_array()) {
    return InvalidArgumentError(where + " is " + std::string(ElementTypeName(declared.type)) +
                                ": send {\"shape\": [...], \"data\": [...]}");
  }
  for (const Json& d : value["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) {
      return InvalidArgumentError(where + ".shape must be a list of sizes");
    }
    tensor.shape.push_back(d.get<int64_t>());
  }
  PIER_ASSIGN_OR_RETURN(
      tensor.bytes, TensorBytesFromJson(declared.name, declared.type, tensor.shape, value["data"]));
  return tensor;
}

Json OutputToJson(const HostTensor& tensor) {
  if (tensor.type != ElementType::kBytes) {
    return {{"datatype", std::string(ElementTypeName(tensor.type))},
            {"shape", tensor.shape},
            {"data", TensorBytesToJson(tensor)}};
  }
  Json list = Json::array();
  Result<std::vector<std::string_view>> elements =
      tensor_models::SplitBytesElements(tensor.bytes, ElementCount(tensor.shape));
  if (!elements.ok()) return list;
  for (std::string_view e : *elements) {
    if (tokenizer::ValidateUtf8(e).ok()) {
      list.push_back(std::string(e));
    } else {
      list.push_back({{"b64", EncodeBase64(e)}});
    }
  }
  return list;
}

Json TensorsJson(const std::vector<pipelines::PipelineTensor>& tensors) {
  Json list = Json::array();
  for (const pipelines::PipelineTensor& t : tensors) {
    list.push_back(
        {{"name", t.name}, {"datatype", std::string(ElementTypeName(t.type))}, {"shape", t.shape}});
  }
  return list;
}

// The outputs a KServe request asks for, each JSON or binary (every declared one when it names
// none). INVALID_ARGUMENT for an output the pipeline does not declare or a classification.
Result<std::vector<std::pair<std::string, bool>>> WantedOutputs(const pipelines::PipelineSpec& spec,
                                                                const TensorInferRequest& read) {
  std::vector<std::pair<std::string, bool>> wanted;
  for (const TensorOutputRequest& out : read.outputs) {
    auto declared = std::find_if(spec.outputs.begin(), spec.outputs.end(),
                                 [&](const auto& t) { return t.name == out.name; });
    if (declared == spec.outputs.end()) {
      return InvalidArgumentError("pipeline " + spec.name + " has no output '" + out.name + "'");
    }
    if (out.classification > 0) {
      return InvalidArgumentError(
          "pipeline outputs take no classification parameter (add a top_k step)");
    }
    wanted.emplace_back(out.name, out.binary.value_or(read.binary_output));
  }
  if (wanted.empty()) {
    for (const auto& t : spec.outputs) wanted.emplace_back(t.name, read.binary_output);
  }
  return wanted;
}

// The outputs of `result` in the order `wanted` names them.
std::vector<HostTensor> PickOutputs(PipelineResult& result,
                                    const std::vector<std::pair<std::string, bool>>& wanted) {
  std::vector<HostTensor> picked;
  for (const auto& [output, binary] : wanted) {
    for (HostTensor& t : result.outputs) {
      if (t.name == output) picked.push_back(t);
    }
  }
  return picked;
}

double Mean(const Buckets& b) {
  uint64_t n = 0;
  for (uint64_t c : b.counts) n += c;
  return n == 0 ? 0 : b.sum / static_cast<double>(n);
}

}  // namespace

PipelineApi::PipelineApi(PipelineApiOptions options, const serving::PipelineSet* pipelines,
                         const ApiKeys* keys)
    : options_(std::move(options)), pipelines_(pipelines), keys_(keys) {}

// Submits and answers through `write` once the pipeline has.
HttpResponse PipelineApi::Submit(const std::shared_ptr<Pipeline>& pipeline, PipelineRequest request,
                                 const Principal& principal,
                                 std::function<HttpResponse(PipelineResult)> write) const {
  const engine::Priority level = ClassOfBatcherPriority(request.priority);
  std::shared_ptr<KeySlot> slot;
  if (std::optional<KeyRefusal> refused =
          AdmitKeyRequest(principal, level, 1, "requests", "inputs", &slot)) {
    return ResponseOf(*refused);
  }
  request.deadline =
      serving::QueueDeadline(options_.class_max_queue, level, std::chrono::steady_clock::now());
  auto pending = std::make_shared<PipelineResponse>();
  request.cancelled = pending->flag();
  std::shared_ptr<serving::RequestBoard::Ticket> live;
  if (options_.board != nullptr) {
    live = options_.board->Open({.request_id = "",
                                 .model = pipeline->spec().name,
                                 .route = "pipeline",
                                 .tenant = principal.tenant,
                                 .priority_class = std::string(engine::PriorityName(level))});
    request.on_stage = [weak_live = std::weak_ptr(live)](const std::string& stage) {
      if (std::shared_ptr<serving::RequestBoard::Ticket> ticket = weak_live.lock()) {
        ticket->SetStage(stage);
        ticket->Produced(0);  // a stage has it: running
      }
    };
  }
  std::weak_ptr<PipelineResponse> weak = pending;
  Result<uint64_t> id = pipeline->Submit(
      std::move(request), [weak, slot, live, write = std::move(write)](PipelineResult result) {
        std::shared_ptr<PipelineResponse> pending = weak.lock();
        if (pending == nullptr) return;  // the client is gone
        HttpResponse response = result.status.ok() ? write(result) : StatusResponse(result.status);
        SetServerTiming(&response, result);
        pending->Resolve(std::move(response));
      });
  if (!id.ok()) return StatusResponse(id.status());
  std::weak_ptr<Pipeline> weak_pipeline = pipeline;
  pending->SetCancel([weak_pipeline, request_id = *id] {
    if (std::shared_ptr<Pipeline> p = weak_pipeline.lock()) p->Cancel(request_id);
  });
  HttpResponse response;
  response.deferred = pending;
  return response;
}

void PipelineApi::Register(Router& router) {
  router.AddPrefix("POST", std::string(kPrefix), [this](const HttpRequest& http) -> HttpResponse {
    Principal principal;
    if (keys_ != nullptr) {
      auto auth = keys_->Authenticate(CredentialsOf(http));
      if (auto* denied = std::get_if<AuthRefusal>(&auth)) return ResponseOf(*denied);
      principal = std::get<Principal>(std::move(auth));
    }
    const std::string name = http.path.substr(kPrefix.size());
    std::shared_ptr<Pipeline> pipeline = pipelines_ ? pipelines_->Find(name) : nullptr;
    if (pipeline == nullptr) {
      return ErrorResponse(404, "there is no pipeline '" + name + "'", "pipeline",
                           "pipeline_not_found");
    }
    if (std::optional<std::string> shape = CheckJsonShape(http.body)) {
      return ErrorResponse(400, *shape);
    }
    Json body;
    try {
      body = Json::parse(http.body);
    } catch (const Json::exception& e) {
      return ErrorResponse(400, InvalidJsonMessage(e));
    }
    if (!body.is_object() || !body.contains("inputs") || !body["inputs"].is_object()) {
      return ErrorResponse(400, "the body must be {\"inputs\": {NAME: VALUE, ...}}", "inputs");
    }
    const pipelines::PipelineSpec& spec = pipeline->spec();
    PipelineRequest request;
    for (const auto& [key, value] : body["inputs"].items()) {
      auto declared = std::find_if(spec.inputs.begin(), spec.inputs.end(),
                                   [&](const auto& t) { return t.name == key; });
      if (declared == spec.inputs.end()) {
        std::string known;
        for (const auto& t : spec.inputs) known += (known.empty() ? "" : ", ") + t.name;
        return ErrorResponse(
            400, "pipeline " + name + " has no input '" + key + "' (its inputs: " + known + ")",
            "inputs");
      }
      Result<HostTensor> tensor = InputFromJson(*declared, value);
      if (!tensor.ok()) return ErrorResponse(400, tensor.status().message(), "inputs");
      request.inputs.push_back(std::move(tensor).value());
    }
    for (const auto& [key, value] : body.items()) {
      if (key != "inputs" && key != "priority" && key != "id") {
        return ErrorResponse(400, "unknown field '" + key + "' (known: inputs, priority, id)", key);
      }
    }
    const int ceiling = 3 - static_cast<int>(principal.max_priority);
    request.priority = std::min(1, ceiling);
    if (body.contains("priority")) {
      const int p =
          body["priority"].is_string() ? PriorityOf(body["priority"].get<std::string>()) : -1;
      if (p < 0) {
        return ErrorResponse(400, "priority must be critical, high, normal or low", "priority");
      }
      request.priority = std::min(p, ceiling);
    }
    if (std::optional<std::string_view> trace = http.Header("traceparent")) {
      request.traceparent = std::string(trace->substr(0, 128));
    }
    const std::string id = body.contains("id") && body["id"].is_string()
                               ? body["id"].get<std::string>()
                               : std::string();
    return Submit(pipeline, std::move(request), principal, [name, id](PipelineResult result) {
      Json outputs = Json::object();
      for (const HostTensor& t : result.outputs) outputs[t.name] = OutputToJson(t);
      Json answer{{"pipeline", name}, {"outputs", outputs}, {"timing", TimingJson(result)}};
      if (!id.empty()) answer["id"] = id;
      HttpResponse response;
      response.body = answer.dump();
      return response;
    });
  });
}

std::optional<HttpResponse> PipelineApi::KServeRoute(const HttpRequest& http,
                                                     const std::string& name,
                                                     const std::string& action,
                                                     const Principal& principal) const {
  std::shared_ptr<Pipeline> pipeline = pipelines_ ? pipelines_->Find(name) : nullptr;
  if (pipeline == nullptr) return std::nullopt;
  const pipelines::PipelineSpec& spec = pipeline->spec();
  if (http.method == "GET" && action == "ready") {
    return JsonReply(200, Json{{"name", name}, {"ready", true}});
  }
  if (http.method == "GET" && action.empty()) {
    return JsonReply(200, Json{{"name", name},
                               {"versions", {"1"}},
                               {"platform", "pier_pipeline"},
                               {"inputs", TensorsJson(spec.inputs)},
                               {"outputs", TensorsJson(spec.outputs)}});
  }
  if (http.method != "POST" || action != "infer") {
    return ErrorResponse(
        404, "no route " + http.method + " " + http.path + " for pipeline '" + name + "'");
  }
  Result<InferBody> body = ReadInferBody(http);
  if (!body.ok()) return ErrorResponse(400, body.status().message());
  Result<TensorInferRequest> read = ReadTensorInferRequest(name, body->request, body->binary);
  if (!read.ok()) return ErrorResponse(400, read.status().message());
  Result<std::vector<std::pair<std::string, bool>>> wanted = WantedOutputs(spec, *read);
  if (!wanted.ok()) return ErrorResponse(400, wanted.status().message());
  PipelineRequest request;
  request.inputs = std::move(read->inputs);
  request.priority = BatcherPriority(read->priority, principal.max_priority);
  if (std::optional<std::string_view> trace = http.Header("traceparent")) {
    request.traceparent = std::string(trace->substr(0, 128));
  }
  const std::string id = read->id;
  return Submit(pipeline, std::move(request), principal,
                [name, id, wanted = *wanted](PipelineResult result) {
                  TensorInferAnswer answer;
                  answer.outputs = PickOutputs(result, wanted);
                  for (const auto& [output, binary] : wanted) answer.binary.push_back(binary);
                  HttpResponse response = WriteTensorInferResponse(name, id, std::move(answer));
                  response.model = name;
                  return response;
                });
}

std::shared_ptr<Pipeline> PipelineApi::Find(const std::string& name) const {
  return pipelines_ == nullptr ? nullptr : pipelines_->Find(name);
}

Status PipelineApi::StartInfer(const std::shared_ptr<Pipeline>& pipeline, TensorInferRequest read,
                               const Principal& principal,
                               std::shared_ptr<const std::atomic<bool>> cancelled,
                               std::function<void(Result<std::vector<HostTensor>>)> done) const {
  PIER_ASSIGN_OR_RETURN(auto wanted, WantedOutputs(pipeline->spec(), read));
  PipelineRequest request;
  request.inputs = std::move(read.inputs);
  request.priority = BatcherPriority(read.priority, principal.max_priority);
  request.cancelled = std::move(cancelled);
  const engine::Priority level = ClassOfBatcherPriority(request.priority);
  std::shared_ptr<KeySlot> slot;
  if (std::optional<KeyRefusal> refused =
          AdmitKeyRequest(principal, level, 1, "requests", "inputs", &slot)) {
    return refused->status;
  }
  request.deadline =
      serving::QueueDeadline(options_.class_max_queue, level, std::chrono::steady_clock::now());
  Result<uint64_t> id = pipeline->Submit(
      std::move(request), [slot, wanted, done = std::move(done)](PipelineResult result) {
        if (!result.status.ok()) return done(result.status);
        done(PickOutputs(result, wanted));
      });
  return id.status();
}

Json PipelineApi::AdminList() const {
  Json data = Json::array();
  if (pipelines_ == nullptr) return Json{{"object", "list"}, {"data", data}};
  for (const auto& pipeline : pipelines_->All()) {
    const pipelines::PipelineSpec& spec = pipeline->spec();
    const pipelines::PipelineStats stats = pipeline->Stats();
    Json stages = Json::array();
    for (const pipelines::StageStats& s : stats.stages) {
      stages.push_back({{"step", s.step},
                        {"kind", s.kind},
                        {"max_inflight", s.max_inflight},
                        {"waiting", s.waiting},
                        {"running", s.running},
                        {"requests", s.requests},
                        {"failures", s.failures},
                        {"items", s.items},
                        {"queue_ms_mean", Mean(s.queue_seconds) * 1e3},
                        {"compute_ms_mean", Mean(s.compute_seconds) * 1e3},
                        {"batch_size_mean", Mean(s.batch_size)}});
    }
    data.push_back({{"id", spec.name},
                    {"object", "pipeline"},
                    {"inputs", TensorsJson(spec.inputs)},
                    {"outputs", TensorsJson(spec.outputs)},
                    {"max_inflight", spec.max_inflight},
                    {"max_queue", spec.max_queue},
                    {"threads", spec.threads},
                    {"waiting", stats.waiting},
                    {"inside", stats.inside},
                    {"requests", stats.requests},
                    {"failures", stats.failures},
                    {"cancelled", stats.cancelled},
                    {"refused", stats.refused},
                    {"held_bytes", stats.held_bytes},
                    {"stages", stages}});
  }
  return Json{{"object", "list"}, {"data", data}};
}

std::string PipelineApi::MetricsText() const {
  if (pipelines_ == nullptr || pipelines_->All().empty()) return {};
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  auto number = [](double v) {
    char b[32];
    std::snprintf(b, sizeof(b), "%.9g", v);
    return std::string(b);
  };
  std::vector<std::pair<std::string, pipelines::PipelineStats>> all;
  for (const auto& p : pipelines_->All()) all.emplace_back(p->spec().name, p->Stats());
  family("pier_pipeline_requests_total", "counter", "Requests a pipeline finished, by outcome.");
  for (const auto& [name, s] : all) {
    const std::string l = "pipeline=\"" + name + "\"";
    out += "pier_pipeline_requests_total{" + l + ",outcome=\"ok\"} " +
           std::to_string(s.requests - s.failures) + "\n";
    out += "pier_pipeline_requests_total{" + l + ",outcome=\"failed\"} " +
           std::to_string(s.failures - s.cancelled) + "\n";
    out += "pier_pipeline_requests_total{" + l + ",outcome=\"cancelled\"} " +
           std::to_string(s.cancelled) + "\n";
    out += "pier_pipeline_requests_total{" + l + ",outcome=\"refused\"} " +
           std::to_string(s.refused) + "\n";
  }
  family("pier_pipeline_inflight", "gauge", "Requests inside a pipeline now.");
  for (const auto& [name, s] : all) {
    out += "pier_pipeline_inflight{pipeline=\"" + name + "\"} " + std::to_string(s.inside) + "\n";
  }
  family("pier_pipeline_held_bytes", "gauge",
         "Bytes of intermediate values charged to the pipeline's governor owner now.");
  for (const auto& [name, s] : all) {
    out += "pier_pipeline_held_bytes{pipeline=\"" + name + "\"} " + std::to_string(s.held_bytes) +
           "\n";
  }
  family("pier_pipeline_stage_waiting", "gauge", "Requests waiting in a stage's queue.");
  for (const auto& [name, s] : all) {
    for (const auto& st : s.stages) {
      out += "pier_pipeline_stage_waiting{pipeline=\"" + name + "\",step=\"" + st.step + "\"} " +
             std::to_string(st.waiting) + "\n";
    }
  }
  family("pier_pipeline_stage_items_total", "counter",
         "Items a stage produced (boxes, lines, rows).");
  for (const auto& [name, s] : all) {
    for (const auto& st : s.stages) {
      out += "pier_pipeline_stage_items_total{pipeline=\"" + name + "\",step=\"" + st.step +
             "\"} " + std::to_string(st.items) + "\n";
    }
  }
  auto histogram = [&](const char* metric, const char* help, auto pick) {
    family(metric, "histogram", help);
    for (const auto& [name, s] : all) {
      for (const auto& st : s.stages) {
        const Buckets& b = pick(st);
        const std::string l = "pipeline=\"" + name + "\",step=\"" + st.step + "\"";
        uint64_t cumulative = 0;
        for (size_t i = 0; i < b.bounds.size(); ++i) {
          cumulative += b.counts[i];
          out += std::string(metric) + "_bucket{" + l + ",le=\"" + number(b.bounds[i]) + "\"} " +
                 std::to_string(cumulative) + "\n";
        }
        cumulative += b.counts.empty() ? 0 : b.counts.back();
        out += std::string(metric) + "_bucket{" + l + ",le=\"+Inf\"} " +
               std::to_string(cumulative) + "\n";
        out += std::string(metric) + "_sum{" + l + "} " + number(b.sum) + "\n";
        out += std::string(metric) + "_count{" + l + "} " + std::to_string(cumulative) + "\n";
      }
    }
  };
  histogram("pier_pipeline_stage_queue_seconds", "Time a request waited in a stage's queue.",
            [](const pipelines::StageStats& st) -> const Buckets& { return st.queue_seconds; });
  histogram("pier_pipeline_stage_compute_seconds", "Time a request spent running in a stage.",
            [](const pipelines::StageStats& st) -> const Buckets& { return st.compute_seconds; });
  return out;
}

}  // namespace pier::api
