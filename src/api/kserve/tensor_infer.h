// The one run of a KServe v2 infer request for a tensor model (an ONNX graph), after each
// transport has read it (tensor_infer_request.h), as StartEmbedInfer is for embedding models:
// check what only the front end knows (a classification output must exist and hold numbers),
// take the caller's key limits, and submit to the model's TensorRunner with the class's queue
// deadline and the caller's cancelled flag. The runner's Submit checks the tensors against the
// model (CheckTensorRequest: INVALID_ARGUMENT naming the input, the expected and the received
// type or shape) before anything runs. The HTTP route and the gRPC service both call it, so
// they refuse alike and differ only in how they write the answer.
//
// Key limits: a request costs its items, the first dimension of its first input for a model
// that batches (max_batch_size > 0), else 1 ("items" against the key's per-minute budget),
// and holds one of the key's concurrent slots until its answer is ready.
//
// Thread-safety: StartTensorInfer may be called from any thread; `done` runs on the runner's
// thread (or on the caller's, when the runner answers at once).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "api/auth/api_keys.h"
#include "api/kserve/embed_infer.h"
#include "api/kserve/tensor_infer_request.h"
#include "common/status.h"
#include "serving/model_registry.h"
#include "serving/request_policy.h"

namespace pier::api {

// The answer: the outputs in the order asked (or the model's), a classification output
// already turned into its BYTES strings, and for each whether the client wants it binary
// (HTTP; gRPC always sends raw_output_contents).
struct TensorInferAnswer {
  std::vector<HostTensor> outputs;
  std::vector<bool> binary;  // [outputs.size()]
  // Where the time went (the answer's Server-Timing header): images decoded in the front
  // end, waiting for the batch, the batch's run; and the batch's items.
  double decode_seconds = 0;
  double queue_seconds = 0;
  double compute_seconds = 0;
  int64_t batch_size = 0;
};

// Why a request was not queued: as EmbedInferRefusal (INVALID_ARGUMENT, a key's refusal with
// its Retry-After, the runner's RESOURCE_EXHAUSTED with Retry-After 1 s, UNAVAILABLE).
using TensorInferRefusal = EmbedInferRefusal;

// Queues `request` for `model` (kind kTensor with a runner) as `principal`; nullopt when
// queued, and then `done` is called once with the answer or the runner's failure
// (RESOURCE_EXHAUSTED past the deadline, CANCELLED, INTERNAL, UNAVAILABLE). `cancelled` (may
// be null) is the runner's flag: set it when nobody waits any more. `done` must not hold the
// model.
std::optional<TensorInferRefusal> StartTensorInfer(
    const serving::ServedModel& model, const Principal& principal, TensorInferRequest request,
    const serving::ClassQueueLimits& class_max_queue,
    std::shared_ptr<const std::atomic<bool>> cancelled,
    std::function<void(Result<TensorInferAnswer>)> done);

// Triton's classification of `output`: for each batch row (the first dimension when
// `batched`; the whole tensor otherwise) the k largest values, highest first (ties: the lower
// index first), as BYTES "score:index" with the score as C's %f writes it ("0.950000:3"), or
// "score:index:label" where `labels` (may be null) names the class; shape [batch, k'] (or
// [k']), k' = min(k, elements per row). INVALID_ARGUMENT for BYTES.
[[nodiscard]] Result<HostTensor> ClassifyOutput(const HostTensor& output, int64_t k, bool batched,
                                                const std::vector<std::string>* labels = nullptr);

// The classes of one row of a classification: index, score and label (empty when none).
struct ClassScore {
  int64_t index = 0;
  double score = 0;
  std::string label;
};
// `output`'s k best classes per row (as ClassifyOutput orders them), as values.
[[nodiscard]] Result<std::vector<std::vector<ClassScore>>> TopClasses(
    const HostTensor& output, int64_t k, bool batched, const std::vector<std::string>* labels);

}  // namespace pier::api
