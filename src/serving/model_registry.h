// ModelRegistry: the models this server serves, by id, and which one answers a request that
// names none. The HTTP routes, the admin routes and the metrics look a request's `model` up
// here; nothing above serving/ holds a model directly.
//
// A ServedModel is what the front end needs of a model: its id and `created` time, its
// tokenizer and chat template (tokenization and templates stay in the front end), the
// positions one request may use, its EngineClient (in-process today, a worker later) and the
// governor of its device (for /metrics). The registry may own the ModelHost behind an entry
// (AddHost) or only borrow the parts (Add, for tests and embedders).
//
// Ownership: owns the hosts given to AddHost; borrows everything an entry points to.
// Thread-safety: add every model before serving starts; lookups are const and may run on
// any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/engine_client.h"
#include "memory/memory_governor.h"
#include "serving/instance_pool_client.h"
#include "serving/model_host.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pier::serving {

struct ServedModel {
  std::string id;                         // what clients name in `model`
  std::vector<std::string> aliases = {};  // other names that reach it
  int64_t created_unix_seconds = 0;       // OpenAI's `created`
  int64_t max_request_tokens = 0;         // prompt + generated positions (the engine's limit)
  engine::EngineClient* client = nullptr;
  // Its instances' clients (one engine each); `client` spreads requests over them.
  std::vector<engine::EngineClient*> instances = {};
  const tokenizer::Tokenizer* tokenizer = nullptr;
  const tokenizer::ChatTemplate* chat_template = nullptr;  // null: chat is refused
  const MemoryGovernor* governor = nullptr;                // null: no memory figures
};

class ModelRegistry {
 public:
  ModelRegistry();
  ~ModelRegistry();
  ModelRegistry(const ModelRegistry&) = delete;
  ModelRegistry& operator=(const ModelRegistry&) = delete;

  // INVALID_ARGUMENT for an empty id, a missing client or tokenizer, or an id or alias
  // already served (as an id or an alias). The first model added is the default.
  [[nodiscard]] Status Add(ServedModel model);
  // Adds the host's model under `id` and keeps the host alive as long as the registry.
  [[nodiscard]] Status AddHost(std::string id, std::vector<std::string> aliases,
                               int64_t created_unix_seconds, std::unique_ptr<ModelHost> host);
  // Several instances of one model under one id: requests go to the least loaded
  // (InstancePoolClient); the tokenizer and template are the first instance's.
  [[nodiscard]] Status AddHosts(std::string id, std::vector<std::string> aliases,
                                int64_t created_unix_seconds,
                                std::vector<std::unique_ptr<ModelHost>> hosts);

  // The model called `id` (its id or one of its aliases), or null.
  const ServedModel* Find(std::string_view id) const;
  // What serves a request naming `name`: that model, or the default one when `name` is
  // empty. NOT_FOUND ("model X does not exist") otherwise, or when nothing is served.
  [[nodiscard]] Result<const ServedModel*> Resolve(std::string_view name) const;
  // The default model (the first added), or null when the registry is empty.
  const ServedModel* default_model() const;
  // Every model, in the order they were added (a deque: entries never move, so pointers
  // from Find and Resolve stay valid while models are added).
  const std::deque<ServedModel>& models() const { return models_; }

 private:
  std::deque<ServedModel> models_;
  std::vector<std::unique_ptr<ModelHost>> hosts_;
  std::vector<std::unique_ptr<engine::EngineClient>> pools_;  // for models with instances
};

}  // namespace pier::serving
