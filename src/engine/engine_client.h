// EngineClient: how the serving front end (api/'s routes, the model manager, the admin routes
// and metrics) talks to a model's engine, without knowing where that engine runs.
//
// It carries the engine's plain Request and Event types. Its implementations live in
// serving/: InProcessEngineClient (an Engine in this process), WorkerClient (an instance in its
// own `pier worker` process, `pier serve --workers on`), InstancePoolClient (a model's
// instances behind one client) and EncoderHost's (an embedding model: it refuses generation
// and reports its batcher's queue).
// What crosses this interface: token ids in (tokenization and chat templates stay in the
// front end), events out that carry both the sampled token ids and their text. Detokenization
// and stop strings run in the engine, next to the sampler: a stop string must end generation
// in the step that completes it (a front end that matched text after the fact would let the
// engine run on and would need an abort round trip per stop), and the text held back while a
// stop string may be forming is the engine's to release. A worker therefore loads the model's
// tokenizer (from the GGUF it maps anyway) for decoding only; the front end's own copy does the
// encoding, templates and API shapes. See docs/architecture.md.
//
// Thread-safety: every method may be called from any thread. Submit must not block on the
// model (it validates and queues); events are read from the returned handle, synchronously
// (Next/WaitAll) or asynchronously (SetListener + Drain).
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "engine/core/engine.h"
#include "engine/request.h"

namespace pier::engine {

class EngineClient {
 public:
  virtual ~EngineClient() = default;

  // The engine's Submit: INVALID_ARGUMENT for a request it refuses (message says why),
  // UNAVAILABLE when it is shutting down or gone, RESOURCE_EXHAUSTED when its queue is full.
  [[nodiscard]] virtual Result<std::shared_ptr<RequestHandle>> Submit(Request request) = 0;
  // Ends a request at once (its choices finish with kAbort); unknown ids are ignored.
  virtual void Abort(const std::string& id) = 0;
  // Ends every request submitted so far (kAbort, `reason` in the final events' `error`): a
  // model being unloaded after its grace period.
  virtual void AbortAll(std::string reason) = 0;
  // A snapshot; last_step_at_us is the engine's heartbeat.
  virtual EngineStats Stats() const = 0;
  // False while the instance cannot run requests now (a worker process restarting, draining
  // or quarantined): a pool of instances sends new requests to the others.
  virtual bool Serving() const { return true; }
};

}  // namespace pier::engine
