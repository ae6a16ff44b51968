#pragma once
// Internal to src/placement: which hwloc discovery components Pier lets run.

#include <hwloc.h>

namespace pier::placement {

// Turns off hwloc's library-backed plugins before hwloc_topology_load: `pci` (libpciaccess,
// which leaks its device table at every load; hwloc's Linux backend reads the same PCI devices
// from sysfs without it), `opencl` and `gl` (an OpenCL loader and an X display are never wanted
// in a server, and Pier finds GPUs by PCI vendor), `cuda` and `nvml` (where hwloc is built with
// them they would initialise CUDA or NVML in the server process, which never opens a GPU its
// workers compute on). Without this ASan reports leaks in every process that reads the
// topology.
inline void SkipLibraryBackedComponents(hwloc_topology_t topo) {
  for (const char* name : {"pci", "opencl", "gl", "cuda", "nvml"}) {
    hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, name);
  }
}

}  // namespace pier::placement
