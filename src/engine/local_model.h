// LocalModel: one model instance on the CPU with everything it runs on, for
// `pier run`, tests and benchmarks.
//
// Open() maps the GGUF file, creates the CPU device and its memory governor
// (owners "<name>/weights", "<name>/workspace", "<name>/kv"), a thread pool, a
// PooledKvStore of the requested size and the architecture's runner. The
// engine (issue 5) builds its own paged KV cache on the same pieces instead.
//
// Ownership: owns all of it; members are destroyed in reverse order of creation
// (runner, KV, pool, file, governor, device), so every governor handle is gone
// before the governor. Thread-safety: one thread uses it (see model_runner.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "common/thread_pool.h"
#include "device/device.h"
#include "engine/kv_store.h"
#include "engine/model_runner.h"
#include "memory/memory_governor.h"
#include "model/gguf_file.h"

namespace pier::engine {

struct LocalModelOptions {
  std::string path;          // GGUF file
  int threads = 2;           // compute threads, counting the caller
  int64_t kv_tokens = 4096;  // KV capacity in positions (rounded up to whole blocks)
  int64_t block_size = 16;   // positions per KV block
};

class LocalModel {
 public:
  // The file's errors, the runner's (unsupported architecture or types), or the governor's
  // refusal; INVALID_ARGUMENT for threads < 1 or kv_tokens < 1.
  [[nodiscard]] static Result<std::unique_ptr<LocalModel>> Open(const LocalModelOptions& options);
  // The same for a file already opened (options.path is ignored), e.g. an in-memory image
  // in tests (its bytes must outlive the LocalModel).
  [[nodiscard]] static Result<std::unique_ptr<LocalModel>> Create(
      std::unique_ptr<model::GgufFile> file, const LocalModelOptions& options);
  ~LocalModel();

  const model::GgufFile& file() const { return *file_; }
  ModelRunner& runner() { return *runner_; }
  KvStore& kv() { return *kv_; }
  ThreadPool& pool() { return *pool_; }
  MemoryGovernor& governor() { return *governor_; }

 private:
  LocalModel() = default;

  std::unique_ptr<Device> device_;
  std::unique_ptr<MemoryGovernor> governor_;
  std::unique_ptr<model::GgufFile> file_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<KvStore> kv_;
  std::unique_ptr<ModelRunner> runner_;
};

}  // namespace pier::engine
