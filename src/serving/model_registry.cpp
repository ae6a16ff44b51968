#include "serving/model_registry.h"

#include <algorithm>
#include <utility>

namespace pier::serving {

std::string_view ModelKindName(ModelKind kind) {
  switch (kind) {
    case ModelKind::kEmbed:
      return "embed";
    case ModelKind::kTensor:
      return "tensor";
    case ModelKind::kGenerate:
      break;
  }
  return "generate";
}

struct ModelRegistry::Slot {
  std::string id;
  std::vector<std::string> aliases;
  LoadPolicy load = LoadPolicy::kOnStart;
  ModelState state = ModelState::kUnloaded;
  std::string reason;
  ModelRef model;
  std::optional<ModelKind> kind;  // from its latest load, kept while unloaded
  bool managed = false;
  int64_t loads = 0;
  int64_t load_failures = 0;
  int64_t unloads = 0;
  int64_t evictions = 0;
  int64_t idle_unloads = 0;
  double last_load_seconds = 0;
};

std::string_view ModelStateName(ModelState state) {
  switch (state) {
    case ModelState::kUnloaded:
      return "unloaded";
    case ModelState::kLoading:
      return "loading";
    case ModelState::kReady:
      return "ready";
    case ModelState::kDraining:
      return "draining";
    case ModelState::kFailed:
      return "failed";
  }
  return "unknown";
}

std::string_view LoadPolicyName(LoadPolicy policy) {
  return policy == LoadPolicy::kOnDemand ? "on_demand" : "on_start";
}

ModelRegistry::ModelRegistry() = default;

// The models go in reverse order of loading (each engine ends what is left with kAbort).
ModelRegistry::~ModelRegistry() {
  MutexLock lock(mutex_);
  while (!slots_.empty()) slots_.pop_back();
}

ModelRegistry::Slot* ModelRegistry::FindSlot(std::string_view name) {
  return const_cast<Slot*>(static_cast<const ModelRegistry*>(this)->FindSlot(name));
}

const ModelRegistry::Slot* ModelRegistry::FindSlot(std::string_view name) const {
  for (const auto& slot : slots_) {
    if (slot->id == name) return slot.get();
  }
  for (const auto& slot : slots_) {
    if (std::find(slot->aliases.begin(), slot->aliases.end(), name) != slot->aliases.end()) {
      return slot.get();
    }
  }
  return nullptr;
}

Status ModelRegistry::CheckNames(const std::string& id, const std::vector<std::string>& aliases,
                                 const Slot* except) const {
  if (id.empty()) return InvalidArgumentError("a served model needs an id");
  std::vector<std::string> names = {id};
  names.insert(names.end(), aliases.begin(), aliases.end());
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty()) return InvalidArgumentError("model " + id + ": an empty alias");
    const auto begin = names.begin();
    const bool repeated = std::find(begin, begin + static_cast<std::ptrdiff_t>(i), names[i]) !=
                          begin + static_cast<std::ptrdiff_t>(i);
    const Slot* owner = FindSlot(names[i]);
    if (repeated || (owner != nullptr && owner != except)) {
      return InvalidArgumentError("model " + names[i] + " is already served");
    }
  }
  return Status::Ok();
}

ModelEntry ModelRegistry::EntryOf(const Slot& slot) {
  ModelEntry entry;
  entry.id = slot.id;
  entry.aliases = slot.aliases;
  entry.load = slot.load;
  entry.state = slot.state;
  entry.reason = slot.reason;
  entry.model = slot.state == ModelState::kReady ? slot.model : nullptr;
  entry.kind = slot.kind;
  entry.loads = slot.loads;
  entry.load_failures = slot.load_failures;
  entry.unloads = slot.unloads;
  entry.evictions = slot.evictions;
  entry.idle_unloads = slot.idle_unloads;
  entry.last_load_seconds = slot.last_load_seconds;
  entry.managed = slot.managed;
  return entry;
}

