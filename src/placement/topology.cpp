#include "placement/topology.h"

#include <hwloc.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>
#include <tuple>

#include "placement/cpu_list.h"
#include "placement/hwloc_components.h"

namespace pier::placement {
namespace {

constexpr unsigned kNvidiaVendor = 0x10de;
constexpr unsigned kClassVga = 0x0300;
constexpr unsigned kClass3d = 0x0302;

struct TopologyCloser {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using TopologyHandle = std::unique_ptr<hwloc_topology, TopologyCloser>;

struct BitmapFree {
  void operator()(hwloc_bitmap_s* b) const { hwloc_bitmap_free(b); }
};
using Bitmap = std::unique_ptr<hwloc_bitmap_s, BitmapFree>;

std::vector<int> BitsOf(hwloc_const_bitmap_t set) {
  std::vector<int> bits;
  if (set == nullptr || hwloc_bitmap_iszero(set)) return bits;
  int i = -1;
  while ((i = hwloc_bitmap_next(set, i)) != -1) bits.push_back(i);
  return bits;
}

// The one NUMA node of `nodeset`, or -1 when it spans several (or none).
int SingleNode(hwloc_const_nodeset_t nodeset) {
  if (nodeset == nullptr || hwloc_bitmap_weight(nodeset) != 1) return -1;
  return hwloc_bitmap_first(nodeset);
}

const char* InfoOf(hwloc_obj_t obj, const char* name) {
  return hwloc_obj_get_info_by_name(obj, name);
}

void ReadGpus(hwloc_topology_t topo, Topology* out) {
  struct Found {
    std::tuple<unsigned, unsigned, unsigned, unsigned> bus;
    Gpu gpu;
    int named_index = -1;  // from a cudaN / nvmlN OS device
  };
  std::vector<Found> found;
  for (hwloc_obj_t pci = hwloc_get_next_pcidev(topo, nullptr); pci != nullptr;
       pci = hwloc_get_next_pcidev(topo, pci)) {
    const auto& a = pci->attr->pcidev;
    if (a.vendor_id != kNvidiaVendor || (a.class_id != kClassVga && a.class_id != kClass3d)) {
      continue;
    }
    Found f;
    f.bus = {a.domain, a.bus, a.dev, a.func};
    char bus_id[32];
    std::snprintf(bus_id, sizeof(bus_id), "%04x:%02x:%02x.%01x", a.domain, a.bus, a.dev, a.func);
    f.gpu.pci_bus_id = bus_id;
    if (const char* device = InfoOf(pci, "PCIDevice")) f.gpu.name = device;
    hwloc_obj_t local = hwloc_get_non_io_ancestor_obj(topo, pci);
    f.gpu.numa_node = local != nullptr ? SingleNode(local->nodeset) : -1;
    for (hwloc_obj_t os = pci->io_first_child; os != nullptr; os = os->next_sibling) {
      if (os->type != HWLOC_OBJ_OS_DEVICE || os->name == nullptr) continue;
      int n = -1;
      if (std::sscanf(os->name, "cuda%d", &n) == 1 || std::sscanf(os->name, "nvml%d", &n) == 1) {
        f.named_index = n;
      }
      if (const char* uuid = InfoOf(os, "NVIDIAUUID")) f.gpu.uuid = uuid;
    }
    found.push_back(std::move(f));
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    if ((a.named_index >= 0) != (b.named_index >= 0)) return a.named_index >= 0;
    if (a.named_index != b.named_index) return a.named_index < b.named_index;
    return a.bus < b.bus;
  });
  for (size_t i = 0; i < found.size(); ++i) {
    found[i].gpu.index = static_cast<int>(i);
    out->gpus.push_back(std::move(found[i].gpu));
  }
}

// `restrict_to`: the process's own affinity (nullptr for an XML file: not this machine).
Result<Topology> Read(hwloc_topology_t topo, std::string source, hwloc_const_cpuset_t restrict_to) {
  Topology out;
  out.source = std::move(source);
  Bitmap allowed(hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(topo)));
  if (restrict_to != nullptr && hwloc_bitmap_intersects(allowed.get(), restrict_to)) {
    hwloc_bitmap_and(allowed.get(), allowed.get(), restrict_to);
  }
  const int cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  for (int i = 0; i < cores; ++i) {
    hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, static_cast<unsigned>(i));
    Bitmap pus(hwloc_bitmap_alloc());
    hwloc_bitmap_and(pus.get(), core->cpuset, allowed.get());
    if (hwloc_bitmap_iszero(pus.get())) continue;
    Core c;
    c.index = static_cast<int>(out.cores.size());
    c.pus = BitsOf(pus.get());
    c.numa_node = SingleNode(core->nodeset);
    out.cores.push_back(std::move(c));
  }
  if (out.cores.empty()) {
    // No cores in the topology (some virtual machines): each PU is a core.
    for (int pu : BitsOf(allowed.get())) {
      hwloc_obj_t obj = hwloc_get_pu_obj_by_os_index(topo, static_cast<unsigned>(pu));
      out.cores.push_back({static_cast<int>(out.cores.size()),
                           {pu},
                           obj != nullptr ? SingleNode(obj->nodeset) : -1});
    }
  }
  if (out.cores.empty()) return InvalidArgumentError(out.source + ": no CPU may be used");
  std::set<int> nodes;
  for (int n : BitsOf(hwloc_topology_get_allowed_nodeset(topo))) nodes.insert(n);
  out.numa_nodes.assign(nodes.begin(), nodes.end());
  ReadGpus(topo, &out);
  return out;
}

