// Topology: what the placement of model instances needs to know about the machine, read once
// with hwloc: the cores this process may use (a cgroup's cpuset and the process's own
// affinity limit them), their NUMA nodes, and the NVIDIA GPUs on the PCI bus with the NUMA
// node each is attached to. Plain data, so placement is a pure function of it and tests load
// machines this one is not from hwloc XML files (tests/placement/fixtures/).
//
// GPU indices are the PCI bus order of NVIDIA display/3D controllers, which is nvidia-smi's
// order and CUDA's under CUDA_DEVICE_ORDER=PCI_BUS_ID (workers are started with that set, so
// `gpu: 3` means the same GPU to Pier, nvidia-smi and the worker's CUDA runtime). Where hwloc's
// CUDA or NVML plugin names them (cudaN / nvmlN, with their UUIDs), those names win.
//
// Thread-safety: a value; Load* are plain functions.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace pier::placement {

struct Core {
  int index = 0;         // hwloc's logical index among the allowed cores (0, 1, ...)
  std::vector<int> pus;  // the OS CPU numbers of its hardware threads (allowed ones)
  int numa_node = -1;    // OS index of its NUMA node; -1 when hwloc does not know
};

struct Gpu {
  int index = 0;
  std::string pci_bus_id;  // "0000:18:00.0"
  std::string uuid;        // "GPU-..." when hwloc's NVML plugin gave it; else empty
  std::string name;        // "GH100 [H100 SXM5 80GB]" or so
  int numa_node = -1;      // the node of its PCI locality; -1: unknown or all nodes
};

struct Topology {
  std::vector<Core> cores;      // allowed cores, in hwloc's logical order
  std::vector<int> numa_nodes;  // allowed nodes' OS indices, ascending
  std::vector<Gpu> gpus;        // by index
  std::string source;           // "this machine" or the XML file's path

  // Every allowed OS CPU number, ascending.
  std::vector<int> AllowedCpus() const;
  // The cores of `node` (all cores for -1).
  std::vector<const Core*> CoresOf(int node) const;
  // "2 NUMA nodes, 16 cores (32 CPUs 0-31), 8 GPUs" for logs.
  std::string Summary() const;
};

// This machine, as this process sees it (its cgroup cpuset and its own CPU affinity).
[[nodiscard]] Result<Topology> LoadSystemTopology();
// A topology exported by `lstopo --of xml` (or written in that format), with its
// allowed_cpuset as the cgroup's. NOT_FOUND / INVALID_ARGUMENT naming the file.
[[nodiscard]] Result<Topology> LoadTopologyXml(const std::string& path);

}  // namespace pier::placement
