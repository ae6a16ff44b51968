// TensorBatcher: dynamic batching for a tensor model (an ONNX graph). Requests queue; one
// thread forms batches and runs them through a BatchExecutor (the ONNX Runtime session); a
// second watches, while a batch runs, for requests nobody waits for any more.
//
// Batching (max_batch_size > 0, from TensorModelInfo): requests whose inputs have the same
// dimensions after the first form a shape group; a group's requests are concatenated along
// the first dimension up to max_batch_size items. Where the model has a padding rule
// (TensorBatcherOptions::pads, input_pad.h), dimensions it pads do not split groups: a batch
// whose requests differ along them is padded to its largest size along each, with the rule's
// element, and every output comes back at the size the padded run gave it (a request's answer
// may be larger than it would be alone along dimensions that follow the padded ones). A request
// brings its own batch (1..max) and is never split across batches. A group's batch goes as soon as
// what waits in it reaches a preferred batch size or the maximum (it then takes the largest
// preferred size its requests make up exactly, else what fits in the maximum), else when its oldest
// request has waited the window (then it takes what fits in the maximum). Each group batches on its
// own: of the groups ready to go, the one holding the highest class's oldest request goes first.
// Within a group higher classes fill the batch first, FIFO within a class; a waiting request rises
// one class per `aging` waited, so lower classes are not starved. A model with max_batch_size 0
// runs each request alone, its inputs as they came, at once.
//
// The window adapts as EmbeddingBatcher's: it halves (down to 0) when a batch closes with
// nothing else waiting (a lone request is not held for company that is not coming) and
// doubles (up to max_queue_delay) when a batch fills before its window ends.
//
// Failures: a request whose deadline passes before it starts fails with RESOURCE_EXHAUSTED (it
// is not served late); one whose `cancelled` flag is set before it starts is dropped with
// CancelledError() (Stats().cancelled). While a batch runs its requests' flags are polled every
// 10 ms: once every one of them is set, the executor is asked to stop (StopRun) and they all
// fail with CancelledError(). A run that fails fails each of its requests with the run's
// status; outputs that do not match the model (count, batch, data length) with INTERNAL.
//
// Copies: a batch of several requests costs one allocation per input (the concatenation, padded
// or not) and
// one per output a request asked for (its rows); a batch of one request hands its tensors to
// the executor and the executor's outputs to the request without copying.
//
// Thread-safety: Submit, CancelQueued, Stats and info from any thread. Callbacks run on the
// batcher's threads (or on CancelQueued's caller), must not block, and must not hold the last
// reference to what owns the batcher (it cannot be destroyed from its own threads).
// Destruction lets the running batch finish, fails what is still queued (UNAVAILABLE) and
// joins the threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "tensor/host_tensor.h"
#include "tensor_models/input_pad.h"
#include "tensor_models/tensor_request.h"

namespace pier::tensor_models {

// What runs a batch: the ONNX Runtime session, or a fake in tests. Run is called from the
// batcher's thread, one batch at a time; StopRun from its other thread while Run may be in
// progress.
class BatchExecutor {
 public:
  virtual ~BatchExecutor() = default;
  // Runs one batch: every model input once, in info().inputs order, each with the batch as its
  // first dimension (as declared, for max_batch_size 0). Returns every output of the model, in
  // info().outputs order, each with the batch as its first dimension (as the model gives them,
  // for max_batch_size 0); or the failure, which every request of the batch gets.
  [[nodiscard]] virtual Result<std::vector<HostTensor>> Run(std::vector<HostTensor> inputs) = 0;
  // Asks a Run in progress on another thread to stop soon (it then returns an error). A no-op
  // when no Run is in progress; it must not affect a later Run. Called with the batcher's lock
  // held: it must not block or call back into the batcher.
  virtual void StopRun() = 0;
};

struct TensorBatcherOptions {
  // The longest a request waits for others to share its batch (the window's ceiling).
  std::chrono::microseconds max_queue_delay{10'000};
  // Off: every batch waits the whole max_queue_delay (unless it fills), as fixed batchers do.
  bool adaptive_window = true;
  // Items (the first dimension summed over requests; 1 per request for max_batch_size 0) that
  // may wait; beyond: RESOURCE_EXHAUSTED at Submit.
  int64_t max_queued_items = 1024;
  // A waiting request rises one class per `aging` waited (0: never).
  std::chrono::milliseconds aging{250};
  // One per input of the model, in its order (input_pad.h's ResolvePadRules): the dimensions
  // requests may differ in and still share a batch, and the element they are padded with.
  // Empty: no padding (requests share a batch only with the same dimensions after the first).
  std::vector<InputPad> pads = {};
};

// What a request that nobody waits for any more gets (its `cancelled` flag was set).
// common/status.h has no CANCELLED code: this is UNAVAILABLE with a message starting
// "cancelled".
Status CancelledError(const std::string& model);

class TensorBatcher {
 public:
  // Borrows `executor`, which must outlive the batcher; starts its threads. `model` names the
  // model in messages. The batch sizes come from `info` (max_batch_size, preferred_batch_sizes).
  TensorBatcher(std::string model, TensorModelInfo info, BatchExecutor& executor,
                TensorBatcherOptions options);
  ~TensorBatcher();
  TensorBatcher(const TensorBatcher&) = delete;
  TensorBatcher& operator=(const TensorBatcher&) = delete;

  // Validates (CheckTensorRequest: INVALID_ARGUMENT) and queues (a full queue:
  // RESOURCE_EXHAUSTED; shutting down: UNAVAILABLE); `done` is called once, later, with the
  // outputs asked for (all when none was), in the order asked, or the failure.
  [[nodiscard]] Status Submit(TensorRequest request, std::function<void(TensorResult)> done);

  // Fails every queued request with UNAVAILABLE and `reason` (a model being unloaded after its
  // grace period); the batch running finishes.
  void CancelQueued(const std::string& reason);

  TensorRunnerStats Stats() const;
  const TensorModelInfo& info() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pier::tensor_models
