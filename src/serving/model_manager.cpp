#include "serving/model_manager.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "memory/byte_size.h"
#include "model/gguf_file.h"
#include "model/gguf_tokenizer.h"
#include "serving/draft_proposer.h"
#include "serving/worker_client.h"

namespace pier::serving {
namespace {

using Clock = std::chrono::steady_clock;

// (size, modification time) of a file; (-1, -1) when it cannot be read.
std::pair<int64_t, int64_t> FileIdentity(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return {-1, -1};
  return {static_cast<int64_t>(info.st_size),
          static_cast<int64_t>(info.st_mtim.tv_sec) * 1'000'000'000 + info.st_mtim.tv_nsec};
}

bool HasWork(const ServedModel& model) {
  const engine::EngineStats stats = model.client->Stats();
  return stats.running + stats.waiting > 0;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

ModelManager::ModelManager(ModelManagerOptions options, DeviceSet* devices, ModelRegistry* registry)
    : options_(std::move(options)), devices_(devices), registry_(registry) {}

ModelManager::~ModelManager() { Stop(); }

Status ModelManager::Start(std::vector<ModelSpec> specs) {
  for (const ModelSpec& spec : specs) {
    PIER_RETURN_IF_ERROR(registry_->Declare(spec.load.id, spec.load.aliases, spec.policy));
    MutexLock lock(mutex_);
    specs_[spec.load.id] = std::make_shared<const ModelSpec>(spec);
  }
  PIER_RETURN_IF_ERROR(CheckOnStartModelsFit(specs));
  for (const ModelSpec& spec : specs) {
    if (spec.policy != LoadPolicy::kOnStart) continue;
    if (Status loaded = DoLoad(spec.load.id); !loaded.ok()) return loaded;
  }
  registry_->SetLoadRequester([this](const std::string& id) { Load(id, nullptr); });
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

Status ModelManager::CheckOnStartModelsFit(const std::vector<ModelSpec>& specs) const {
  // The on_start models of each device together against what its budget has free: the CPU's,
  // and each GPU's (its books, for workers; its governor, opened now, in this process).
  struct Need {
    uint64_t total = 0;
    std::string parts;
    bool workers = false;
  };
  std::map<std::string, Need> needs;
  for (const ModelSpec& spec : specs) {
    if (spec.policy != LoadPolicy::kOnStart) continue;
    // A file that does not open fails its own load, with the file's error.
    Result<std::string> device = EffectiveDevice(spec.load);
    Result<uint64_t> bytes = device.ok() ? DeviceBytes(spec.load) : device.status();
    if (!bytes.ok()) continue;
    Need& need = needs[*device];
    need.total += *bytes;
    need.parts += (need.parts.empty() ? "" : ", ") + spec.load.id + " " + FormatBytes(*bytes);
    need.workers = spec.load.workers;
  }
  for (const auto& [device, need] : needs) {
    const MemoryGovernor* governor = nullptr;
    if (device == "cpu") {
      governor = &devices_->cpu_governor();
    } else if (need.workers) {
      Result<WorkerGpu> gpu = devices_->WorkerGpuFor(device);
      if (gpu.ok()) governor = gpu->governor;
    } else if (Result<MemoryGovernor*> opened = devices_->GovernorFor(device); opened.ok()) {
      governor = *opened;
    }
    if (governor == nullptr) continue;  // the loads say why the device cannot be used
    const GovernorStats stats = governor->Stats();
    const uint64_t free = stats.budget_bytes - std::min(stats.budget_bytes, stats.committed_bytes);
    if (need.total <= free) continue;
    const std::string raise = device == "cpu" ? ", or raise --memory-budget" : "";
    const std::string where = device == "cpu" ? "" : " on " + stats.device;
    return ResourceExhaustedError(
        "the on_start models" + where + " need " + FormatBytes(need.total) + " together (" +
        need.parts + ") but the memory budget has " + FormatBytes(free) + " free (of " +
        FormatBytes(stats.budget_bytes) + "): " + FormatBytes(need.total - free) +
        " too much; load some on_demand, lower their ctx or kv_min" + raise);
  }
  return Status::Ok();
}

void ModelManager::Stop() {
  {
    MutexLock lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  registry_->SetLoadRequester(nullptr);
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::deque<std::function<void()>> left;
  {
    MutexLock lock(mutex_);
    left.swap(queue_);
  }
  // Queued operations see stopping_ and answer UNAVAILABLE.
  for (auto& op : left) op();
  for (Drain& drain : drains_) {
    drain.model->client->AbortAll("model " + drain.id + " is being unloaded (server stopping)");
    drain.model.reset();
    for (Done& done : drain.dones) {
      if (done) done(UnavailableError("the server is stopping"));
    }
  }
  drains_.clear();
}

void ModelManager::Post(std::function<void()> op) {
  {
    MutexLock lock(mutex_);
    queue_.push_back(std::move(op));
  }
  cv_.notify_all();
}

void ModelManager::Run() {
  while (true) {
    std::function<void()> op;
    {
      MutexLock lock(mutex_);
      lock.WaitFor(cv_, options_.tick, [&] {
        mutex_.AssertHeld();
        return stopping_ || !queue_.empty();
      });
      if (stopping_) return;
      if (!queue_.empty()) {
        op = std::move(queue_.front());
        queue_.pop_front();
      }
    }
    if (op) op();
    Tick();
  }
}

Result<std::string> ModelManager::IdOf(const std::string& name) const {
  PIER_ASSIGN_OR_RETURN(ModelEntry entry, registry_->Lookup(name));
  MutexLock lock(mutex_);
  if (specs_.count(entry.id) == 0) {
    return FailedPreconditionError("model " + entry.id +
                                   " is not managed (it cannot be loaded "
                                   "or unloaded)");
  }
  return entry.id;
}

bool ModelManager::Stopping() const {
  MutexLock lock(mutex_);
  return stopping_;
}

void ModelManager::Load(std::string name, Done done) {
  Post([this, name = std::move(name), done = std::move(done)] {
    Status status = UnavailableError("the server is stopping");
    if (!Stopping()) {
      Result<std::string> id = IdOf(name);
      status = id.ok() ? DoLoad(*id) : id.status();
    }
    if (done) done(status);
  });
}

void ModelManager::Unload(std::string name, Done done) {
  Post([this, name = std::move(name), done = std::move(done)]() mutable {
    if (Stopping()) {
      if (done) done(UnavailableError("the server is stopping"));
      return;
    }
    Result<std::string> id = IdOf(name);
    if (!id.ok()) {
      if (done) done(id.status());
      return;
    }
    DoUnload(*id, ModelRegistry::UnloadKind::kRequested, std::move(done));
  });
}

void ModelManager::Reload(std::vector<ModelSpec> specs,
                          std::function<void(Result<ReloadReport>)> done) {
  Post([this, specs = std::move(specs), done = std::move(done)]() mutable {
    if (Stopping()) {
      if (done) done(UnavailableError("the server is stopping"));
      return;
    }
    ReloadReport report = DoReload(std::move(specs));
    if (done) done(std::move(report));
  });
}

std::shared_ptr<const ModelSpec> ModelManager::SpecOf(const std::string& id) const {
  MutexLock lock(mutex_);
  auto it = specs_.find(id);
  return it == specs_.end() ? nullptr : it->second;
}

Status ModelManager::DoLoad(const std::string& id) {
  PIER_ASSIGN_OR_RETURN(ModelEntry entry, registry_->Lookup(id));
  switch (entry.state) {
    case ModelState::kReady:
      // A quarantined worker instance starts again.
      if (entry.model != nullptr) {
        for (WorkerClient* worker : entry.model->workers) worker->Revive();
      }
      return Status::Ok();
    case ModelState::kDraining:
      return UnavailableError("model " + id + " is being unloaded; load it again once it is");
    default:
      break;
  }
  std::shared_ptr<const ModelSpec> spec = SpecOf(id);
  if (spec == nullptr) return NotFoundError("model " + id + " has no configuration");
  PIER_RETURN_IF_ERROR(registry_->SetState(id, ModelState::kLoading));
  const Clock::time_point start = Clock::now();
  Result<ModelRef> opened = OpenWithEviction(*spec);
  if (!opened.ok()) {
    ReturnCachedMemory();  // what the attempt allocated before it failed
    const bool no_room = opened.status().code() == StatusCode::kResourceExhausted;
    spdlog::warn("model {} did not load: {}", id, opened.status().ToString());
    (void)registry_->MarkLoadFailed(id, no_room ? ModelState::kUnloaded : ModelState::kFailed,
                                    opened.status().message());
    return opened.status().WithContext("model " + id);
  }
  const double seconds = SecondsSince(start);
  const size_t instances = std::max<size_t>(1, (*opened)->instances.size());
  PIER_RETURN_IF_ERROR(registry_->Publish(id, std::move(opened).value(), seconds));
  loaded_files_[id] = FileIdentity(spec->load.path);
  activity_[id] = Activity{-1, Clock::now()};
  spdlog::info("model {} is ready ({:.2f} s)", id, seconds);
  if (options_.on_loaded) {
    for (size_t i = 0; i < instances; ++i) {
      options_.on_loaded(id, seconds / static_cast<double>(instances));
    }
  }
  return Status::Ok();
}

Result<ModelRef> ModelManager::OpenWithEviction(const ModelSpec& given) {
  ModelSpec spec = given;
  if (spec.load.settings.speculative.method == engine::SpeculativeMethod::kDraft &&
      !IsOnnxPath(spec.load.path)) {
    PIER_ASSIGN_OR_RETURN(spec.load.draft_proposer, DraftProposerFor(spec.load));
  }
  while (true) {
    Result<ModelRef> opened = OpenModel(spec.load, *devices_);
    if (opened.ok() || opened.status().code() != StatusCode::kResourceExhausted) return opened;
    // Only a model on the same device gives back memory this one can use.
    Result<std::string> device = EffectiveDevice(spec.load);
    if (!device.ok()) return opened;
    const std::string victim = PickEviction(spec.load.id, *device);
    if (victim.empty()) return opened;
    spdlog::info("unloading idle model {} to make room for {}", victim, spec.load.id);
    ModelRef model = registry_->Retire(victim, "unloaded to make room for " + spec.load.id);
    if (model == nullptr) return opened;
    // Idle: nothing in flight, so its holders are momentary (a metrics scrape); wait for them
    // briefly so its memory is back before the retry.
    const Clock::time_point until = Clock::now() + std::chrono::seconds(5);
    while (model.use_count() > 1 && Clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    model.reset();
    ReturnCachedMemory();
    (void)registry_->MarkUnloaded(victim, ModelRegistry::UnloadKind::kEvicted);
    if (options_.on_unloaded) options_.on_unloaded(victim, ModelRegistry::UnloadKind::kEvicted);
  }
}

Result<std::shared_ptr<engine::Proposer>> ModelManager::DraftProposerFor(
    const ModelLoadOptions& load) {
  const std::string& name = load.settings.speculative.model;
  if (name == load.id) {
    // Its own draft would have to be loaded before itself; a second copy under another name
    // (or method: ngram) does that job.
    return InvalidArgumentError("speculative draft model must be another served model");
  }
  Result<ModelEntry> entry = registry_->Lookup(name);
  if (!entry.ok()) {
    return InvalidArgumentError("speculative draft model " + name +
                                " does not exist (it must be a served LLM)");
  }
  if (entry->state != ModelState::kReady || entry->model == nullptr) {
    return FailedPreconditionError("speculative draft model " + name + " is not loaded (" +
                                   std::string(ModelStateName(entry->state)) +
                                   "); list it before " + load.id + " in models:, load: on_start");
  }
  PIER_ASSIGN_OR_RETURN(std::unique_ptr<model::GgufFile> file, model::GgufFile::Open(load.path));
  PIER_ASSIGN_OR_RETURN(std::unique_ptr<tokenizer::Tokenizer> tokenizer,
                        model::LoadTokenizer(*file));
  PIER_RETURN_IF_ERROR(CheckDraftModel(*entry->model, load.id, tokenizer->vocab_size()));
  return std::shared_ptr<engine::Proposer>(std::make_shared<DraftProposer>(entry->model, load.id));
}

std::string ModelManager::PickEviction(const std::string& except, const std::string& device) {
  std::string best;
  int64_t best_bytes = std::numeric_limits<int64_t>::max();
  for (const ModelEntry& entry : registry_->Snapshot()) {
    if (entry.id == except || entry.state != ModelState::kReady || entry.model == nullptr ||
        entry.load != LoadPolicy::kOnDemand || !entry.managed || HasWork(*entry.model)) {
      continue;
    }
    std::shared_ptr<const ModelSpec> spec = SpecOf(entry.id);
    if (spec == nullptr) continue;
    Result<std::string> on = EffectiveDevice(spec->load);
    if (!on.ok() || *on != device) continue;
    const int64_t bytes = FileIdentity(spec->load.path).first;
    if (bytes < best_bytes) {
      best_bytes = bytes;
      best = entry.id;
    }
  }
  return best;
}

void ModelManager::DoUnload(const std::string& id, ModelRegistry::UnloadKind kind, Done done,
                            bool forget) {
  for (Drain& drain : drains_) {
    if (drain.id == id && !drain.replaced) {
      drain.forget = drain.forget || forget;
      drain.dones.push_back(std::move(done));
      return;
    }
  }
  Result<ModelEntry> entry = registry_->Lookup(id);
  if (!entry.ok()) {
    if (done) done(entry.status());
    return;
  }
  if (entry->state != ModelState::kReady) {
    // Unloaded or failed already (one thread: never loading here).
    if (forget) (void)registry_->Remove(id);
    if (done) done(Status::Ok());
    return;
  }
  const std::string reason = kind == ModelRegistry::UnloadKind::kIdle
                                 ? "idle: unloaded after idle_unload_after"
                                 : "unload requested";
  Drain drain;
  drain.id = id;
  drain.model = registry_->Retire(id, reason);
  drain.deadline = Clock::now() + options_.drain_grace;
  drain.kind = kind;
  drain.forget = forget;
  drain.dones.push_back(std::move(done));
  spdlog::info("model {}: draining ({})", id, reason);
  drains_.push_back(std::move(drain));
}

void ModelManager::FinishDrain(Drain& drain) {
  drain.model.reset();  // the last holder: its engines stop and its memory goes back
  ReturnCachedMemory();
  if (!drain.replaced) {
    (void)registry_->MarkUnloaded(drain.id, drain.kind);
    if (drain.forget) {
      (void)registry_->Remove(drain.id);
      MutexLock lock(mutex_);
      specs_.erase(drain.id);
    }
  }
  spdlog::info("model {}: {}", drain.id,
               drain.replaced ? "the previous version is unloaded" : "unloaded");
  if (options_.on_unloaded) options_.on_unloaded(drain.id, drain.kind);
  for (Done& done : drain.dones) {
    if (done) done(Status::Ok());
  }
}

void ModelManager::ReturnCachedMemory() {
  // The pool keeps freed segments for reuse; an unloaded model's belong to the system again
  // (the process RSS, or a GPU's used memory, drops back to what it was before the load).
  for (MemoryGovernor* governor : devices_->Governors()) {
    const size_t returned = governor->Trim();
    if (returned > 0) {
      spdlog::debug("returned {} cached bytes to {}", returned, governor->Stats().device);
    }
  }
#if defined(__GLIBC__)
  // The model's small host allocations (tokenizer tables, metadata, request state) were freed
  // into glibc's per-thread arenas, which keep their pages: a load on the admin thread left
  // 11 MiB resident after the unload. malloc_trim returns every arena's free pages.
  malloc_trim(0);
#endif
}

void ModelManager::Tick() {
  const Clock::time_point now = Clock::now();
  for (size_t i = 0; i < drains_.size();) {
    Drain& drain = drains_[i];
    const bool busy = HasWork(*drain.model);
    if (busy && !drain.aborted && now >= drain.deadline) {
      drain.model->client->AbortAll("model " + drain.id +
                                    " is being unloaded (its drain grace period ended)");
      drain.aborted = true;
    }
    if (!busy && drain.model.use_count() == 1) {
      FinishDrain(drain);
      drains_.erase(drains_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    ++i;
  }
  // Idle on_demand models.
  for (const ModelEntry& entry : registry_->Snapshot()) {
    if (entry.state != ModelState::kReady || entry.model == nullptr) continue;
    std::shared_ptr<const ModelSpec> spec = SpecOf(entry.id);
    if (spec == nullptr || spec->policy != LoadPolicy::kOnDemand ||
        spec->idle_unload_after.count() <= 0) {
      continue;
    }
    const engine::EngineStats stats = entry.model->client->Stats();
    Activity& activity = activity_[entry.id];
    if (stats.running + stats.waiting > 0 ||
        stats.requests_finished != activity.requests_finished) {
      activity.requests_finished = stats.requests_finished;
      activity.last_active = now;
      continue;
    }
    if (now - activity.last_active >= spec->idle_unload_after) {
      DoUnload(entry.id, ModelRegistry::UnloadKind::kIdle, nullptr);
    }
  }
  // Requests waiting for a model look at their deadlines.
  registry_->Notify();
}

void ModelManager::AdoptSpec(std::shared_ptr<const ModelSpec> spec, ReloadReport* report) {
  const std::string id = spec->load.id;
  const bool on_start = spec->policy == LoadPolicy::kOnStart;
  {
    MutexLock lock(mutex_);
    specs_[id] = std::move(spec);
  }
  if (!on_start) return;
  if (Status loaded = DoLoad(id); !loaded.ok()) report->failed.emplace_back(id, loaded.message());
}

ReloadReport ModelManager::DoReload(std::vector<ModelSpec> specs) {
  ReloadReport report;
  std::set<std::string> wanted;
  for (const ModelSpec& spec : specs) wanted.insert(spec.load.id);
  std::vector<std::string> current;
  {
    MutexLock lock(mutex_);
    for (const auto& [id, spec] : specs_) current.push_back(id);
  }
  for (const std::string& id : current) {
    if (wanted.count(id) > 0) continue;
    report.removed.push_back(id);
    DoUnload(id, ModelRegistry::UnloadKind::kRequested, nullptr, /*forget=*/true);
  }
  for (const ModelSpec& spec : specs) {
    const std::string& id = spec.load.id;
    std::shared_ptr<const ModelSpec> old = SpecOf(id);
    auto shared = std::make_shared<const ModelSpec>(spec);
    if (old == nullptr) {
      Status declared = registry_->Declare(id, spec.load.aliases, spec.policy);
      if (!declared.ok()) {
        report.failed.emplace_back(id, declared.message());
        continue;
      }
      AdoptSpec(shared, &report);
      report.added.push_back(id);
      continue;
    }
    Result<ModelEntry> entry = registry_->Lookup(id);
    const bool ready = entry.ok() && entry->state == ModelState::kReady;
    const bool file_changed = ready && loaded_files_[id] != FileIdentity(spec.load.path);
    if (*old == spec && !file_changed) {
      report.unchanged.push_back(id);
      continue;
    }
    if (!ready) {
      // Nothing serving: the new configuration simply replaces the old.
      if (Status redeclared = registry_->Redeclare(id, spec.load.aliases, spec.policy);
          !redeclared.ok()) {
        report.failed.emplace_back(id, redeclared.message());
        continue;
      }
      AdoptSpec(shared, &report);
      report.reloaded.push_back(id);
      continue;
    }
    // The new version loads beside the old one, which serves until it is ready.
    const Clock::time_point start = Clock::now();
    Result<ModelRef> opened = OpenWithEviction(spec);
    if (!opened.ok()) {
      spdlog::warn("model {}: the new version did not load ({}); the old one keeps serving", id,
                   opened.status().ToString());
      report.failed.emplace_back(id, opened.status().message());
      continue;
    }
    const double seconds = SecondsSince(start);
    Drain drain;
    drain.id = id;
    drain.model = registry_->Replace(id, std::move(opened).value(), seconds);
    drain.deadline = Clock::now() + options_.drain_grace;
    drain.replaced = true;
    if (drain.model == nullptr) {
      // The new aliases collide with another model's: the old version serves on (the new
      // one, never published, is dropped here).
      report.failed.emplace_back(id, "its new aliases collide with another model's");
      continue;
    }
    (void)registry_->Redeclare(id, spec.load.aliases, spec.policy);  // the policy may change
    {
      MutexLock lock(mutex_);
      specs_[id] = shared;
    }
    loaded_files_[id] = FileIdentity(spec.load.path);
    if (options_.on_loaded) options_.on_loaded(id, seconds);
    report.reloaded.push_back(id);
    drains_.push_back(std::move(drain));
  }
  return report;
}

}  // namespace pier::serving
