// EncoderHost: one loaded embedding (encoder) model in this process: its GGUF file, governor
// owners ("<id>/weights", "<id>/workspace"), compute threads, BertModel, WordPiece tokenizer
// and EmbeddingBatcher (the Embedder the front end submits to), and an EngineClient face for the
// parts of the server that see every model through one (admin, metrics, the manager's idle and
// drain checks): its Submit refuses generation naming the model's kind, its Stats report the
// batcher's queue.
//
// Ownership: owns everything; the batcher stops (failing what waits) before the model goes.
// Thread-safety: the batcher, tokenizer and client may be used from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "encoder/bert_model.h"
#include "encoder/embedding_batcher.h"
#include "engine/engine_client.h"
#include "memory/memory_governor.h"
#include "serving/embedder.h"
#include "tokenizer/wordpiece_tokenizer.h"

namespace pier::serving {

struct EncoderHostOptions {
  std::string path;
  std::string id;  // names the governor owners
  int owner_priority = 0;
  int threads = 1;  // compute threads, counting the batcher's own
  int64_t batch_tokens = 4096;
  encoder::BatcherOptions batcher;
};

class EncoderHost final : public Embedder {
 public:
  // The file's errors, ReadEncoderInfo's, the tokenizer's (an encoder needs a WordPiece
  // vocabulary) and BertModel::Create's (RESOURCE_EXHAUSTED when it does not fit).
  [[nodiscard]] static Result<std::unique_ptr<EncoderHost>> Open(const EncoderHostOptions& options,
                                                                 MemoryGovernor* governor);
  ~EncoderHost() override;

  // Embedder: the batcher's.
  Status Submit(EmbedRequest request, std::function<void(EmbedResult)> done) override {
    return batcher_->Submit(std::move(request), std::move(done));
  }
  EmbedderStats Stats() const override { return batcher_->Stats(); }

  const encoder::EncoderInfo& info() const { return model_->info(); }
  const tokenizer::WordPieceTokenizer& tokenizer() const { return *tokenizer_; }
  engine::EngineClient& client() { return *client_; }
  const MemoryGovernor& governor() const { return *governor_; }
  // Tokens one text may hold: the context, within one batch's budget.
  int64_t max_text_tokens() const;

  // What Open will allocate for `options` (weights, workspace), for admission.
  [[nodiscard]] static Result<uint64_t> EstimateBytes(const EncoderHostOptions& options);

 private:
  EncoderHost() = default;

  MemoryGovernor* governor_ = nullptr;
  std::vector<OwnerId> owners_;
  std::unique_ptr<model::GgufFile> file_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<tokenizer::WordPieceTokenizer> tokenizer_;
  std::unique_ptr<encoder::BertModel> model_;
  std::unique_ptr<encoder::EmbeddingBatcher> batcher_;
  std::unique_ptr<engine::EngineClient> client_;
};

}  // namespace pier::serving
