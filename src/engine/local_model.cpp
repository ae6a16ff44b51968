#include "engine/local_model.h"

#include <string>

#include "device/cpu/cpu_device.h"
#include "engine/cpu_runner.h"

namespace pier::engine {

LocalModel::~LocalModel() {
  runner_.reset();
  kv_.reset();
  pool_.reset();
  file_.reset();
  governor_.reset();
  device_.reset();
}

Result<std::unique_ptr<LocalModel>> LocalModel::Open(const LocalModelOptions& options) {
  PIER_ASSIGN_OR_RETURN(std::unique_ptr<model::GgufFile> file, model::GgufFile::Open(options.path));
  return Create(std::move(file), options);
}

Result<std::unique_ptr<LocalModel>> LocalModel::Create(std::unique_ptr<model::GgufFile> file,
                                                       const LocalModelOptions& options) {
  if (options.threads < 1) return InvalidArgumentError("threads must be at least 1");
  if (options.kv_tokens < 1) return InvalidArgumentError("KV capacity must be at least 1 token");
  std::unique_ptr<LocalModel> m(new LocalModel());
  PIER_ASSIGN_OR_RETURN(std::unique_ptr<CpuDevice> device, CpuDevice::Create());
  m->device_ = std::move(device);
  PIER_ASSIGN_OR_RETURN(m->governor_, MemoryGovernor::Create(m->device_.get()));
  m->file_ = std::move(file);

  std::string name = "model";
  if (const model::GgufValue* v = m->file_->Find("general.name"); v != nullptr) {
    if (auto s = v->AsString(); s && !s->empty()) name = std::string(*s);
  }
  PIER_ASSIGN_OR_RETURN(OwnerId weights, m->governor_->AddOwner({.name = name + "/weights"}));
  PIER_ASSIGN_OR_RETURN(OwnerId workspace, m->governor_->AddOwner({.name = name + "/workspace"}));
  PIER_ASSIGN_OR_RETURN(OwnerId kv_owner, m->governor_->AddOwner({.name = name + "/kv"}));

  m->pool_ = std::make_unique<ThreadPool>(options.threads);
  PIER_ASSIGN_OR_RETURN(KvLayout layout, KvLayoutFor(*m->file_, options.block_size));
  const int64_t n_blocks = (options.kv_tokens + options.block_size - 1) / options.block_size;
  PIER_ASSIGN_OR_RETURN(m->kv_, PooledKvStore::Create(layout, n_blocks, *m->governor_, kv_owner));

  CpuRunnerOptions runner_options;
  runner_options.governor = m->governor_.get();
  runner_options.weights_owner = weights;
  runner_options.workspace_owner = workspace;
  runner_options.kv = m->kv_.get();
  runner_options.pool = m->pool_.get();
  PIER_ASSIGN_OR_RETURN(m->runner_, CreateCpuModelRunner(*m->file_, runner_options));
  return m;
}

}  // namespace pier::engine