Result<TopologyHandle> Open(const std::string* xml_path) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return InternalError("hwloc_topology_init failed");
  TopologyHandle topo(raw);
  SkipLibraryBackedComponents(raw);
  // PCI devices are wanted (GPU locality); bridges only as far as they lead to them.
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (xml_path != nullptr && hwloc_topology_set_xml(raw, xml_path->c_str()) != 0) {
    return InvalidArgumentError(*xml_path + ": hwloc cannot read it as a topology");
  }
  if (hwloc_topology_load(raw) != 0) {
    return InvalidArgumentError((xml_path != nullptr ? *xml_path + ": " : std::string()) +
                                "hwloc could not load the topology");
  }
  return topo;
}

}  // namespace

std::vector<int> Topology::AllowedCpus() const {
  std::vector<int> cpus;
  for (const Core& c : cores) cpus.insert(cpus.end(), c.pus.begin(), c.pus.end());
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

std::vector<const Core*> Topology::CoresOf(int node) const {
  std::vector<const Core*> out;
  for (const Core& c : cores) {
    if (node < 0 || c.numa_node == node) out.push_back(&c);
  }
  return out;
}

std::string Topology::Summary() const {
  const std::vector<int> cpus = AllowedCpus();
  return std::to_string(numa_nodes.size()) + " NUMA node" + (numa_nodes.size() == 1 ? "" : "s") +
         ", " + std::to_string(cores.size()) + " cores (" + std::to_string(cpus.size()) + " CPUs " +
         FormatCpuList(cpus) + "), " + std::to_string(gpus.size()) + " NVIDIA GPU" +
         (gpus.size() == 1 ? "" : "s");
}

Result<Topology> LoadSystemTopology() {
  PIER_ASSIGN_OR_RETURN(TopologyHandle topo, Open(nullptr));
  Bitmap mine(hwloc_bitmap_alloc());
  const bool known = hwloc_get_cpubind(topo.get(), mine.get(), HWLOC_CPUBIND_PROCESS) == 0;
  return Read(topo.get(), "this machine", known ? mine.get() : nullptr);
}

Result<Topology> LoadTopologyXml(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return NotFoundError(path + ": no such topology file");
  }
  PIER_ASSIGN_OR_RETURN(TopologyHandle topo, Open(&path));
  return Read(topo.get(), path, nullptr);
}

}  // namespace pier::placement
