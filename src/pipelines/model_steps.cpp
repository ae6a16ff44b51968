// The steps that run a served model (step.h's MakeStep for `model:`): a tensor model (an ONNX
// graph: its inputs and outputs are the step's ports; a request's items beyond the model's
// max_batch_size go in several batches, in order; zero items skip the model) and an LLM (port
// `prompt` in, `text` out, and any other output port a top-level field of its JSON answer;
// keys response_format, max_tokens, system, temperature). Each request resolves its model
// again, so a reloaded or on-demand model is used as it is now.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <mutex>

#include "grammar/constraint.h"
#include "pipelines/processors/processors.h"
#include "tensor_models/batch_tensors.h"
#include "tokenizer/chat_prompt.h"

namespace pier::pipelines {
namespace {

const ValueType kText{ValueKind::kTensor, ElementType::kBytes};

StepOutcome Failed(Status status) {
  StepOutcome outcome;
  outcome.status = std::move(status);
  return outcome;
}

// Rows [begin, end) of `t` along its first dimension.
HostTensor Rows(const HostTensor& t, int64_t begin, int64_t end) {
  HostTensor part;
  part.name = t.name;
  part.type = t.type;
  part.shape = t.shape;
  part.shape[0] = end - begin;
  const int64_t rows = t.shape[0];
  if (t.type == ElementType::kBytes) {
    Result<std::vector<size_t>> offsets =
        tensor_models::BytesElementOffsets(t.bytes, ElementCount(t.shape));
    const int64_t per_row = rows > 0 ? ElementCount(t.shape) / rows : 0;
    if (offsets.ok()) {
      const size_t from = (*offsets)[static_cast<size_t>(begin * per_row)];
      const size_t to = (*offsets)[static_cast<size_t>(end * per_row)];
      part.bytes = t.bytes.substr(from, to - from);
    }
    return part;
  }
  const size_t row_bytes = rows > 0 ? t.bytes.size() / static_cast<size_t>(rows) : 0;
  part.bytes = t.bytes.substr(static_cast<size_t>(begin) * row_bytes,
                              static_cast<size_t>(end - begin) * row_bytes);
  return part;
}

class TensorModelStep final : public Step {
 public:
  TensorModelStep(std::string model, const StepSpec& spec, const ModelAccess* access)
      : model_(std::move(model)) {
    for (const auto& [port, value] : spec.inputs) inputs_.push_back({port, {}, false});
    for (const auto& [port, value] : spec.outputs) outputs_.push_back({port, {}, false});
    if (access != nullptr && access->info != nullptr) {
      inputs_.clear();
      outputs_.clear();
      for (const TensorSpec& t : access->info->inputs) {
        inputs_.push_back({t.name, {ValueKind::kTensor, t.type}, false});
      }
      for (const TensorSpec& t : access->info->outputs) {
        outputs_.push_back({t.name, {ValueKind::kTensor, t.type}, true});
      }
      max_batch_ = access->info->max_batch_size;
    }
  }
  const std::vector<PortSpec>& inputs() const override { return inputs_; }
  const std::vector<PortSpec>& outputs() const override { return outputs_; }
  bool synchronous() const override { return false; }
  int64_t default_max_inflight() const override { return std::max<int64_t>(2, 2 * max_batch_); }
  std::string Describe() const override { return "model " + model_ + " (tensor)"; }

  void Start(StepCall call, std::function<void(StepOutcome)> done) override;