Status ModelRegistry::Add(ServedModel model) {
  if (model.client == nullptr ||
      (model.kind == ModelKind::kTensor ? model.tensors == nullptr : model.tokenizer == nullptr)) {
    return InvalidArgumentError(
        "model " + model.id + " needs an engine client and " +
        (model.kind == ModelKind::kTensor ? "a tensor runner" : "a tokenizer"));
  }
  {
    MutexLock lock(mutex_);
    PIER_RETURN_IF_ERROR(CheckNames(model.id, model.aliases, nullptr));
    auto slot = std::make_unique<Slot>();
    slot->id = model.id;
    slot->aliases = model.aliases;
    slot->state = ModelState::kReady;
    slot->kind = model.kind;
    slot->model = std::make_shared<const ServedModel>(std::move(model));
    slots_.push_back(std::move(slot));
  }
  Notify();
  return Status::Ok();
}

Status ModelRegistry::Declare(std::string id, std::vector<std::string> aliases, LoadPolicy load) {
  MutexLock lock(mutex_);
  PIER_RETURN_IF_ERROR(CheckNames(id, aliases, nullptr));
  auto slot = std::make_unique<Slot>();
  slot->id = std::move(id);
  slot->aliases = std::move(aliases);
  slot->load = load;
  slot->managed = true;
  slots_.push_back(std::move(slot));
  return Status::Ok();
}

Result<ModelEntry> ModelRegistry::Lookup(std::string_view name) const {
  MutexLock lock(mutex_);
  if (name.empty()) {
    if (slots_.empty()) return NotFoundError("no model is served");
    return EntryOf(*slots_.front());
  }
  const Slot* slot = FindSlot(name);
  if (slot == nullptr) return NotFoundError("model " + std::string(name) + " does not exist");
  return EntryOf(*slot);
}

Result<ModelRef> ModelRegistry::Resolve(std::string_view name) const {
  PIER_ASSIGN_OR_RETURN(ModelEntry entry, Lookup(name));
  if (entry.state == ModelState::kReady) return entry.model;
  std::string message = "model " + entry.id + " is " + std::string(ModelStateName(entry.state));
  if (!entry.reason.empty()) message += ": " + entry.reason;
  return UnavailableError(message);
}

std::vector<ModelEntry> ModelRegistry::Snapshot() const {
  MutexLock lock(mutex_);
  std::vector<ModelEntry> entries;
  entries.reserve(slots_.size());
  for (const auto& slot : slots_) entries.push_back(EntryOf(*slot));
  return entries;
}

std::vector<ModelRef> ModelRegistry::ReadyModels() const {
  MutexLock lock(mutex_);
  std::vector<ModelRef> models;
  for (const auto& slot : slots_) {
    if (slot->state == ModelState::kReady) models.push_back(slot->model);
  }
  return models;
}

std::string ModelRegistry::default_id() const {
  MutexLock lock(mutex_);
  return slots_.empty() ? std::string() : slots_.front()->id;
}

std::string ModelRegistry::KnownIds() const {
  MutexLock lock(mutex_);
  std::string ids;
  for (const auto& slot : slots_) ids += (ids.empty() ? "'" : ", '") + slot->id + "'";
  return ids;
}

Status ModelRegistry::SetState(const std::string& id, ModelState state, std::string reason) {
  {
    MutexLock lock(mutex_);
    Slot* slot = FindSlot(id);
    if (slot == nullptr || slot->id != id) return NotFoundError("model " + id + " does not exist");
    slot->state = state;
    slot->reason = std::move(reason);
    if (state != ModelState::kReady) slot->model = nullptr;
  }
  Notify();
  return Status::Ok();
}

Status ModelRegistry::Publish(const std::string& id, ModelRef model, double load_seconds) {
  if (model == nullptr || model->id != id) {
    return InvalidArgumentError("model " + id + ": publishing another model");
  }
  {
    MutexLock lock(mutex_);
    Slot* slot = FindSlot(id);
    if (slot == nullptr || slot->id != id) return NotFoundError("model " + id + " does not exist");
    PIER_RETURN_IF_ERROR(CheckNames(id, model->aliases, slot));
    slot->aliases = model->aliases;
    slot->kind = model->kind;
    slot->model = std::move(model);
    slot->state = ModelState::kReady;
    slot->reason.clear();
    ++slot->loads;
    slot->last_load_seconds = load_seconds;
  }
  Notify();
  return Status::Ok();
}

