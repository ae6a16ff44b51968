// The pinned host pool engine tests take swap space from: one per test binary, never destroyed
// (engines in statics may outlive other statics).
#pragma once

#include <cstdint>
#include <utility>

#include "device/cpu/cpu_device.h"
#include "memory/pinned_host_pool.h"

namespace pier::engine::testing {

inline PinnedHostPool* SwapPool() {
  static PinnedHostPool* const pool = [] {
    CpuDeviceOptions device;
    device.capacity_bytes = uint64_t{1} << 30;
    CpuDevice* cpu = std::move(CpuDevice::Create(device)).value().release();
    return new PinnedHostPool(cpu, {.limit_bytes = uint64_t{64} << 20});
  }();
  return pool;
}

}  // namespace pier::engine::testing
