// `pier devices [--json]`: the devices Pier would use and why.
//
// Shows the CPU device's capacity (MemAvailable capped by the cgroup memory
// limit, the default budget base of the memory governor), the NVIDIA GPUs NVML sees (each
// as the cuda:N a model's `device:` names, with its UUID, memory and MIG instances: what a
// worker's `gpu:` can name), and whether the CUDA plugin is usable; when it is not, the
// one-line reason (no plugin, no driver, no device). Exits 0 either way: running on the CPU
// is not an error.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "device/cpu/cpu_device.h"
#include "device/cuda/cuda_plugin.h"
#include "kernels/cpu/cpu_isa.h"
#include "memory/byte_size.h"
#include "metrics/gpu_inventory.h"

namespace pier::cli {
namespace {

int RunDevices(bool json) {
  auto cpu = CpuDevice::Create();
  if (!cpu.ok()) {
    std::fprintf(stderr, "pier devices: %s\n", cpu.status().ToString().c_str());
    return 1;
  }
  const SystemMemory& memory = (*cpu)->system_memory();
  const cuda::CudaStatus& gpu = cuda::GetCudaStatus();
  const metrics::GpuInventory inventory = metrics::ReadGpuInventory();
  if (json) {
    nlohmann::ordered_json out;
    out["cpu"] = {{"capacity_bytes", (*cpu)->TotalBytes()},
                  {"mem_total_bytes", memory.mem_total_bytes},
                  {"mem_available_bytes", memory.mem_available_bytes},
                  {"kernel_isa", kernels::IsaName(kernels::ActiveIsa())},
                  {"best_isa", kernels::IsaName(kernels::BestIsa())}};
    if (memory.cgroup) {
      out["cpu"]["cgroup_limit_bytes"] = memory.cgroup->limit_bytes;
      out["cpu"]["cgroup_path"] = memory.cgroup->path;
    }
    out["cuda"] = {{"availability", std::string(cuda::CudaAvailabilityName(gpu.availability))},
                   {"reason", gpu.reason},
                   {"plugin", gpu.plugin_path},
                   {"devices", gpu.device_count}};
    nlohmann::ordered_json gpus = nlohmann::ordered_json::array();
    for (const metrics::GpuInfo& g : inventory.gpus) {
      nlohmann::ordered_json entry = {{"device", "cuda:" + std::to_string(g.index)},
                                      {"name", g.name},
                                      {"uuid", g.uuid},
                                      {"memory_total_bytes", g.memory_total_bytes},
                                      {"memory_free_bytes", g.memory_free_bytes},
                                      {"mig_enabled", g.mig_enabled}};
      entry["mig"] = nlohmann::ordered_json::array();
      for (const metrics::MigInstance& m : g.mig) {
        entry["mig"].push_back({{"uuid", m.uuid},
                                {"gpu_instance", m.gpu_instance},
                                {"memory_total_bytes", m.memory_total_bytes}});
      }
      gpus.push_back(std::move(entry));
    }
    out["gpus"] = std::move(gpus);
    out["nvml"] = {{"driver_version", inventory.driver_version},
                   {"unavailable_reason", inventory.unavailable_reason}};
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf(
      "cpu:   capacity %s (MemAvailable %s of %s", FormatBytes((*cpu)->TotalBytes()).c_str(),
      FormatBytes(memory.mem_available_bytes).c_str(), FormatBytes(memory.mem_total_bytes).c_str());
  if (memory.cgroup) {
    std::printf(", cgroup v%d limit %s at %s", memory.cgroup->version,
                FormatBytes(memory.cgroup->limit_bytes).c_str(), memory.cgroup->path.c_str());
  }
  std::printf(")\n       kernels %s (best on this CPU: %s; PIER_CPU_ISA forces a level)\n",
              kernels::IsaName(kernels::ActiveIsa()), kernels::IsaName(kernels::BestIsa()));
  if (!inventory.unavailable_reason.empty()) {
    std::printf("gpus:  none seen (NVML: %s)\n", inventory.unavailable_reason.c_str());
  } else {
    std::printf("gpus:  %zu (driver %s)\n", inventory.gpus.size(),
                inventory.driver_version.c_str());
  }
  for (const metrics::GpuInfo& g : inventory.gpus) {
    std::printf("  cuda:%u  %s  %s  %s (%s free)%s\n", g.index, g.name.c_str(), g.uuid.c_str(),
                FormatBytes(g.memory_total_bytes).c_str(), FormatBytes(g.memory_free_bytes).c_str(),
                g.mig_enabled ? "  MIG on" : "");
    for (const metrics::MigInstance& m : g.mig) {
      std::printf("          %s  GPU instance %u  %s\n", m.uuid.c_str(), m.gpu_instance,
                  FormatBytes(m.memory_total_bytes).c_str());
    }
  }
  std::printf("cuda:  %s\n", gpu.Summary().c_str());
  return 0;
}

void RegisterDevices(CLI::App& app, int& exit_code) {
  auto json = std::make_shared<bool>(false);
  CLI::App* command = app.add_subcommand("devices", "Show the CPU and GPU devices Pier can use");
  command->add_flag("--json", *json, "Print JSON");
  command->callback([json, &exit_code] { exit_code = RunDevices(*json); });
}

}  // namespace

PIER_REGISTER_COMMAND(devices, RegisterDevices);

}  // namespace pier::cli
