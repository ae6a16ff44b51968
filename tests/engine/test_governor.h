// The CPU governor tests load models under: one DeviceSet for the whole test binary (as a
// process has one), with the whole device as its budget. Models remove their owners when they
// end, so tests do not see each other's charges once their models are gone.
//
// Thread-safety: the first call creates the set (a function-local static); the governor is
// thread-safe.
#pragma once

#include <gtest/gtest.h>

#include "memory/memory_governor.h"
#include "serving/device_set.h"

namespace pier::testing {

inline MemoryGovernor* TestGovernor() {
  // Never destroyed: a model held in a static may end after any other static would.
  static serving::DeviceSet* const set = [] {
    auto created = serving::DeviceSet::Create({});
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    return created.ok() ? created.value().release() : nullptr;
  }();
  return set == nullptr ? nullptr : &set->cpu_governor();
}

}  // namespace pier::testing
