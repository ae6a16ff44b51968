// ModelManager: moves the models of a ModelRegistry through their lifecycle on one device set:
// loads (at startup, on demand, on an operator's request), unloads that drain, idle unloads,
// evictions that make room, and reloads of a changed configuration.
//
// One thread does every load and unload, one at a time: loads that run together mis-measure
// each other's memory, and an unload must see the memory of the load that follows it. Each
// operation is queued and answered through its callback, on that thread.
//
// - Load: unloaded/failed -> loading -> ready (Publish). A load that does not fit the budget
//   first unloads idle `on_demand` models, cheapest to reload (smallest file) first; never one
//   with work in flight or an `on_start` one. If it still does not fit, the model is unloaded
//   again with the memory breakdown as its reason (RESOURCE_EXHAUSTED); any other failure
//   leaves it failed with the reason.
// - Unload: ready -> draining: new requests no longer reach it; requests in flight may finish
//   for the drain grace period, then are aborted with a reason ("model X is being unloaded").
//   Once the last request holding the model is gone its engines stop, every byte it charged
//   goes back to the governor, and it is unloaded.
// - Idle unload: an `on_demand` model with `idle_unload_after` and no work for that long.
// - Reload: the new list against the current one: added models are declared (and loaded when
//   `on_start`), removed ones drained and forgotten, changed ones (settings or the file) loaded
//   anew beside the old version, which keeps serving until the new one is ready and then
//   drains; a new version that fails to load leaves the old one serving, and says why.
//
// Ownership: borrows the device set and registry (both outlive it); holds the models being
// drained. Thread-safety: every method may be called from any thread; Start before the others.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "serving/device_set.h"
#include "serving/fallback_switch.h"
#include "serving/model_loader.h"
#include "serving/model_registry.h"

namespace pier::serving {

struct ModelSpec {
  ModelLoadOptions load;  // load.id is the model's id
  LoadPolicy policy = LoadPolicy::kOnStart;
  // on_demand models: unloaded after this long without work (0: never).
  std::chrono::milliseconds idle_unload_after{0};
  std::string fallback = {};          // another model's name, for load shedding (QoS)
  FallbackPolicy fallback_when = {};  // when requests go to it (fallback_switch.h)

  bool operator==(const ModelSpec&) const = default;
};

struct ModelManagerOptions {
  // How long requests in flight on a model being unloaded may finish before they are aborted.
  std::chrono::milliseconds drain_grace{30'000};
  // How often drains, idle models and waiting requests are looked at.
  std::chrono::milliseconds tick{50};
  // On the manager thread (or Start's): after each load that succeeded, and each unload.
  std::function<void(const std::string& id, double seconds)> on_loaded = nullptr;
  std::function<void(const std::string& id, ModelRegistry::UnloadKind kind)> on_unloaded = nullptr;
};

// What a reload did, by model id.
struct ReloadReport {
  std::vector<std::string> added;
  std::vector<std::string> removed;
  std::vector<std::string> reloaded;
  std::vector<std::string> unchanged;
  std::vector<std::pair<std::string, std::string>> failed;  // id, why (the old one serves)
};

class ModelManager {
 public:
  using Done = std::function<void(Status)>;

  ModelManager(ModelManagerOptions options, DeviceSet* devices, ModelRegistry* registry);
  // Stop().
  ~ModelManager();
  ModelManager(const ModelManager&) = delete;
  ModelManager& operator=(const ModelManager&) = delete;

  // Declares every model, checks that the `on_start` ones fit the budget together (their
  // guaranteed bytes: weights, workspace, KV minimum), loads them in order on the calling
  // thread, then
  // starts the manager's thread and installs itself as the registry's load requester. The
  // first load that fails is returned (with the model's id); the models loaded before stay.
  [[nodiscard]] Status Start(std::vector<ModelSpec> specs);

  // Queued operations; `done` (may be null) is called once, on the manager thread. `name` is
  // an id or alias. Load: OK when ready (already or now). Unload: OK once unloaded (already
  // or after the drain). NOT_FOUND for an unknown name; UNAVAILABLE after Stop.
  void Load(std::string name, Done done);
  void Unload(std::string name, Done done);
  void Reload(std::vector<ModelSpec> specs, std::function<void(Result<ReloadReport>)> done);

  // The configuration of a managed model (for /admin/models), or null.
  std::shared_ptr<const ModelSpec> SpecOf(const std::string& id) const;

  // Ends the thread: queued operations are answered UNAVAILABLE, drains in progress end at
  // once (their requests are aborted). The models stay in the registry. Idempotent.
  void Stop();

 private:
  struct Drain {
    std::string id;
    ModelRef model;
    std::chrono::steady_clock::time_point deadline;
    ModelRegistry::UnloadKind kind = ModelRegistry::UnloadKind::kRequested;
    bool aborted = false;
    bool replaced = false;  // a new version serves under the id: do not mark it unloaded
    bool forget = false;    // removed from the configuration: forget it once unloaded
    std::vector<Done> dones;
  };
  struct Activity {
    int64_t requests_finished = -1;
    std::chrono::steady_clock::time_point last_active;
  };

  // RESOURCE_EXHAUSTED naming each on_start model's guaranteed bytes when they do not fit the
  // device's budget together (checked before any of them loads).
  Status CheckOnStartModelsFit(const std::vector<ModelSpec>& specs) const;
  void Run();
  void Post(std::function<void()> op);
  bool Stopping() const;
  // The manager thread's side of each operation.
  Status DoLoad(const std::string& id);
  void DoUnload(const std::string& id, ModelRegistry::UnloadKind kind, Done done,
                bool forget = false);
  ReloadReport DoReload(std::vector<ModelSpec> specs);
  // A reload's spec for a model not serving now: recorded, and loaded when on_start (a
  // failure goes into the report).
  void AdoptSpec(std::shared_ptr<const ModelSpec> spec, ReloadReport* report);
  // OpenModel, making room by evicting idle on_demand models while it does not fit.
  Result<ModelRef> OpenWithEviction(const ModelSpec& spec);
  // A model with speculative method draft: the proposer over its draft, which must be a
  // loaded LLM with the same vocabulary size.
  Result<std::shared_ptr<engine::Proposer>> DraftProposerFor(const ModelLoadOptions& load);
  // The idle on_demand model on `device` (EffectiveDevice) cheapest to reload (not `except`), or
  // empty.
  std::string PickEviction(const std::string& except, const std::string& device);
  void Tick();
  void FinishDrain(Drain& drain);
  // Gives the device's cached free segments back (after a model is gone).
  void ReturnCachedMemory();
  // The managed id `name` names, or NOT_FOUND.
  Result<std::string> IdOf(const std::string& name) const;

  const ModelManagerOptions options_;
  DeviceSet* const devices_;
  ModelRegistry* const registry_;

  mutable Mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_ PIER_GUARDED_BY(mutex_);
  bool stopping_ PIER_GUARDED_BY(mutex_) = false;
  std::map<std::string, std::shared_ptr<const ModelSpec>> specs_ PIER_GUARDED_BY(mutex_);
  std::thread thread_;

  // Manager thread only.
  std::vector<Drain> drains_;
  std::map<std::string, Activity> activity_;
  std::map<std::string, std::pair<int64_t, int64_t>> loaded_files_;  // id: (size, mtime)
};

}  // namespace pier::serving
