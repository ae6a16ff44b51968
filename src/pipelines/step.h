// Step: one stage of a pipeline as the executor (pipeline.h) drives it: what ports it reads
// and writes (checked against the spec and against each other when the pipeline is built),
// and Start, which runs it for one request and calls `done` once. A built-in processor
// (processors.h) is synchronous and runs on the pipeline's own threads; a model step submits
// to the model's batcher or engine and answers from its thread.
//
// ModelAccess / ModelResolver: what a model step needs of a served model, found by name at
// build and again for each request (a model reloaded, unloaded or on demand is seen as it is
// now). serving/ implements the resolver over its registry; pipelines/ never sees it.
//
// Thread-safety: Start may be called from any thread, for several requests at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "encoder/embedding_batcher.h"
#include "engine/engine_client.h"
#include "pipelines/pipeline_spec.h"
#include "pipelines/pipeline_value.h"
#include "tensor_models/tensor_request.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pier::pipelines {

struct ModelAccess {
  enum class Kind : uint8_t { kTensor, kGenerate, kEmbed, kOther };
  Kind kind = Kind::kOther;
  std::string id;
  // kTensor: what it takes and gives, how to submit, and its graph's metadata_props by key
  // (NOT_FOUND when absent).
  const tensor_models::TensorModelInfo* info = nullptr;
  std::function<Status(tensor_models::TensorRequest,
                       std::function<void(tensor_models::TensorResult)>)>
      submit;
  std::function<Result<std::string>(std::string_view key)> metadata;
  // kGenerate: its engine (one client for all its instances), tokenizer and chat template.
  engine::EngineClient* client = nullptr;
  const tokenizer::Tokenizer* tokenizer = nullptr;
  const tokenizer::ChatTemplate* chat_template = nullptr;
  int64_t max_request_tokens = 0;
  // kEmbed: its batcher (texts as token ids from `tokenizer`, at most max_request_tokens each).
  std::function<Status(encoder::EmbedRequest, std::function<void(encoder::EmbedResult)>)> embed;
  // Keeps every pointer above valid while held.
  std::shared_ptr<const void> keep;
};
// NOT_FOUND for an unknown name; UNAVAILABLE for a model that is not ready (naming its state).
using ModelResolver = std::function<Result<ModelAccess>(std::string_view name)>;

struct PortSpec {
  std::string name;
  ValueType type;
  bool optional = false;
};

// One request's visit to a step.
struct StepCall {
  Values inputs;     // by port
  int priority = 0;  // 3 critical .. 0 low
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::shared_ptr<const std::atomic<bool>> cancelled;
  std::string request_id;   // unique in the server (an LLM step's engine id derives from it)
  std::string traceparent;  // W3C, for the logs; may be empty
};

struct StepOutcome {
  Status status = Status::Ok();
  Values outputs;                  // by port
  int64_t batch_size = 0;          // the largest batch a model ran it in (0: a processor)
  double model_queue_seconds = 0;  // inside the model's own queue (part of the compute time)
};

class Step {
 public:
  virtual ~Step() = default;
  virtual const std::vector<PortSpec>& inputs() const = 0;
  virtual const std::vector<PortSpec>& outputs() const = 0;
  // True: Run is called on the pipeline's threads; false: Start answers asynchronously.
  virtual bool synchronous() const = 0;
  virtual StepOutcome Run(const StepCall& call) {
    (void)call;
    return {};
  }
  virtual void Start(StepCall call, std::function<void(StepOutcome)> done) { done(Run(call)); }
  // Requests this stage takes at once unless the step says otherwise (two batches).
  virtual int64_t default_max_inflight() const { return 2; }
  // The request `request_id` is cancelled while it runs here (an LLM step aborts it).
  virtual void Cancel(const std::string& request_id) { (void)request_id; }
  // "processor ctc_decode", "model ocr-rec (tensor)": for /admin/pipelines.
  virtual std::string Describe() const = 0;
};

// Builds the step `spec` names: a built-in processor (processors.h) or a served model's step
// (model_steps.h), checking its keys and ports. INVALID_ARGUMENT / NOT_FOUND naming the step's
// source and the key.
[[nodiscard]] Result<std::unique_ptr<Step>> MakeStep(const StepSpec& spec,
                                                     const ModelResolver& models);

}  // namespace pier::pipelines