  const std::string model_;
  std::vector<PortSpec> inputs_;
  std::vector<PortSpec> outputs_;
  int64_t max_batch_ = 0;
  ModelResolver models_;
  std::vector<std::string> wanted_;  // the output ports bound
};

// One request's batches and their answers, gathered in order.
struct Gather {
  std::mutex mutex;
  std::vector<tensor_models::TensorResult> parts;
  size_t left = 0;
  std::function<void(StepOutcome)> done;
  ModelAccess keep;
};

void TensorModelStep::Start(StepCall call, std::function<void(StepOutcome)> done) {
  Result<ModelAccess> access = models_(model_);
  if (!access.ok()) return done(Failed(access.status()));
  if (access->kind != ModelAccess::Kind::kTensor) {
    return done(Failed(FailedPreconditionError("model '" + model_ + "' is not a tensor model")));
  }
  const tensor_models::TensorModelInfo& info = *access->info;
  std::vector<HostTensor> inputs;
  int64_t items = -1;
  for (const auto& [port, value] : call.inputs) {
    HostTensor t = value->tensor;
    t.name = port;
    if (info.max_batch_size > 0 && !t.shape.empty()) items = t.shape[0];
    inputs.push_back(std::move(t));
  }
  if (items == 0) {
    // Nothing to run (a page without text lines): every output is empty along the batch.
    StepOutcome outcome;
    for (const TensorSpec& out : info.outputs) {
      if (std::find(wanted_.begin(), wanted_.end(), out.name) == wanted_.end()) continue;
      auto value = std::make_shared<PipelineValue>();
      value->tensor.name = out.name;
      value->tensor.type = out.type;
      value->tensor.shape = out.shape;
      for (int64_t& d : value->tensor.shape) d = std::max<int64_t>(d, 0);
      value->tensor.shape[0] = 0;
      outcome.outputs[out.name] = std::move(value);
    }
    return done(std::move(outcome));
  }
  const int64_t chunk = info.max_batch_size > 0 && items > 0 ? info.max_batch_size : items;
  const int64_t parts = items > 0 ? (items + chunk - 1) / chunk : 1;
  auto gather = std::make_shared<Gather>();
  gather->parts.resize(static_cast<size_t>(parts));
  gather->left = static_cast<size_t>(parts);
  gather->done = std::move(done);
  gather->keep = *access;
  auto finish = [gather, wanted = wanted_, model = model_]() {
    StepOutcome outcome;
    for (const tensor_models::TensorResult& part : gather->parts) {
      if (!part.status.ok()) return gather->done(Failed(part.status));
      if (part.outputs.size() != wanted.size()) {
        return gather->done(Failed(
            InternalError("model '" + model + "' gave " + std::to_string(part.outputs.size()) +
                          " outputs; the step asked for " + std::to_string(wanted.size()))));
      }
      outcome.batch_size = std::max(outcome.batch_size, part.batch_size);
      outcome.model_queue_seconds = std::max(outcome.model_queue_seconds, part.queue_seconds);
    }
    for (size_t o = 0; o < wanted.size(); ++o) {
      auto value = std::make_shared<PipelineValue>();
      value->tensor = gather->parts[0].outputs[o];
      for (size_t p = 1; p < gather->parts.size(); ++p) {
        const HostTensor& more = gather->parts[p].outputs[o];
        if (more.shape.size() != value->tensor.shape.size() || more.shape.empty()) {
          return gather->done(Failed(InternalError("model '" + model + "' gave output '" +
                                                   more.name + "' in shapes that differ")));
        }
        value->tensor.shape[0] += more.shape[0];
        value->tensor.bytes += more.bytes;
      }
      outcome.outputs[wanted[o]] = std::move(value);
    }
    gather->done(std::move(outcome));
  };
  for (int64_t p = 0; p < parts; ++p) {
    tensor_models::TensorRequest request;
    for (const HostTensor& t : inputs) {
      request.inputs.push_back(parts == 1 ? t
                                          : Rows(t, p * chunk, std::min(items, (p + 1) * chunk)));
    }
    request.outputs = wanted_;
    request.priority = call.priority;
    request.deadline = call.deadline;
    request.cancelled = call.cancelled;
    Status queued =
        access->submit(std::move(request), [gather, p, finish](tensor_models::TensorResult r) {
          bool last = false;
          {
            std::lock_guard<std::mutex> lock(gather->mutex);
            gather->parts[static_cast<size_t>(p)] = std::move(r);
            last = --gather->left == 0;
          }
          if (last) finish();
        });
    if (!queued.ok()) {
      tensor_models::TensorResult refused;
      refused.status = queued;
      bool last = false;
      {
        std::lock_guard<std::mutex> lock(gather->mutex);
        gather->parts[static_cast<size_t>(p)] = std::move(refused);
        last = --gather->left == 0;
      }
      if (last) finish();
    }
  }
}

class LlmStep final : public Step {
 public:
  const std::vector<PortSpec>& inputs() const override { return inputs_; }
  const std::vector<PortSpec>& outputs() const override { return outputs_; }
  bool synchronous() const override { return false; }
  int64_t default_max_inflight() const override { return 8; }
  std::string Describe() const override { return "model " + model_ + " (LLM)"; }
  void Start(StepCall call, std::function<void(StepOutcome)> done) override;
  void Cancel(const std::string& request_id) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = running_.find(request_id); it != running_.end()) {
      it->second.client->Abort(request_id);
    }
  }

