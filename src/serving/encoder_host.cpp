#include "serving/encoder_host.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/thread_pool.h"
#include "engine/request.h"
#include "model/gguf_file.h"
#include "model/gguf_tokenizer.h"

namespace pier::serving {
namespace {

// The EngineClient of an embedding model: no generation; the batcher's queue as its load.
class EncoderEngineClient final : public engine::EngineClient {
 public:
  EncoderEngineClient(std::string id, encoder::EmbeddingBatcher* batcher, int64_t context)
      : id_(std::move(id)), batcher_(batcher), context_(context) {}

  Result<std::shared_ptr<engine::RequestHandle>> Submit(engine::Request) override {
    return InvalidArgumentError("model '" + id_ +
                                "' is an embedding model: it serves POST /v1/embeddings and "
                                "KServe v2 infer, not text generation");
  }
  void Abort(const std::string&) override {}
  // A model being unloaded: what still waits fails (the batch running finishes).
  void AbortAll(std::string reason) override { batcher_->CancelQueued(reason); }
  engine::EngineStats Stats() const override {
    const encoder::BatcherStats b = batcher_->Stats();
    engine::EngineStats s;
    s.waiting = b.queued_texts;
    s.running = b.running_texts;
    s.steps = b.batches;
    s.requests_finished = b.texts;
    s.max_request_tokens = context_;
    // Its heartbeat is now: a batcher has no step loop to stall, and a long batch is bounded.
    s.last_step_at_us = engine::NowUs();
    return s;
  }

 private:
  const std::string id_;
  encoder::EmbeddingBatcher* const batcher_;
  const int64_t context_;
};

}  // namespace

Result<std::unique_ptr<EncoderHost>> EncoderHost::Open(const EncoderHostOptions& options,
                                                       MemoryGovernor* governor) {
  if (governor == nullptr) return InvalidArgumentError("an encoder needs its device's governor");
  std::unique_ptr<EncoderHost> host(new EncoderHost());
  host->governor_ = governor;
  PIER_ASSIGN_OR_RETURN(host->file_, model::GgufFile::Open(options.path));
  PIER_ASSIGN_OR_RETURN(tokenizer::VocabularySpec spec, model::ReadVocabularySpec(*host->file_));
  if (spec.model != "bert") {
    return UnsupportedError(options.path +
                            ": an encoder needs a WordPiece vocabulary "
                            "(tokenizer.ggml.model = bert), not '" +
                            spec.model + "'");
  }
  PIER_ASSIGN_OR_RETURN(host->tokenizer_, tokenizer::WordPieceTokenizer::Create(spec));
  PIER_ASSIGN_OR_RETURN(OwnerId weights, governor->AddOwner({.name = options.id + "/weights",
                                                             .priority = options.owner_priority}));
  host->owners_.push_back(weights);
  PIER_ASSIGN_OR_RETURN(
      OwnerId workspace,
      governor->AddOwner({.name = options.id + "/workspace", .priority = options.owner_priority}));
  host->owners_.push_back(workspace);
  host->pool_ = std::make_unique<ThreadPool>(std::max(1, options.threads));
  // Other models' KV lent beyond their minimum comes back first (as for an LLM's load); when
  // it cannot, BertModel::Create's allocations say why.
  PIER_ASSIGN_OR_RETURN(const uint64_t needed,
                        encoder::BertModel::EstimateBytes(*host->file_, options.batch_tokens,
                                                          std::max(1, options.threads)));
  (void)governor->MakeRoom(weights, needed, std::chrono::seconds(5));
  PIER_ASSIGN_OR_RETURN(
      host->model_,
      encoder::BertModel::Create(*host->file_, {.governor = governor,
                                                .weights_owner = weights,
                                                .workspace_owner = workspace,
                                                .pool = host->pool_.get(),
                                                .max_batch_tokens = options.batch_tokens}));
  host->batcher_ = std::make_unique<encoder::EmbeddingBatcher>(*host->model_, options.batcher);
  host->client_ = std::make_unique<EncoderEngineClient>(options.id, host->batcher_.get(),
                                                        host->max_text_tokens());
  const encoder::EncoderInfo& info = host->model_->info();
  spdlog::info("loaded embedding model {} ({} layers, dim {}, {} pooling, context {})", options.id,
               info.block_count, info.embedding_length, encoder::PoolingName(info.pooling),
               info.context_length);
  return host;
}

EncoderHost::~EncoderHost() {
  client_.reset();
  batcher_.reset();
  model_.reset();
  pool_.reset();
  for (OwnerId owner : owners_) {
    if (Status removed = governor_->RemoveOwner(owner); !removed.ok()) {
      spdlog::warn("encoder owner not removed: {}", removed.ToString());
    }
  }
}

int64_t EncoderHost::max_text_tokens() const {
  return std::min(model_->info().context_length, model_->max_batch_tokens());
}

Result<uint64_t> EncoderHost::EstimateBytes(const EncoderHostOptions& options) {
  PIER_ASSIGN_OR_RETURN(std::unique_ptr<model::GgufFile> file, model::GgufFile::Open(options.path));
  return encoder::BertModel::EstimateBytes(*file, options.batch_tokens,
                                           std::max(1, options.threads));
}

}  // namespace pier::serving
