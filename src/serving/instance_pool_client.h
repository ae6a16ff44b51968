// InstancePoolClient: one EngineClient over several instances of a model (the `instances` of
// a models: entry), each with its own engine, KV cache and governor owners. A request goes
// to the instance with the least outstanding work, weighted by its size: the fewest
// sequences running or waiting per KV block it may hold (ties: the first), among those that
// serve now (EngineClient::Serving: a worker restarting does not) when any does. An abort goes to
// every instance (each ignores ids it does not know), and the stats are the instances'
// summed (the heartbeat is the stalest busy instance's, so one stalled instance still trips
// the watchdog).
//
// Ownership: borrows the instances' clients, which must outlive it.
// Thread-safety: as the instances' clients (any thread).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/engine_client.h"

namespace pier::serving {

class InstancePoolClient final : public engine::EngineClient {
 public:
  explicit InstancePoolClient(std::vector<engine::EngineClient*> instances);

  Result<std::shared_ptr<engine::RequestHandle>> Submit(engine::Request request) override;
  void Abort(const std::string& id) override;
  void AbortAll(std::string reason) override;
  engine::EngineStats Stats() const override;

  // The instance Submit would pick now (for tests and /admin/models).
  size_t PickInstance() const;
  const std::vector<engine::EngineClient*>& instances() const { return instances_; }

 private:
  std::vector<engine::EngineClient*> instances_;  // not owned
};

}  // namespace pier::serving