  std::string model_;
  std::vector<PortSpec> inputs_ = {{"prompt", kText, false}};
  std::vector<PortSpec> outputs_;
  ModelResolver models_;
  grammar::OutputConstraint constraint_;
  std::string system_;
  int32_t max_tokens_ = 256;
  float temperature_ = 0;
  std::mutex mutex_;
  std::map<std::string, ModelAccess> running_;
};

StepOutcome LlmOutputs(const std::vector<PortSpec>& ports, const std::string& text, bool skipped) {
  StepOutcome outcome;
  nlohmann::json parsed;
  bool has_json = false;
  if (!skipped) {
    parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    has_json = !parsed.is_discarded() && parsed.is_object();
  }
  for (const PortSpec& port : ports) {
    if (skipped) {
      outcome.outputs[port.name] = TextValue(port.name, {});
      continue;
    }
    if (port.name == "text") {
      outcome.outputs["text"] = TextValue("text", {text});
      continue;
    }
    std::string field;
    if (has_json && parsed.contains(port.name)) {
      const nlohmann::json& v = parsed[port.name];
      field = v.is_string() ? v.get<std::string>() : v.dump();
    }
    outcome.outputs[port.name] = TextValue(port.name, {field});
  }
  return outcome;
}

void LlmStep::Start(StepCall call, std::function<void(StepOutcome)> done) {
  Result<std::vector<std::string>> prompts = TextsOf(call.inputs.at("prompt")->tensor);
  if (!prompts.ok()) return done(Failed(prompts.status()));
  // No prompt (the template had nothing to say): the model is not asked; every output is empty.
  if (prompts->empty()) return done(LlmOutputs(outputs_, "", /*skipped=*/true));
  if (prompts->size() != 1) {
    return done(
        Failed(InvalidArgumentError("takes one prompt, got " + std::to_string(prompts->size()))));
  }
  Result<ModelAccess> access = models_(model_);
  if (!access.ok()) return done(Failed(access.status()));
  if (access->kind != ModelAccess::Kind::kGenerate || access->client == nullptr ||
      access->tokenizer == nullptr || access->chat_template == nullptr) {
    return done(Failed(
        FailedPreconditionError("model '" + model_ + "' is not an LLM with a chat template")));
  }
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!system_.empty()) messages.push_back({{"role", "system"}, {"content", system_}});
  messages.push_back({{"role", "user"}, {"content", (*prompts)[0]}});
  Result<tokenizer::ChatPrompt> prompt =
      tokenizer::RenderChatPrompt(*access->chat_template, *access->tokenizer, messages);
  if (!prompt.ok()) return done(Failed(prompt.status()));
  engine::Request request;
  request.id = call.request_id;
  request.prompt_tokens = std::move(prompt->tokens);
  request.sampling.temperature = temperature_;
  request.max_tokens = max_tokens_;
  if (access->max_request_tokens > 0) {
    const int64_t room =
        access->max_request_tokens - static_cast<int64_t>(request.prompt_tokens.size());
    if (room < 1) {
      return done(Failed(InvalidArgumentError(
          "the prompt has " + std::to_string(request.prompt_tokens.size()) + " tokens; model '" +
          model_ + "' takes " + std::to_string(access->max_request_tokens))));
    }
    request.max_tokens = static_cast<int32_t>(std::min<int64_t>(max_tokens_, room));
  }
  request.constraint = constraint_;
  request.priority = call.priority >= 3   ? engine::Priority::kCritical
                     : call.priority == 2 ? engine::Priority::kHigh
                     : call.priority == 1 ? engine::Priority::kNormal
                                          : engine::Priority::kLow;
  Result<std::shared_ptr<engine::RequestHandle>> handle = access->client->Submit(request);
  if (!handle.ok()) return done(Failed(handle.status()));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_[call.request_id] = *access;
  }
  struct Reading {
    std::mutex mutex;
    std::string text;
    bool finished = false;
    double queue_seconds = 0;  // waiting in the engine's queue before its first step
  };
  auto reading = std::make_shared<Reading>();
  std::weak_ptr<engine::RequestHandle> weak = *handle;
  (*handle)->SetListener([this, reading, weak, done, id = call.request_id]() {
    std::shared_ptr<engine::RequestHandle> h = weak.lock();
    if (h == nullptr) return;
    std::optional<Status> failure;
    bool finished_now = false;
    {
      std::lock_guard<std::mutex> lock(reading->mutex);
      if (reading->finished) return;
      for (engine::Event& event : h->Drain()) {
        reading->text += event.text;
        if (!event.finish.has_value()) continue;
        reading->finished = true;
        finished_now = true;
        if (event.times.scheduled_us > event.times.queued_us && event.times.queued_us > 0) {
          reading->queue_seconds =
              static_cast<double>(event.times.scheduled_us - event.times.queued_us) * 1e-6;
        }
        if (*event.finish == engine::FinishReason::kAbort) {
          failure = event.queue_expired
                        ? ResourceExhaustedError("the LLM's queue deadline passed")
                        : UnavailableError("cancelled: the LLM request was aborted" +
                                           (event.error.empty() ? "" : ": " + event.error));
        } else if (*event.finish == engine::FinishReason::kError) {
          failure = event.request_fault ? InvalidArgumentError(event.error)
                                        : UnavailableError(event.error);
        }
      }
    }
    if (!finished_now) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      running_.erase(id);
    }
    if (failure.has_value()) return done(Failed(*failure));
    StepOutcome outcome = LlmOutputs(outputs_, reading->text, /*skipped=*/false);
    outcome.model_queue_seconds = reading->queue_seconds;
    done(std::move(outcome));
  });
}

