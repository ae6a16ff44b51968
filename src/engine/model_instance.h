// ModelInstance: one served model in this process, assembled from its parts: the LocalModel
// (file, device, governor, runner, KV store), its tokenizer and chat template, the Engine that
// runs requests on it, and an InProcessEngineClient over that engine. `pier serve` and the
// server tests build one; `pier bench` and the engine benchmark can too.
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
#include "engine/engine_client.h"
#include "engine/local_model.h"
#include "engine/scheduler/engine.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pier::engine {

struct ModelInstanceOptions {
  // path, threads, kv_tokens, block_size, memory_budget, device_memory are used;
  // max_step_tokens and max_logit_rows are derived from `engine.scheduler`.
  LocalModelOptions model;
  EngineOptions engine;
  // Submit answers RESOURCE_EXHAUSTED while this many sequences wait (0: no limit).
  int64_t max_waiting = 0;
};

class ModelInstance {
 public:
  // LocalModel::Open's errors, the tokenizer's, and Engine::Create's. A model without a chat
  // template still loads (chat_template() is then null and chat requests are refused).
  [[nodiscard]] static Result<std::unique_ptr<ModelInstance>> Open(
      const ModelInstanceOptions& options);
  ~ModelInstance();

  EngineClient& client() { return *client_; }
  Engine& engine() { return *engine_; }
  LocalModel& model() { return *model_; }
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  // Null when the file has no usable chat template; then chat_template_error() says why.
  const tokenizer::ChatTemplate* chat_template() const {
    return chat_template_ ? &*chat_template_ : nullptr;
  }
  const std::string& chat_template_error() const { return chat_template_error_; }
  // Positions one request may use (prompt + generated), as the engine enforces.
  int64_t max_request_tokens() const { return engine_->Stats().max_request_tokens; }

 private:
  ModelInstance() = default;

  std::unique_ptr<LocalModel> model_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::optional<tokenizer::ChatTemplate> chat_template_;
  std::string chat_template_error_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<InProcessEngineClient> client_;
};

}  // namespace pier::engine
