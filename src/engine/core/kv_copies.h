// The engine's K/V copies outside a step (internal to the engine): swap space for preemption
// by swap, over the pinned host pool, and copy-on-write of shared blocks.
#pragma once

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "engine/kv/kv_store.h"
#include "engine/scheduler/scheduler.h"
#include "memory/pinned_host_pool.h"

namespace pier::engine {

// n_slots blocks of `kv` in `pool`, copied on a stream of their own (SwapSpace).
// RESOURCE_EXHAUSTED when the pool cannot hold them; the device's error for the stream.
[[nodiscard]] Result<std::unique_ptr<SwapSpace>> CreateHostSwapSpace(KvStore* kv, int64_t n_slots,
                                                                     PinnedHostPool* pool);

// Copies whole blocks of `kv` (on the device, synchronously).
std::unique_ptr<BlockCopier> MakeKvBlockCopier(KvStore* kv);

}  // namespace pier::engine
