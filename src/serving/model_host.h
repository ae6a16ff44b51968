// ModelHost: one loaded model instance in this process, assembled from its parts: the
// LocalModel (file, device, governor, runner, KV store), its tokenizer and chat template,
// the Engine that runs requests on it, and an InProcessEngineClient over that engine.
// `pier serve` registers one per served model in its ModelRegistry; the server tests and
// the engine benchmark build one too.
//
// Ownership: owns everything; destroys the engine (which ends unfinished requests with
// kAbort) before the model it runs on. Thread-safety: the accessors return objects whose own
// thread-safety applies (the client, the tokenizer and the chat template may be used from any
// thread; the governor's Stats() too).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "engine/core/engine.h"
#include "engine/engine_client.h"
#include "engine/runner/local_model.h"
#include "serving/in_process_engine_client.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pier::serving {

struct ModelHostOptions {
  // path, threads, kv_tokens, block_size and kv_dtype are used; max_step_tokens and
  // max_logit_rows are derived from `engine.scheduler`.
  engine::LocalModelOptions model;
  engine::EngineOptions engine;
  // Submit answers RESOURCE_EXHAUSTED while this many sequences wait (0: no limit).
  int64_t max_waiting = 0;
  // Preemption by swap: this many bytes of KV blocks from `swap_pool` (0: preemption by
  // recompute, no pool needed).
  uint64_t swap_space_bytes = 0;
  PinnedHostPool* swap_pool = nullptr;
};

// The model options Open uses: `options.model` with its workspace sized for the scheduler's
// largest step (for estimates made before a load).
engine::LocalModelOptions ResolvedModelOptions(const ModelHostOptions& options);

class ModelHost {
 public:
  // LocalModel::Open's errors, the tokenizer's, and Engine::Create's. A model without a chat
  // template still loads (chat_template() is then null and chat requests are refused).
  // `governor`: the governor of the device it runs on (DeviceSet), borrowed; it must outlive
  // the host.
  [[nodiscard]] static Result<std::unique_ptr<ModelHost>> Open(const ModelHostOptions& options,
                                                               MemoryGovernor* governor);
  ~ModelHost();

  engine::EngineClient& client() { return *client_; }
  engine::Engine& engine() { return *engine_; }
  engine::LocalModel& model() { return *model_; }
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  // Null when the file has no usable chat template; then chat_template_error() says why.
  const tokenizer::ChatTemplate* chat_template() const {
    return chat_template_ ? &*chat_template_ : nullptr;
  }
  const std::string& chat_template_error() const { return chat_template_error_; }
  // Positions one request may use (prompt + generated), as the engine enforces.
  int64_t max_request_tokens() const { return engine_->Stats().max_request_tokens; }

 private:
  ModelHost() = default;

  std::unique_ptr<engine::LocalModel> model_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::optional<tokenizer::ChatTemplate> chat_template_;
  std::string chat_template_error_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<InProcessEngineClient> client_;
};

}  // namespace pier::serving
