#include "serving/model_host.h"

#include <algorithm>
#include <utility>

#include "model/gguf_tokenizer.h"

namespace pier::serving {

engine::LocalModelOptions ResolvedModelOptions(const ModelHostOptions& options) {
  engine::LocalModelOptions model_options = options.model;
  // The workspace must hold the scheduler's largest step, with a logit row per sequence.
  model_options.max_step_tokens = options.engine.scheduler.max_batched_tokens;
  model_options.max_logit_rows =
      std::min(options.engine.scheduler.max_seqs, options.engine.scheduler.max_batched_tokens);
  return model_options;
}

Result<std::unique_ptr<ModelHost>> ModelHost::Open(const ModelHostOptions& options,
                                                   MemoryGovernor* governor) {
  std::unique_ptr<ModelHost> host(new ModelHost());
  const engine::LocalModelOptions model_options = ResolvedModelOptions(options);
  PIER_ASSIGN_OR_RETURN(host->model_, engine::LocalModel::Open(model_options, governor));
  PIER_ASSIGN_OR_RETURN(host->tokenizer_, model::LoadTokenizer(host->model_->file()));
  Result<tokenizer::ChatTemplate> chat_template = model::LoadChatTemplate(host->model_->file());
  if (chat_template.ok()) {
    host->chat_template_ = std::move(chat_template).value();
  } else {
    host->chat_template_error_ = chat_template.status().message();
  }
  engine::EngineOptions engine_options = options.engine;
  engine_options.max_waiting = options.max_waiting;
  if (options.swap_space_bytes > 0) {
    const uint64_t block_bytes = host->model_->kv().layout().bytes_per_block();
    engine_options.swap_blocks = static_cast<int64_t>(options.swap_space_bytes / block_bytes);
    engine_options.swap_pool = options.swap_pool;
    engine_options.scheduler.preempt_by_swap = engine_options.swap_blocks > 0;
  }
  PIER_ASSIGN_OR_RETURN(host->engine_,
                        engine::Engine::Create(engine_options, &host->model_->runner(),
                                               &host->model_->kv(), host->tokenizer_.get()));
  host->client_ = std::make_unique<InProcessEngineClient>(host->engine_.get());
  return host;
}

ModelHost::~ModelHost() {
  client_.reset();
  engine_.reset();  // ends unfinished requests before the runner and KV go away
}

}  // namespace pier::serving