// An embedding model: port `text` (BYTES [n]) in, `embedding` (FP32 [n, dim]) out, each text
// cut to the model's positions.
class EmbedStep final : public Step {
 public:
  explicit EmbedStep(std::string model) : model_(std::move(model)) {}
  const std::vector<PortSpec>& inputs() const override { return inputs_; }
  const std::vector<PortSpec>& outputs() const override { return outputs_; }
  bool synchronous() const override { return false; }
  int64_t default_max_inflight() const override { return 16; }
  std::string Describe() const override { return "model " + model_ + " (embedding)"; }

  void Start(StepCall call, std::function<void(StepOutcome)> done) override {
    Result<std::vector<std::string>> texts = TextsOf(call.inputs.at("text")->tensor);
    if (!texts.ok()) return done(Failed(texts.status()));
    if (texts->empty()) {
      auto empty = std::make_shared<PipelineValue>();
      empty->tensor.type = ElementType::kFp32;
      empty->tensor.shape = {0, 0};
      StepOutcome outcome;
      outcome.outputs["embedding"] = std::move(empty);
      return done(std::move(outcome));
    }
    Result<ModelAccess> access = models_(model_);
    if (!access.ok()) return done(Failed(access.status()));
    if (access->kind != ModelAccess::Kind::kEmbed || access->tokenizer == nullptr) {
      return done(
          Failed(FailedPreconditionError("model '" + model_ + "' is not an embedding model")));
    }
    encoder::EmbedRequest request;
    for (const std::string& text : *texts) {
      Result<std::vector<tokenizer::TokenId>> ids = access->tokenizer->Encode(text);
      if (!ids.ok()) return done(Failed(ids.status()));
      if (access->max_request_tokens > 0 &&
          static_cast<int64_t>(ids->size()) > access->max_request_tokens) {
        // Cut to the model's positions, keeping the closing [SEP].
        const int32_t last = ids->back();
        ids->resize(static_cast<size_t>(access->max_request_tokens));
        ids->back() = last;
      }
      request.texts.push_back(std::move(ids).value());
    }
    request.priority = call.priority;
    request.deadline = call.deadline;
    auto keep = std::make_shared<ModelAccess>(*access);
    Status queued = access->embed(
        std::move(request), [done, keep, n = texts->size()](encoder::EmbedResult result) {
          if (!result.status.ok()) return done(Failed(result.status));
          if (!result.tokens_per_text.empty()) {
            return done(Failed(FailedPreconditionError(
                "the embedding model gives a vector per token (pooling none); a pipeline step "
                "takes one vector per text")));
          }
          auto value = std::make_shared<PipelineValue>();
          value->tensor.type = ElementType::kFp32;
          value->tensor.shape = {static_cast<int64_t>(n), result.dim};
          value->tensor.bytes.assign(reinterpret_cast<const char*>(result.vectors.data()),
                                     result.vectors.size() * sizeof(float));
          StepOutcome outcome;
          outcome.batch_size = static_cast<int64_t>(n);
          outcome.model_queue_seconds = result.queue_seconds;
          outcome.outputs["embedding"] = std::move(value);
          done(std::move(outcome));
        });
    if (!queued.ok()) done(Failed(queued));
  }

