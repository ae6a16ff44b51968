// The CPU governor tests load models under: one DeviceSet for the whole test binary (as a
// process has one), with the whole device as its budget, and its swap pool. Models remove their
// owners when they end, so tests do not see each other's charges once their models are gone.
//
// Thread-safety: the first call creates the set (a function-local static); the governor is
// thread-safe.
#pragma once

#include <gtest/gtest.h>

#include "memory/memory_governor.h"
#include "serving/device_set.h"

namespace pier::testing {

inline serving::DeviceSet* TestDevices() {
  // Never destroyed: a model held in a static may end after any other static would.
  static serving::DeviceSet* const set = [] {
    serving::DeviceSetOptions options;
    options.swap_space_bytes = uint64_t{256} << 20;
    auto created = serving::DeviceSet::Create(options);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    return created.ok() ? created.value().release() : nullptr;
  }();
  return set;
}

inline MemoryGovernor* TestGovernor() {
  serving::DeviceSet* set = TestDevices();
  return set == nullptr ? nullptr : &set->cpu_governor();
}

// The pinned host pool KV swap space comes from (256 MiB).
inline PinnedHostPool* TestSwapPool() {
  serving::DeviceSet* set = TestDevices();
  return set == nullptr ? nullptr : &set->swap_pool();
}

}  // namespace pier::testing