ModelRef ModelRegistry::Replace(const std::string& id, ModelRef model, double load_seconds) {
  if (model == nullptr || model->id != id) return nullptr;
  ModelRef old;
  {
    MutexLock lock(mutex_);
    Slot* slot = FindSlot(id);
    if (slot == nullptr || slot->id != id || slot->state != ModelState::kReady) return nullptr;
    if (!CheckNames(id, model->aliases, slot).ok()) return nullptr;
    old = std::move(slot->model);
    slot->aliases = model->aliases;
    slot->kind = model->kind;
    slot->model = std::move(model);
    ++slot->loads;
    slot->last_load_seconds = load_seconds;
  }
  Notify();
  return old;
}

ModelRef ModelRegistry::Retire(const std::string& id, std::string reason) {
  ModelRef model;
  {
    MutexLock lock(mutex_);
    Slot* slot = FindSlot(id);
    if (slot == nullptr || slot->id != id || slot->state != ModelState::kReady) return nullptr;
    model = std::move(slot->model);
    slot->model = nullptr;
    slot->state = ModelState::kDraining;
    slot->reason = std::move(reason);
  }
  Notify();
  return model;
}

Status ModelRegistry::MarkUnloaded(const std::string& id, UnloadKind kind) {
  {
    MutexLock lock(mutex_);
    Slot* slot = FindSlot(id);
    if (slot == nullptr || slot->id != id) return NotFoundError("model " + id + " does not exist");
    slot->state = ModelState::kUnloaded;
    slot->reason.clear();
    slot->model = nullptr;
    ++slot->unloads;
    if (kind == UnloadKind::kEvicted) ++slot->evictions;
    if (kind == UnloadKind::kIdle) ++slot->idle_unloads;
  }
  Notify();
  return Status::Ok();
}

Status ModelRegistry::MarkLoadFailed(const std::string& id, ModelState state, std::string reason) {
  {
    MutexLock lock(mutex_);
    Slot* slot = FindSlot(id);
    if (slot == nullptr || slot->id != id) return NotFoundError("model " + id + " does not exist");
    slot->state = state;
    slot->reason = std::move(reason);
    slot->model = nullptr;
    ++slot->load_failures;
  }
  Notify();
  return Status::Ok();
}

Status ModelRegistry::Redeclare(const std::string& id, std::vector<std::string> aliases,
                                LoadPolicy load) {
  MutexLock lock(mutex_);
  Slot* slot = FindSlot(id);
  if (slot == nullptr || slot->id != id) return NotFoundError("model " + id + " does not exist");
  PIER_RETURN_IF_ERROR(CheckNames(id, aliases, slot));
  slot->aliases = std::move(aliases);
  slot->load = load;
  return Status::Ok();
}

Status ModelRegistry::Remove(const std::string& id) {
  {
    MutexLock lock(mutex_);
    auto it = std::find_if(slots_.begin(), slots_.end(),
                           [&](const std::unique_ptr<Slot>& slot) { return slot->id == id; });
    if (it == slots_.end()) return NotFoundError("model " + id + " does not exist");
    if ((*it)->state != ModelState::kUnloaded && (*it)->state != ModelState::kFailed) {
      return FailedPreconditionError(
          "model " + id + " is " + std::string(ModelStateName((*it)->state)) + "; unload it first");
    }
    slots_.erase(it);
  }
  Notify();
  return Status::Ok();
}

uint64_t ModelRegistry::Watch(std::function<void()> wake) {
  MutexLock lock(mutex_);
  const uint64_t id = next_watch_++;
  watchers_.emplace(id, std::move(wake));
  return id;
}

void ModelRegistry::Unwatch(uint64_t watch_id) {
  MutexLock lock(mutex_);
  watchers_.erase(watch_id);
}

void ModelRegistry::Notify() const {
  std::vector<std::function<void()>> wakes;
  {
    MutexLock lock(mutex_);
    for (const auto& [id, wake] : watchers_) wakes.push_back(wake);
  }
  for (const auto& wake : wakes) wake();
}

void ModelRegistry::SetLoadRequester(std::function<void(const std::string& id)> requester) {
  MutexLock lock(mutex_);
  load_requester_ = std::move(requester);
}

bool ModelRegistry::RequestLoad(const std::string& id) const {
  std::function<void(const std::string&)> requester;
  {
    MutexLock lock(mutex_);
    requester = load_requester_;
  }
  if (!requester) return false;
  requester(id);
  return true;
}

}  // namespace pier::serving