  std::string model_;
  std::vector<PortSpec> inputs_ = {{"text", kText, false}};
  std::vector<PortSpec> outputs_ = {{"embedding", {ValueKind::kTensor, ElementType::kFp32}, false}};
  ModelResolver models_;
};

}  // namespace

Result<std::unique_ptr<Step>> MakeModelStep(const StepSpec& spec, const ModelResolver& models) {
  Result<ModelAccess> access = models ? models(spec.model) : NotFoundError("no models are served");
  if (!access.ok() && access.status().code() == StatusCode::kNotFound) {
    return NotFoundError(spec.source + ".model: " + access.status().message());
  }
  const bool known = access.ok();
  if (known && access->kind == ModelAccess::Kind::kOther) {
    return InvalidArgumentError(spec.source + ".model: '" + spec.model +
                                "' is neither an ONNX model, an embedding model nor an LLM");
  }
  if (known && access->kind == ModelAccess::Kind::kEmbed) {
    StepKeys keys(spec);
    PIER_RETURN_IF_ERROR(keys.Finish("model step " + spec.model + " (embedding)"));
    auto step = std::make_unique<EmbedStep>(spec.model);
    step->models_ = models;
    return std::unique_ptr<Step>(std::move(step));
  }
  const bool llm =
      known ? access->kind == ModelAccess::Kind::kGenerate
            : spec.settings.contains("response_format") || spec.inputs.count("prompt") > 0;
  if (llm) {
    auto step = std::make_unique<LlmStep>();
    step->model_ = spec.model;
    step->models_ = models;
    StepKeys keys(spec);
    PIER_ASSIGN_OR_RETURN(int64_t max_tokens, keys.Count("max_tokens", 256, 1, 1 << 20));
    PIER_ASSIGN_OR_RETURN(double temperature, keys.Number("temperature", 0, 0, 2));
    PIER_ASSIGN_OR_RETURN(step->system_, keys.Text("system", ""));
    step->max_tokens_ = static_cast<int32_t>(max_tokens);
    step->temperature_ = static_cast<float>(temperature);
    if (const nlohmann::ordered_json* format = keys.Raw("response_format")) {
      const std::string where = spec.source + ".response_format";
      const std::string type =
          format->is_object() && format->contains("type") && (*format)["type"].is_string()
              ? (*format)["type"].get<std::string>()
              : "";
      if (type == "json_object") {
        step->constraint_ = grammar::OutputConstraint::JsonObject();
      } else if (type == "json_schema") {
        const nlohmann::ordered_json* schema = nullptr;
        if (format->contains("json_schema") && (*format)["json_schema"].is_object() &&
            (*format)["json_schema"].contains("schema")) {
          schema = &(*format)["json_schema"]["schema"];
        }
        if (schema == nullptr || !schema->is_object()) {
          return InvalidArgumentError(where +
                                      ": json_schema needs its schema under "
                                      "json_schema.schema (an object)");
        }
        step->constraint_ = grammar::OutputConstraint::JsonSchema(schema->dump());
      } else if (type != "text") {
        return InvalidArgumentError(where + ": type must be text, json_object or json_schema");
      }
      if (step->constraint_.active()) {
        Result<grammar::ExprPtr> compiled = grammar::ConstraintExpr(step->constraint_);
        if (!compiled.ok()) return compiled.status().WithContext(where + ": the schema is refused");
      }
    }
    PIER_RETURN_IF_ERROR(keys.Finish("model step " + spec.model + " (LLM)"));
    for (const auto& [port, value] : spec.outputs) step->outputs_.push_back({port, kText, false});
    if (step->outputs_.size() > 1 && !step->constraint_.active()) {
      return InvalidArgumentError(spec.source + ".outputs: fields of the answer (" +
                                  spec.outputs.rbegin()->first +
                                  ") need a response_format json_schema or json_object");
    }
    return std::unique_ptr<Step>(std::move(step));
  }
  StepKeys keys(spec);
  PIER_RETURN_IF_ERROR(keys.Finish("model step " + spec.model + " (tensor)"));
  auto step = std::make_unique<TensorModelStep>(spec.model, spec, known ? &*access : nullptr);
  step->models_ = models;
  for (const auto& [port, value] : spec.outputs) step->wanted_.push_back(port);
  return std::unique_ptr<Step>(std::move(step));
}

Result<std::unique_ptr<Step>> MakeStep(const StepSpec& spec, const ModelResolver& models) {
  if (!spec.model.empty()) return MakeModelStep(spec, models);
  return MakeProcessor(spec, models);
}

}  // namespace pier::pipelines
