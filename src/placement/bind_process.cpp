#include "placement/bind_process.h"

#include <hwloc.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "placement/cpu_list.h"
#include "placement/hwloc_components.h"

namespace pier::placement {

Status BindThisProcess(const std::vector<int>& cpus, int numa_node) {
  if (cpus.empty() && numa_node < 0) return Status::Ok();
  hwloc_topology_t topo = nullptr;
  if (hwloc_topology_init(&topo) != 0) return InternalError("hwloc_topology_init failed");
  SkipLibraryBackedComponents(topo);
  // Binding needs cores and NUMA nodes only, no I/O devices.
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE);
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return InternalError("hwloc could not load this machine's topology");
  }
  std::unique_ptr<hwloc_topology, decltype(&hwloc_topology_destroy)> owner(topo,
                                                                           &hwloc_topology_destroy);
  std::unique_ptr<hwloc_bitmap_s, decltype(&hwloc_bitmap_free)> set(hwloc_bitmap_alloc(),
                                                                    &hwloc_bitmap_free);
  if (!cpus.empty()) {
    for (int cpu : cpus) hwloc_bitmap_set(set.get(), static_cast<unsigned>(cpu));
    if (!hwloc_bitmap_isincluded(set.get(), hwloc_topology_get_allowed_cpuset(topo))) {
      std::unique_ptr<hwloc_bitmap_s, decltype(&hwloc_bitmap_free)> outside(
          hwloc_bitmap_dup(set.get()), &hwloc_bitmap_free);
      hwloc_bitmap_andnot(outside.get(), outside.get(), hwloc_topology_get_allowed_cpuset(topo));
      std::vector<int> list;
      for (int i = hwloc_bitmap_first(outside.get()); i >= 0;
           i = hwloc_bitmap_next(outside.get(), i)) {
        list.push_back(i);
      }
      return InvalidArgumentError("cannot bind to cpus " + FormatCpuList(cpus) + ": " +
                                  FormatCpuList(list) + " not on this machine or not allowed");
    }
    if (hwloc_set_cpubind(topo, set.get(), HWLOC_CPUBIND_PROCESS) != 0) {
      return InvalidArgumentError("cannot bind to cpus " + FormatCpuList(cpus) + ": " +
                                  std::strerror(errno));
    }
  }
  if (numa_node >= 0) {
    hwloc_bitmap_zero(set.get());
    hwloc_bitmap_set(set.get(), static_cast<unsigned>(numa_node));
    if (!hwloc_bitmap_isincluded(set.get(), hwloc_topology_get_allowed_nodeset(topo))) {
      return InvalidArgumentError("cannot bind memory to NUMA node " + std::to_string(numa_node) +
                                  ": no such node on this machine (or not allowed)");
    }
    if (hwloc_set_membind(topo, set.get(), HWLOC_MEMBIND_BIND,
                          HWLOC_MEMBIND_PROCESS | HWLOC_MEMBIND_BYNODESET) != 0) {
      return InvalidArgumentError("cannot bind memory to NUMA node " + std::to_string(numa_node) +
                                  ": " + std::strerror(errno));
    }
  }
  return Status::Ok();
}

}  // namespace pier::placement
