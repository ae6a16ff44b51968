// EngineClient: how the serving front end (HTTP routes, `pier bench`, later the supervisor)
// talks to one model instance's engine, without knowing where that engine runs.
//
// It carries the engine's plain Request and Event types. Its implementations live in
// serving/: InProcessEngineClient (an Engine in this process) and, later, the worker-process
// client for `pier serve` with one process per instance.
// Tokenization and chat templates stay in the front end (the caller submits token ids), so a
// worker only ever sees tokens.
//
// Thread-safety: every method may be called from any thread. Submit must not block on the
// model (it validates and queues); events are read from the returned handle, synchronously
// (Next/WaitAll) or asynchronously (SetListener + Drain).
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "engine/scheduler/engine.h"
#include "engine/scheduler/request.h"

namespace pier::engine {

class EngineClient {
 public:
  virtual ~EngineClient() = default;

  // The engine's Submit: INVALID_ARGUMENT for a request it refuses (message says why),
  // UNAVAILABLE when it is shutting down or gone, RESOURCE_EXHAUSTED when its queue is full.
  [[nodiscard]] virtual Result<std::shared_ptr<RequestHandle>> Submit(Request request) = 0;
  // Ends a request at once (its choices finish with kAbort); unknown ids are ignored.
  virtual void Abort(const std::string& id) = 0;
  // A snapshot; last_step_at_us is the engine's heartbeat.
  virtual EngineStats Stats() const = 0;
};

}  // namespace pier::engine
