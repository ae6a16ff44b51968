// ModelRegistry: every model this server knows, loaded or not, by id and alias; which one
// answers a request that names none; and each one's lifecycle state. The HTTP routes, the
// admin routes and the metrics look a request's `model` up here; nothing above serving/ holds
// a model directly. The ModelManager (serving/model_manager.h) moves models through their
// states; a test or an embedder may also Add a model that is simply served.
//
// States (ModelState): unloaded -> loading -> ready -> draining -> unloaded, or failed (with
// its reason) when a load fails for another reason than memory. Only a ready model resolves;
// a request for one in another state gets a reason it can show (UNAVAILABLE), or, for an
// on_demand model that is unloaded, asks the manager to load it (RequestLoad) and waits
// (Watch) for the state to change.
//
// A ServedModel is what the front end needs of a loaded model: its id and `created` time, its
// tokenizer and chat template (tokenization and templates stay in the front end), the
// positions one request may use, its EngineClient (in this process or a worker's; a pool over
// its instances when it has several) and the
// governor of its device (for /metrics). Requests hold it as a ModelRef (a shared pointer)
// for as long as they run, so an unload can wait for the last one before returning memory.
//
// Ownership: shares the ModelRefs of ready models (a ServedModel's `parts` own its hosts).
// Thread-safety: every method may be called from any thread (one mutex); watch callbacks are
// called without it held.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "engine/engine_client.h"
#include "memory/memory_governor.h"
#include "serving/model_settings.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pier::serving {

class Embedder;      // serving/embedder.h
class TensorRunner;  // serving/tensor_runner.h
class WorkerClient;  // serving/worker_client.h

// What a model does: generate text (an LLM: chat, completions, responses), embed it (an
// encoder: /v1/embeddings, KServe v2 infer), or turn tensors into tensors (an ONNX graph:
// KServe v2 infer).
enum class ModelKind : uint8_t { kGenerate, kEmbed, kTensor };
std::string_view ModelKindName(ModelKind kind);  // "generate", "embed", "tensor"

enum class ModelState : uint8_t { kUnloaded, kLoading, kReady, kDraining, kFailed };
// "unloaded", "loading", "ready", "draining", "failed".
std::string_view ModelStateName(ModelState state);
constexpr ModelState kAllModelStates[] = {ModelState::kUnloaded, ModelState::kLoading,
                                          ModelState::kReady, ModelState::kDraining,
                                          ModelState::kFailed};

// When a model is loaded: at startup (`on_start`, the default), or by the first request that
// names it (`on_demand`; such a model may also be unloaded when idle or to make room).
enum class LoadPolicy : uint8_t { kOnStart, kOnDemand };
std::string_view LoadPolicyName(LoadPolicy policy);

struct ServedModel {
  std::string id;                         // what clients name in `model`
  std::vector<std::string> aliases = {};  // other names that reach it
  int64_t created_unix_seconds = 0;       // OpenAI's `created`
  int64_t max_request_tokens = 0;         // prompt + generated positions (the engine's limit)
  ModelKind kind = ModelKind::kGenerate;
  // An embedding model's batcher (kind kEmbed; embedder.h); null for LLMs. Its `client`
  // refuses generation and reports the batcher's queue.
  Embedder* embedder = nullptr;
  int64_t embedding_dim = 0;  // kEmbed: the vectors' length
  // kEmbed with pooling none: a vector per token (KServe's output is [texts, tokens, dim]; the
  // OpenAI API, one vector per input, refuses it).
  bool per_token_embeddings = false;
  // A tensor model's runner (kind kTensor; tensor_runner.h); null otherwise. Its `client`
  // refuses generation and reports the runner's queue.
  TensorRunner* tensors = nullptr;
  engine::EngineClient* client = nullptr;
  // Its instances' clients (one engine each); `client` spreads requests over them.
  std::vector<engine::EngineClient*> instances = {};
  const tokenizer::Tokenizer* tokenizer = nullptr;
  const tokenizer::ChatTemplate* chat_template = nullptr;  // null: chat is refused
  ToolFormat tool_format = ToolFormat::kAuto;  // how requests with tools reach the model
  const MemoryGovernor* governor = nullptr;    // null: no memory figures
  // With worker processes: each instance's worker (for its health); empty in-process.
  std::vector<WorkerClient*> workers = {};
  // What keeps the pointers above valid (the hosts and the instance pool); null when they are
  // borrowed from the caller.
  std::shared_ptr<const void> parts = nullptr;
};
using ModelRef = std::shared_ptr<const ServedModel>;

