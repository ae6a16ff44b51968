// BindingRequest: what a model's config asks for one instance's worker process (`cpus`,
// `numa_node`, `gpu`, MPS limits), and Binding: what the Placer chose for it, which the
// supervisor prints, /admin/models shows, and the worker applies (bind_process.h) and gets in
// its environment.
//
// MIG and MPS are applied through the worker's environment only (CUDA_VISIBLE_DEVICES naming
// a MIG UUID; CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, read by
// the CUDA runtime when an MPS daemon serves the GPU): Pier neither starts the MPS daemon nor
// partitions GPUs.
//
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pier::placement {

struct BindingRequest {
  enum class Choice { kNone, kAuto, kGiven };
  Choice cpus = Choice::kNone;  // kGiven: cpu_list
  std::vector<int> cpu_list;    // OS CPU numbers
  Choice numa = Choice::kNone;  // kGiven: numa_node
  int numa_node = -1;
  // A GPU index, "GPU-<uuid>" or "MIG-<uuid>"; empty: none.
  std::string gpu;
  int mps_thread_percentage = 0;        // 1..100; 0: not set
  uint64_t mps_memory_limit_bytes = 0;  // 0: not set

  bool empty() const {
    return cpus == Choice::kNone && numa == Choice::kNone && gpu.empty() &&
           mps_thread_percentage == 0 && mps_memory_limit_bytes == 0;
  }
  bool operator==(const BindingRequest&) const = default;
};

struct Binding {
  std::vector<int> cpus;  // empty: not bound
  int numa_node = -1;     // memory bound to this node; -1: not bound
  std::string gpu;        // CUDA_VISIBLE_DEVICES; empty: not set
  int gpu_numa_node = -1;
  // "NAME=value" for the worker: CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, MPS limits.
  std::vector<std::string> environment;
  // Said once at placement: cores shared with other instances, GPU locality unknown, ...
  std::vector<std::string> warnings;

  bool bound() const { return !cpus.empty() || numa_node >= 0 || !gpu.empty(); }
  // "cpus 0-3, numa node 0, gpu 1 (node 0)" or "not bound".
  std::string Describe() const;
};

}  // namespace pier::placement
