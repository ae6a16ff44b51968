#include "serving/model_registry.h"

#include <algorithm>
#include <utility>

namespace pier::serving {

ModelRegistry::ModelRegistry() = default;

// Entries borrow from the hosts: forget them first, then end the hosts (engines stop,
// unfinished requests end with kAbort) in reverse order of loading.
ModelRegistry::~ModelRegistry() {
  models_.clear();
  pools_.clear();
  while (!hosts_.empty()) hosts_.pop_back();
}

Status ModelRegistry::Add(ServedModel model) {
  if (model.id.empty()) return InvalidArgumentError("a served model needs an id");
  if (model.client == nullptr || model.tokenizer == nullptr) {
    return InvalidArgumentError("model " + model.id + " needs an engine client and a tokenizer");
  }
  std::vector<std::string> names = {model.id};
  names.insert(names.end(), model.aliases.begin(), model.aliases.end());
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty()) return InvalidArgumentError("model " + model.id + ": an empty alias");
    const bool repeated = std::find(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(i),
                                    names[i]) != names.begin() + static_cast<std::ptrdiff_t>(i);
    if (repeated || Find(names[i]) != nullptr) {
      return InvalidArgumentError("model " + names[i] + " is already served");
    }
  }
  models_.push_back(std::move(model));
  return Status::Ok();
}

Status ModelRegistry::AddHost(std::string id, std::vector<std::string> aliases,
                              int64_t created_unix_seconds, std::unique_ptr<ModelHost> host) {
  std::vector<std::unique_ptr<ModelHost>> hosts;
  hosts.push_back(std::move(host));
  return AddHosts(std::move(id), std::move(aliases), created_unix_seconds, std::move(hosts));
}

Status ModelRegistry::AddHosts(std::string id, std::vector<std::string> aliases,
                               int64_t created_unix_seconds,
                               std::vector<std::unique_ptr<ModelHost>> hosts) {
  if (hosts.empty() || std::find(hosts.begin(), hosts.end(), nullptr) != hosts.end()) {
    return InvalidArgumentError("model " + id + " has no host");
  }
  ServedModel model;
  model.id = std::move(id);
  model.aliases = std::move(aliases);
  model.created_unix_seconds = created_unix_seconds;
  ModelHost& first = *hosts.front();
  model.max_request_tokens = first.max_request_tokens();
  for (const auto& host : hosts) {
    model.instances.push_back(&host->client());
    model.max_request_tokens = std::min(model.max_request_tokens, host->max_request_tokens());
  }
  std::unique_ptr<engine::EngineClient> pool;
  if (hosts.size() > 1) pool = std::make_unique<InstancePoolClient>(model.instances);
  model.client = pool != nullptr ? pool.get() : &first.client();
  model.tokenizer = &first.tokenizer();
  model.chat_template = first.chat_template();
  model.governor = &first.model().governor();
  PIER_RETURN_IF_ERROR(Add(std::move(model)));
  if (pool != nullptr) pools_.push_back(std::move(pool));
  for (auto& host : hosts) hosts_.push_back(std::move(host));
  return Status::Ok();
}

const ServedModel* ModelRegistry::Find(std::string_view id) const {
  for (const ServedModel& model : models_) {
    if (model.id == id) return &model;
  }
  for (const ServedModel& model : models_) {
    if (std::find(model.aliases.begin(), model.aliases.end(), id) != model.aliases.end()) {
      return &model;
    }
  }
  return nullptr;
}

Result<const ServedModel*> ModelRegistry::Resolve(std::string_view name) const {
  if (name.empty()) {
    if (models_.empty()) return NotFoundError("no model is served");
    return &models_.front();
  }
  if (const ServedModel* model = Find(name)) return model;
  return NotFoundError("model " + std::string(name) + " does not exist");
}

const ServedModel* ModelRegistry::default_model() const {
  return models_.empty() ? nullptr : &models_.front();
}

}  // namespace pier::serving
