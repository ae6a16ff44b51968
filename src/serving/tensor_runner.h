// TensorRunner: how the front end (api/'s KServe v2 infer route, the gRPC adapter) reaches a
// tensor model (an ONNX graph): submit input tensors, get the output tensors later; read what
// the model takes and gives, its queue's figures and what its memory measured. Like Embedder,
// it hides what runs behind it (today TensorHost's in-process TensorBatcher over an ONNX
// Runtime session). The request and answer types are tensor_models/tensor_request.h's.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "common/status.h"
#include "tensor_models/tensor_request.h"

namespace pier::serving {

using TensorModelInfo = tensor_models::TensorModelInfo;
using TensorRequest = tensor_models::TensorRequest;
using TensorResult = tensor_models::TensorResult;
using TensorRunnerStats = tensor_models::TensorRunnerStats;
using tensor_models::CheckTensorRequest;

// What loading and warming the model measured, beside the bytes its governor owners hold
// (tensor_host.h says how each figure is measured): for /admin/models and `pier inspect
// --memory`.
struct TensorRunnerMemory {
  uint64_t weights_bytes = 0;   // held by the session after creation
  uint64_t workspace_peak = 0;  // the most a warm-up run held beyond the weights
  uint64_t overhead_bytes = 0;  // charged to <id>/ort_overhead
  uint64_t resident_delta = 0;  // the process's growth over creation and warm-up
  bool warmed = false;          // warm-up ran (false: open dimensions it could not fill)
};

class TensorRunner {
 public:
  virtual ~TensorRunner() = default;
  virtual const TensorModelInfo& info() const = 0;
  // Validates (CheckTensorRequest's INVALID_ARGUMENT), queues (RESOURCE_EXHAUSTED: the queue
  // is full; UNAVAILABLE: shutting down); `done` is called once, later, with the outputs or
  // the failure (RESOURCE_EXHAUSTED for a request that outwaited its deadline, CANCELLED,
  // INTERNAL for a run that failed, UNAVAILABLE). `done` runs on the batcher's thread and must
  // not block.
  [[nodiscard]] virtual Status Submit(TensorRequest request,
                                      std::function<void(TensorResult)> done) = 0;
  virtual TensorRunnerStats Stats() const = 0;
  // The measured figures above; nullopt where nothing was measured (a runner whose model
  // lives elsewhere and has not reported them).
  virtual std::optional<TensorRunnerMemory> Memory() const { return std::nullopt; }
};

}  // namespace pier::serving
