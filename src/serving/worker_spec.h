// A model instance's load options as the worker protocol's LoadSpec (ipc/worker.proto), and
// back: what the supervisor tells a worker process to load.
//
// Thread-safety: plain functions on values.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "ipc/worker.pb.h"
#include "serving/model_loader.h"

namespace pier::serving {

// One instance (`instance`, from 1) of `options`, with `budget_bytes` granted to the worker.
ipc::proto::LoadSpec ToLoadSpec(const ModelLoadOptions& options, int instance,
                                uint64_t budget_bytes);
// INVALID_ARGUMENT for a kv_dtype that is not one, or counts out of range.
[[nodiscard]] Result<ModelLoadOptions> FromLoadSpec(const ipc::proto::LoadSpec& spec);

}  // namespace pier::serving
