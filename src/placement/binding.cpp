#include "placement/binding.h"

#include "placement/cpu_list.h"

namespace pier::placement {

std::string Binding::Describe() const {
  std::string out;
  const auto add = [&](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
  if (!cpus.empty()) add("cpus " + FormatCpuList(cpus));
  if (numa_node >= 0) add("memory on NUMA node " + std::to_string(numa_node));
  if (!gpu.empty()) {
    add("gpu " + gpu +
        (gpu_numa_node >= 0 ? " (on NUMA node " + std::to_string(gpu_numa_node) + ")" : ""));
  }
  return out.empty() ? "not bound" : out;
}

}  // namespace pier::placement
