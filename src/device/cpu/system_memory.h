// System memory probing for the CPU device: available memory and the container limit.
//
// The CPU device's default capacity is MemAvailable from /proc/meminfo, capped by the
// memory limit of the process's cgroup (v2 `memory.max`, or v1 `memory.limit_in_bytes` on
// hybrid hosts), so that Pier in a container never plans past what the kernel will allow.
// The file roots are parameters so that tests read a fixture tree instead of the real
// /proc and /sys/fs/cgroup.
//
// Thread-safety: the functions are pure reads of files; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"

namespace pier {

struct SystemMemoryRoots {
  std::string proc = "/proc";             // holds meminfo and self/cgroup
  std::string cgroup = "/sys/fs/cgroup";  // cgroup v2 mount (v1 controllers below it)
};

struct CgroupMemoryLimit {
  uint64_t limit_bytes = 0;  // the tightest limit on the path from the process's cgroup up
  uint64_t usage_bytes = 0;  // memory.current (v2) / memory.usage_in_bytes (v1) there; 0 if absent
  std::string path;          // the directory whose limit applies, for messages
  int version = 2;           // 1 or 2
};

struct SystemMemory {
  uint64_t mem_total_bytes = 0;
  uint64_t mem_available_bytes = 0;
  std::optional<CgroupMemoryLimit> cgroup;  // absent: no limit ("max") or no cgroup found

  // MemAvailable capped by the cgroup limit: the CPU device's default capacity.
  uint64_t CapacityBytes() const;
  // What could be taken now: MemAvailable capped by (limit - usage) of the cgroup.
  uint64_t AvailableNowBytes() const;
};

// Parses /proc/meminfo text ("MemAvailable:   24178424 kB"). kDataLoss when a field is missing.
[[nodiscard]] Result<SystemMemory> ParseMeminfo(const std::string& text);

// Reads the memory limit of the process's cgroup. Returns nullopt when no limit is set
// ("max", or the v1 "unlimited" sentinel), or no memory controller is mounted.
// kDataLoss when a limit file exists but cannot be parsed.
[[nodiscard]] Result<std::optional<CgroupMemoryLimit>> ReadCgroupMemoryLimit(
    const SystemMemoryRoots& roots);

// Reads meminfo and the cgroup limit together.
[[nodiscard]] Result<SystemMemory> ReadSystemMemory(const SystemMemoryRoots& roots);

}  // namespace pier