// One model the registry knows, as it is at the moment of the snapshot.
struct ModelEntry {
  std::string id;
  std::vector<std::string> aliases;
  LoadPolicy load = LoadPolicy::kOnStart;
  ModelState state = ModelState::kUnloaded;
  // failed: why; unloaded: why the last load did not happen (e.g. it did not fit), if so;
  // draining: why it is being unloaded.
  std::string reason;
  ModelRef model;  // the loaded model while ready; null otherwise
  // What it is, from its latest load (kept while unloaded); unset before its first load.
  std::optional<ModelKind> kind;
  int64_t loads = 0;          // loads that succeeded
  int64_t load_failures = 0;  // loads that did not (memory or otherwise)
  int64_t unloads = 0;        // unloads finished (evictions included)
  int64_t evictions = 0;      // unloads to make room for another model
  int64_t idle_unloads = 0;   // unloads after idle_unload_after
  double last_load_seconds = 0;
  bool managed = false;  // moved through its states by a ModelManager (not Add)
};

class ModelRegistry {
 public:
  ModelRegistry();
  ~ModelRegistry();
  ModelRegistry(const ModelRegistry&) = delete;
  ModelRegistry& operator=(const ModelRegistry&) = delete;

  // A model that is simply served (ready, never unloaded). INVALID_ARGUMENT for an empty id,
  // a missing client or tokenizer, or an id or alias already known (as an id or an alias). The
  // first model added or declared is the default.
  [[nodiscard]] Status Add(ServedModel model);
  // A model the manager will load (state unloaded until it does). The same name checks.
  [[nodiscard]] Status Declare(std::string id, std::vector<std::string> aliases, LoadPolicy load);

  // The model called `name` (its id or one of its aliases; empty: the default model), in
  // whatever state. NOT_FOUND ("model X does not exist") otherwise.
  [[nodiscard]] Result<ModelEntry> Lookup(std::string_view name) const;
  // The ready model called `name`. NOT_FOUND as Lookup; UNAVAILABLE naming the state (and
  // its reason) when it is known and not ready.
  [[nodiscard]] Result<ModelRef> Resolve(std::string_view name) const;
  // Every model, in the order they were added or declared.
  std::vector<ModelEntry> Snapshot() const;
  // The ready models, in that order.
  std::vector<ModelRef> ReadyModels() const;
  // The default model's id (the first one), or empty.
  std::string default_id() const;
  // "'a', 'b'": the ids known, for messages.
  std::string KnownIds() const;

  // The manager's side. NOT_FOUND for an unknown id.
  [[nodiscard]] Status SetState(const std::string& id, ModelState state, std::string reason = {});
  // The model is ready: requests resolve to `model` (whose id must be `id`; its aliases
  // replace the declared ones, checked as in Declare).
  [[nodiscard]] Status Publish(const std::string& id, ModelRef model, double load_seconds);
  // A new version of a ready model: requests resolve to `model` from now on (no moment in
  // which the id does not resolve); the old version is handed back to the caller to drain.
  // Null (and nothing changes) when the model is not ready or the new aliases collide.
  ModelRef Replace(const std::string& id, ModelRef model, double load_seconds);
  // Ready -> draining: new requests no longer resolve; the loaded model is handed back to the
  // caller (who waits for its requests and drops it). Null when it was not ready.
  ModelRef Retire(const std::string& id, std::string reason);
  enum class UnloadKind : uint8_t { kRequested, kEvicted, kIdle };
  // Draining -> unloaded, counted.
  [[nodiscard]] Status MarkUnloaded(const std::string& id, UnloadKind kind);
  // A load that failed: counted; the state becomes `state` (unloaded when it did not fit,
  // failed otherwise) with the reason.
  [[nodiscard]] Status MarkLoadFailed(const std::string& id, ModelState state, std::string reason);
  // New aliases and load policy for a known model (a reload changed them); names checked as
  // in Declare.
  [[nodiscard]] Status Redeclare(const std::string& id, std::vector<std::string> aliases,
                                 LoadPolicy load);
  // Forgets an unloaded or failed model (a reload removed it from the configuration).
  [[nodiscard]] Status Remove(const std::string& id);

  // `wake` is called (without the registry's lock) after every state change, and on Notify.
  uint64_t Watch(std::function<void()> wake);
  void Unwatch(uint64_t watch_id);
  void Notify() const;

  // On-demand loading: the front end asks, the manager (which installs the requester) loads.
  void SetLoadRequester(std::function<void(const std::string& id)> requester);
  // Asks for `id` to be loaded; false when nothing can load models here.
  bool RequestLoad(const std::string& id) const;

 private:
  struct Slot;
  Slot* FindSlot(std::string_view name) PIER_REQUIRES(mutex_);
  const Slot* FindSlot(std::string_view name) const PIER_REQUIRES(mutex_);
  Status CheckNames(const std::string& id, const std::vector<std::string>& aliases,
                    const Slot* except) const PIER_REQUIRES(mutex_);
  static ModelEntry EntryOf(const Slot& slot);

  mutable Mutex mutex_;
  std::vector<std::unique_ptr<Slot>> slots_ PIER_GUARDED_BY(mutex_);
  std::map<uint64_t, std::function<void()>> watchers_ PIER_GUARDED_BY(mutex_);
  uint64_t next_watch_ PIER_GUARDED_BY(mutex_) = 1;
  std::function<void(const std::string&)> load_requester_ PIER_GUARDED_BY(mutex_);
};

}  // namespace pier::serving
