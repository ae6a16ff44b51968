// TensorHost: one loaded tensor model (an ONNX graph) in this process: its ONNX Runtime session
// (tensor_models/onnx/onnx_session.h), governor owners, TensorBatcher (the TensorRunner the front
// end submits to), and an EngineClient face for the parts of the server that see every model
// through one (admin, metrics, the manager's idle and drain checks): its Submit refuses
// generation naming the model's kind, its Stats report the batcher's queue.
//
// Memory, under three owners of the device's governor:
//   <id>/weights       what making the session allocated through Pier's allocator and kept;
//   <id>/workspace     each run's buffers, through the allocator; after warm-up its measured
//                      peak is reserved, so a later run finds its memory;
//   <id>/ort_overhead  what the process grew by while the session was made and warmed up and
//                      the allocator did not see, charged as measured (the resident-memory
//                      delta; in a process where other models work meanwhile it is an
//                      estimate). ONNX Runtime 1.32 allocates initializers and folded constants
//                      itself, not through the environment's allocator, so for most graphs the
//                      weights are here, with graph parsing, MLAS scratch and thread stacks.
// Admission: before the session is made, a provisional figure (EstimateBytes) is reserved
// under <id>/ort_overhead; the measured charges replace it. A model whose measured memory
// does not fit is refused with the breakdown and everything it held is given back.
// Warm-up (before the model is published): one run with zeros at each preferred batch size and
// at max_batch_size (once, unbatched), which measures the working memory and checks that every
// output's first dimension scales with the batch (else the load fails: such a graph must be
// served with max_batch_size 0). Open dimensions past the batch are warmed at size 1, or at
// `inputs: {x: {warmup: [...]}}` (a detector on whole pages measured at a page's size); a graph
// that cannot run at that size is warmed by its first requests.
// Pad rules (`inputs: {x: {pad: ...}}`) are checked against the graph after the session is
// made (an axis the graph fixes, or a BYTES input, refuses the load) and handed to the batcher.
//
// Ownership: owns everything; the batcher stops (failing what waits) before the session goes.
// Thread-safety: Submit and Stats from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/engine_client.h"
#include "memory/memory_governor.h"
#include "serving/model_settings.h"
#include "serving/tensor_runner.h"

namespace pier::tensor_models {
class OnnxSession;
class TensorBatcher;
}  // namespace pier::tensor_models

namespace pier::serving {

struct TensorHostOptions {
  std::string path;  // .onnx
  std::string id;    // the model's, in messages and logs
  // Names the governor owners ("<owner_prefix>/weights", ...); empty: `id`. An instance beside
  // another (instances: N, or a reload's new version) takes "<id>#N".
  std::string owner_prefix;
  int owner_priority = 0;
  int threads = 1;  // ONNX Runtime's intra-op threads
  int64_t max_batch_size = 8;
  std::vector<int64_t> preferred_batch_sizes;
  std::chrono::microseconds max_queue_delay{10'000};
  bool adaptive_window = true;
  // Per input: fixed sizes for open dimensions (to the session) and the pad rule (checked
  // against the graph, then to the batcher).
  std::map<std::string, TensorInputSettings> inputs;
};

// What warm-up and the session measured, for logs, /admin and `pier inspect --memory`.
using TensorHostMemory = TensorRunnerMemory;

class TensorHost final : public TensorRunner {
 public:
  // OnnxSession::Open's errors (ONNX Runtime absent, a file that is not ONNX, a graph it
  // refuses, memory that does not fit: RESOURCE_EXHAUSTED naming the owner), and warm-up's (an
  // output that does not scale with the batch: INVALID_ARGUMENT).
  [[nodiscard]] static Result<std::unique_ptr<TensorHost>> Open(const TensorHostOptions& options,
                                                                MemoryGovernor* governor);
  ~TensorHost() override;

  const TensorModelInfo& info() const override;
  Status Submit(TensorRequest request, std::function<void(TensorResult)> done) override;
  TensorRunnerStats Stats() const override;
  std::optional<TensorRunnerMemory> Memory() const override { return memory_; }

  engine::EngineClient& client() { return *client_; }
  const MemoryGovernor& governor() const { return *governor_; }
  const TensorHostMemory& memory() const { return memory_; }

  // Admission's provisional figure before the session exists (weights from the file's
  // initializers, twice for ONNX Runtime's pre-packed copies, plus the file and a margin); the
  // measured figures replace it once loaded.
  [[nodiscard]] static Result<uint64_t> EstimateBytes(const TensorHostOptions& options);

 private:
  TensorHost() = default;
  Status WarmUp();

  struct Executor;
  MemoryGovernor* governor_ = nullptr;
  std::string id_;
  std::vector<OwnerId> owners_;
  std::map<std::string, std::vector<int64_t>> warmup_;  // inputs' warm-up sizes, by name
  OwnerId weights_owner_;
  OwnerId workspace_owner_;
  OwnerId overhead_owner_;
  std::unique_ptr<tensor_models::OnnxSession> session_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<tensor_models::TensorBatcher> batcher_;
  std::unique_ptr<engine::EngineClient> client_;
  Reservation workspace_reservation_;
  ExternalCharge overhead_charge_;
  TensorHostMemory memory_;
};

}  // namespace pier::serving
