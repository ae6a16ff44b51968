// Helpers shared by the memory tests: a small fake device and a pool scaled to it.
#pragma once

#include <memory>

#include "device/fake_device.h"
#include "memory/memory_governor.h"

namespace pier::testing {

inline constexpr size_t kKiB = size_t{1} << 10;
inline constexpr size_t kMiB = size_t{1} << 20;

// Pool sizes scaled down so that a 64 MiB fake device behaves like a large GPU.
inline CachingAllocatorOptions SmallPool() {
  CachingAllocatorOptions pool;
  pool.small_block_max_bytes = 64 * kKiB;
  pool.small_segment_bytes = 256 * kKiB;
  pool.large_segment_bytes = 2 * kMiB;
  pool.large_round_bytes = 256 * kKiB;
  return pool;
}

inline std::unique_ptr<MemoryGovernor> MakeGovernor(Device* device, GovernorOptions options) {
  Result<std::unique_ptr<MemoryGovernor>> governor = MemoryGovernor::Create(device, options);
  PIER_CHECK(governor.ok(), governor.status().ToString());
  return std::move(governor).value();
}

inline GovernorOptions BudgetOf(size_t bytes) {
  GovernorOptions options;
  options.budget = BudgetSpec::Bytes(bytes);
  options.pool = SmallPool();
  return options;
}

inline OwnerId AddOwner(MemoryGovernor& governor, OwnerSpec spec) {
  Result<OwnerId> id = governor.AddOwner(std::move(spec));
  PIER_CHECK(id.ok(), id.status().ToString());
  return *id;
}

}  // namespace pier::testing
