// InProcessEngineClient: the EngineClient (engine/engine_client.h) that calls an Engine in
// this process: what `pier serve --workers off`, `pier bench` and the tests use. The worker
// process client will sit beside it.
//
// Ownership: borrows the engine, which must outlive the client. Thread-safety: as Engine's
// (every method may be called from any thread).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "engine/core/engine.h"
#include "engine/engine_client.h"

namespace pier::serving {

class InProcessEngineClient final : public engine::EngineClient {
 public:
  explicit InProcessEngineClient(engine::Engine* engine) : engine_(engine) {}

  Result<std::shared_ptr<engine::RequestHandle>> Submit(engine::Request request) override {
    return engine_->Submit(std::move(request));
  }
  void Abort(const std::string& id) override { engine_->Abort(id); }
  void AbortAll(std::string reason) override { engine_->AbortAll(std::move(reason)); }
  engine::EngineStats Stats() const override { return engine_->Stats(); }

 private:
  engine::Engine* engine_;  // not owned
};

}  // namespace pier::serving
