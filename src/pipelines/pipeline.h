// Pipeline: runs requests through a chain of steps (issue #46), each step a stage with its own
// bounded queue, so different requests occupy different stages at once (one in recognition
// while the next is in detection).
//
// How a request moves. Submit queues it to enter (RESOURCE_EXHAUSTED past max_queue); at most
// max_inflight requests are inside at once. Inside, it visits the steps in order: it waits in
// a step's queue until the step has a free slot (its max_inflight: requests at that stage at
// once; default two batches of its model), runs, and moves to the next step's queue. A step
// takes a new request only while the next step's queue holds fewer than the next step's
// max_inflight (backpressure: a slow stage holds the ones before it; nothing grows without
// bound). Every queue serves the highest priority class first, then the earliest deadline,
// then the oldest, so a critical request overtakes at each stage; the class and deadline also
// reach each model's own batcher or engine.
//
// Memory. Each value a step produces is charged to the pipeline's governor owner
// (`pipeline:<name>`) while the request holds it, and given back after the last step that
// reads it (a refusal fails the request with RESOURCE_EXHAUSTED, naming the step).
//
// Failure and cancellation. A step that fails ends the request with its status, the message
// prefixed "pipeline P, step S: ". Cancel (or the request's `cancelled` flag, checked at each
// queue) drops a waiting request at once; a running one ends after its step (UNAVAILABLE
// "cancelled: ..."), and its model's work stops sooner where it can: the flag reaches the
// tensor batcher (a run nobody waits for is stopped) and an LLM step is aborted.
//
// Thread-safety: every public method may be called from any thread; `done` is called once,
// on a step's or the pipeline's thread, never with the pipeline's lock held.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/buckets.h"
#include "common/status.h"
#include "memory/memory_governor.h"
#include "pipelines/pipeline_spec.h"
#include "pipelines/step.h"

namespace pier::pipelines {

struct PipelineOptions {
  // The governor charged for intermediate values; null: nothing is charged (tests).
  MemoryGovernor* governor = nullptr;
  ModelResolver models;
};

struct PipelineRequest {
  std::vector<HostTensor> inputs;  // the pipeline's inputs, by name
  int priority = 1;                // 3 critical .. 0 low
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::shared_ptr<const std::atomic<bool>> cancelled;  // may be null
  std::string traceparent;                             // W3C; echoed in each stage's log
  // Called (on the pipeline's thread, without its lock) as each stage takes the request, with
  // the stage's name: the live request board shows where a request is. May be null.
  std::function<void(const std::string& stage)> on_stage;
};

// One stage of one request: when it waited and ran, in microseconds since the Unix epoch (so
// two requests' stages compare), and how long. A model step's queue time includes its wait in
// the model's own queue (the batcher's or the engine's); compute is the rest.
struct StageTiming {
  std::string step;
  double queue_seconds = 0;
  double compute_seconds = 0;
  int64_t start_unix_us = 0;  // when the stage took it (its model may queue it further)
  int64_t end_unix_us = 0;
  int64_t items = 0;       // what it produced (lines, boxes, a batch's rows)
  int64_t batch_size = 0;  // a model step: the batch it ran in
};

struct PipelineResult {
  Status status = Status::Ok();
  std::vector<HostTensor> outputs;  // the declared outputs, in order
  std::vector<StageTiming> stages;  // the stages it ran, in order
  double admission_seconds = 0;     // waiting to enter
};

struct StageStats {
  std::string step;
  std::string kind;  // Step::Describe()
  int64_t max_inflight = 0;
  int64_t waiting = 0;
  int64_t running = 0;
  int64_t requests = 0;  // finished here (ok or not)
  int64_t failures = 0;
  int64_t items = 0;
  Buckets queue_seconds;
  Buckets compute_seconds;
  Buckets batch_size;  // model steps
};

struct PipelineStats {
  int64_t waiting = 0;  // to enter
  int64_t inside = 0;
  int64_t requests = 0;
  int64_t failures = 0;
  int64_t cancelled = 0;
  int64_t refused = 0;      // queue full
  uint64_t held_bytes = 0;  // values charged now
  std::vector<StageStats> stages;
};

class Pipeline {
 public:
  // Builds every step (MakeStep) and checks the chain: each port bound to a value of a type
  // it takes, each required port bound. INVALID_ARGUMENT naming the step and port.
  [[nodiscard]] static Result<std::shared_ptr<Pipeline>> Create(PipelineSpec spec,
                                                                PipelineOptions options);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  const PipelineSpec& spec() const;
  // INVALID_ARGUMENT for inputs that do not match the declared ones (a name unknown or
  // missing, a datatype that differs); RESOURCE_EXHAUSTED for a full queue; UNAVAILABLE when
  // stopping. Otherwise queued: returns the request's id (for Cancel) and calls `done` later.
  [[nodiscard]] Result<uint64_t> Submit(PipelineRequest request,
                                        std::function<void(PipelineResult)> done);
  void Cancel(uint64_t request_id);
  PipelineStats Stats() const;
  // Ends every request (UNAVAILABLE) and stops the threads; later Submits are refused.
  void Stop();

 private:
  struct Impl;
  explicit Pipeline(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace pier::pipelines
