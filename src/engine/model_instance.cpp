#include "engine/model_instance.h"

#include <algorithm>
#include <utility>

namespace pier::engine {

Result<std::unique_ptr<ModelInstance>> ModelInstance::Open(const ModelInstanceOptions& options) {
  std::unique_ptr<ModelInstance> instance(new ModelInstance());
  LocalModelOptions model_options = options.model;
  // The workspace must hold the scheduler's largest step, with a logit row per sequence.
  model_options.max_step_tokens = options.engine.scheduler.max_batched_tokens;
  model_options.max_logit_rows =
      std::min(options.engine.scheduler.max_seqs, options.engine.scheduler.max_batched_tokens);
  PIER_ASSIGN_OR_RETURN(instance->model_, LocalModel::Open(model_options));
  PIER_ASSIGN_OR_RETURN(instance->tokenizer_,
                        tokenizer::Tokenizer::FromGguf(instance->model_->file()));
  Result<tokenizer::ChatTemplate> chat_template =
      tokenizer::LoadChatTemplate(instance->model_->file());
  if (chat_template.ok()) {
    instance->chat_template_ = std::move(chat_template).value();
  } else {
    instance->chat_template_error_ = chat_template.status().message();
  }
  EngineOptions engine_options = options.engine;
  engine_options.max_waiting = options.max_waiting;
  PIER_ASSIGN_OR_RETURN(instance->engine_,
                        Engine::Create(engine_options, &instance->model_->runner(),
                                       &instance->model_->kv(), instance->tokenizer_.get()));
  instance->client_ = std::make_unique<InProcessEngineClient>(instance->engine_.get());
  return instance;
}

ModelInstance::~ModelInstance() {
  client_.reset();
  engine_.reset();  // ends unfinished requests before the runner and KV go away
}

}  // namespace pier::engine
