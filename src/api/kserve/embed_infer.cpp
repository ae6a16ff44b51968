#include "api/kserve/embed_infer.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "api/kserve/kserve_api.h"
#include "api/openai/embeddings_api.h"
#include "serving/embedder.h"

namespace pier::api {

std::optional<EmbedInferRefusal> StartEmbedInfer(
    const serving::ServedModel& model, const Principal& principal, EmbedInferRequest request,
    const serving::ClassQueueLimits& class_max_queue,
    std::function<void(Result<EmbedInferOutput>)> done) {
  const int priority = BatcherPriority(request.priority, principal.max_priority);
  Result<std::vector<std::vector<int32_t>>> ids =
      request.token_ids.has_value()
          ? PrepareTokenIds(*model.tokenizer, std::move(*request.token_ids),
                            model.max_request_tokens, request.truncate)
          : TokenizeTexts(*model.tokenizer, request.texts, model.max_request_tokens,
                          request.truncate);
  if (!ids.ok()) {
    return EmbedInferRefusal{
        InvalidArgumentError("model '" + model.id + "': " + ids.status().message())};
  }
  int64_t cost = 0;
  for (const auto& one : *ids) cost += static_cast<int64_t>(one.size());
  std::shared_ptr<KeySlot> slot;
  if (std::optional<KeyRefusal> refused = AdmitKeyRequest(
          principal, ClassOfBatcherPriority(priority), cost, "input tokens", "inputs", &slot)) {
    return EmbedInferRefusal{std::move(refused->status), refused->retry_after_s};
  }
  serving::EmbedRequest embed;
  embed.texts = std::move(ids).value();
  embed.priority = priority;
  embed.deadline = serving::QueueDeadline(class_max_queue, ClassOfBatcherPriority(priority),
                                          std::chrono::steady_clock::now());
  // The key's slot is held until the vectors are done.
  Status submitted = model.embedder->Submit(
      std::move(embed), [done = std::move(done), slot](serving::EmbedResult result) {
        if (!result.status.ok()) {
          done(std::move(result.status));
          return;
        }
        int64_t longest = 0;
        if (!result.tokens_per_text.empty()) {
          result.vectors = serving::PaddedTokenVectors(result, &longest);
        }
        const int64_t dim = result.dim;
        const auto n =
            static_cast<int64_t>(result.vectors.size()) / dim / std::max<int64_t>(1, longest);
        EmbedInferOutput output;
        output.shape =
            longest > 0 ? std::vector<int64_t>{n, longest, dim} : std::vector<int64_t>{n, dim};
        output.values = std::move(result.vectors);
        done(std::move(output));
      });
  if (!submitted.ok()) {
    const bool full = submitted.code() == StatusCode::kResourceExhausted;
    return EmbedInferRefusal{std::move(submitted), full ? std::optional<int64_t>(1) : std::nullopt};
  }
  return std::nullopt;
}

}  // namespace pier::api
