// RenderGpuMetrics: the GPU telemetry snapshot as Prometheus families, under Pier's names and
// units (bytes, hertz, ratios 0..1) and again under the DCGM exporter's (MiB, MHz, percent),
// computed from the same reading.
#include <unistd.h>

#include <cmath>
#include <map>
#include <string>

#include "metrics/gpu_telemetry.h"
#include "metrics/registry.h"

namespace pier::metrics {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Pier's labels for one reading, and DCGM exporter's ("gpu", "UUID", "device", "modelName",
// plus "GPU_I_ID" for a MIG instance).
Labels PierLabels(const GpuReading& g) {
  return {{"gpu", std::to_string(g.gpu)},
          {"mig", g.mig < 0 ? "" : std::to_string(g.mig)},
          {"uuid", g.uuid}};
}
// DCGM exporter's: a MIG instance carries its GPU's UUID and model name, and its GPU instance
// id in GPU_I_ID; every series carries the host's name.
struct DcgmContext {
  std::string hostname;
  std::map<unsigned, std::pair<std::string, std::string>> gpu;  // index -> (UUID, model name)
};
Labels DcgmLabels(const GpuReading& g, const DcgmContext& context) {
  auto it = context.gpu.find(g.gpu);
  const bool known = it != context.gpu.end();
  return {{"gpu", std::to_string(g.gpu)},
          {"UUID", known ? it->second.first : g.uuid},
          {"device", "nvidia" + std::to_string(g.gpu)},
          {"modelName", known ? it->second.second : g.name},
          {"Hostname", context.hostname},
          {"GPU_I_ID", g.mig < 0 ? "" : std::to_string(g.gpu_instance_id)}};
}
const std::vector<std::string> kPierLabels = {"gpu", "mig", "uuid"};
const std::vector<std::string> kDcgmLabels = {"gpu",       "UUID",     "device",
                                              "modelName", "Hostname", "GPU_I_ID"};

// One reading published under both names: `scale` turns Pier's unit into DCGM's.
struct Pair {
  Family<Gauge>* pier;
  Family<Gauge>* dcgm;  // null: DCGM has no such field
  double scale;
  bool integral = false;  // DCGM's value is an integer (percent, MHz)
  void Set(const GpuReading& g, const DcgmContext& context,
           const std::optional<double>& value) const {
    if (!value.has_value()) return;
    pier->WithLabels(PierLabels(g)).Set(*value);
    // NVML's percentages and MHz are integers: no 28.999999999999996 from 0.29 x 100.
    if (dcgm != nullptr)
      dcgm->WithLabels(DcgmLabels(g, context))
          .Set(integral ? std::round(*value * scale) : *value * scale);
  }
};

std::optional<double> AsDouble(const std::optional<uint64_t>& v) {
  if (!v.has_value()) return std::nullopt;
  return static_cast<double>(*v);
}

}  // namespace

void RenderGpuMetrics(const GpuTelemetrySnapshot& snapshot,
                      const std::map<unsigned, uint64_t>& waiting_allocations, std::string* out) {
  if (!snapshot.available) return;
  DcgmContext context;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) context.hostname = host;
  for (const GpuReading& g : snapshot.gpus) {
    if (g.mig < 0) context.gpu[g.gpu] = {g.uuid, g.name};
  }
  Registry r;
  auto pier = [&](const char* name, const char* help) {
    return &r.AddGauge(name, help, kPierLabels);
  };
  auto dcgm = [&](const char* name, const char* help) {
    return &r.AddGauge(name, help, kDcgmLabels);
  };
  auto& info = r.AddGauge("pier_gpu_info", "One per GPU and MIG instance NVML reports (value 1).",
                          {"gpu", "mig", "uuid", "name", "driver"});
  const Pair util{
      pier("pier_gpu_utilization_ratio", "SM utilisation over NVML's last sample period, 0..1."),
      dcgm("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."), 100, true};
  const Pair mem_util{pier("pier_gpu_memory_utilization_ratio",
                           "Share of time device memory was read or written, 0..1."),
                      dcgm("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %)."), 100, true};
  const Pair used{pier("pier_gpu_memory_used_bytes", "Device memory in use (every process)."),
                  dcgm("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."), 1 / kMiB};
  const Pair total{pier("pier_gpu_memory_total_bytes", "Device memory."), nullptr, 1};
  const Pair free{pier("pier_gpu_memory_free_bytes", "Device memory free."),
                  dcgm("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."), 1 / kMiB};
  const Pair temp{pier("pier_gpu_temperature_celsius", "GPU temperature."),
                  dcgm("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."), 1, true};
  const Pair power{pier("pier_gpu_power_watts", "Power draw."),
                   dcgm("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."), 1};
  const Pair sm_clock{pier("pier_gpu_sm_clock_hertz", "SM clock."),
                      dcgm("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz)."), 1e-6, true};
  const Pair mem_clock{pier("pier_gpu_memory_clock_hertz", "Memory clock."),
                       dcgm("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz)."), 1e-6,
                       true};
  const Pair tx{pier("pier_gpu_pcie_tx_bytes_per_second", "PCIe transmit throughput."), nullptr, 1};
  const Pair rx{pier("pier_gpu_pcie_rx_bytes_per_second", "PCIe receive throughput."), nullptr, 1};
  auto& ecc = r.AddCounter("pier_gpu_ecc_errors_total",
                           "ECC errors since the driver loaded, by type (corrected, uncorrected).",
                           {"gpu", "uuid", "type"});
  auto& sbe = r.AddCounter("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
                           "Total number of single-bit volatile ECC errors.", kDcgmLabels);
  auto& dbe = r.AddCounter("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                           "Total number of double-bit volatile ECC errors.", kDcgmLabels);
  auto& pressure = r.AddGauge(
      "pier_gpu_memory_pressure_index",
      "Memory pressure as the field report defined it: used / total x allocations waiting on a "
      "reclaim in the GPU's governor (0 when none wait).",
      {"gpu", "uuid"});
  auto& process =
      r.AddGauge("pier_gpu_process_memory_bytes",
                 "Device memory each process holds, as NVML reports it.", {"gpu", "uuid", "pid"});
  for (const GpuReading& g : snapshot.gpus) {
    info.WithLabels({{"gpu", std::to_string(g.gpu)},
                     {"mig", g.mig < 0 ? "" : std::to_string(g.mig)},
                     {"uuid", g.uuid},
                     {"name", g.name},
                     {"driver", snapshot.driver_version}})
        .Set(1);
    util.Set(g, context, g.utilization);
    mem_util.Set(g, context, g.memory_utilization);
    used.Set(g, context, AsDouble(g.memory_used_bytes));
    total.Set(g, context, AsDouble(g.memory_total_bytes));
    if (g.memory_used_bytes.has_value() && g.memory_total_bytes.has_value()) {
      const uint64_t t = *g.memory_total_bytes, u = std::min(*g.memory_used_bytes, t);
      free.Set(g, context, static_cast<double>(t - u));
      if (g.mig < 0 && t > 0) {
        auto it = waiting_allocations.find(g.gpu);
        const double waiting =
            it == waiting_allocations.end() ? 0 : static_cast<double>(it->second);
        pressure.WithLabels({{"gpu", std::to_string(g.gpu)}, {"uuid", g.uuid}})
            .Set(static_cast<double>(u) / static_cast<double>(t) * waiting);
      }
    }
    temp.Set(g, context, g.temperature_celsius);
    power.Set(g, context, g.power_watts);
    sm_clock.Set(g, context, g.sm_clock_hertz);
    mem_clock.Set(g, context, g.memory_clock_hertz);
    tx.Set(g, context, g.pcie_tx_bytes_per_second);
    rx.Set(g, context, g.pcie_rx_bytes_per_second);
    const std::string index = std::to_string(g.gpu);
    if (g.ecc_corrected.has_value()) {
      ecc.WithLabels({{"gpu", index}, {"uuid", g.uuid}, {"type", "corrected"}})
          .Increment(static_cast<double>(*g.ecc_corrected));
      sbe.WithLabels(DcgmLabels(g, context)).Increment(static_cast<double>(*g.ecc_corrected));
    }
    if (g.ecc_uncorrected.has_value()) {
      ecc.WithLabels({{"gpu", index}, {"uuid", g.uuid}, {"type", "uncorrected"}})
          .Increment(static_cast<double>(*g.ecc_uncorrected));
      dbe.WithLabels(DcgmLabels(g, context)).Increment(static_cast<double>(*g.ecc_uncorrected));
    }
    if (g.processes.has_value()) {
      for (const GpuProcessMemory& p : *g.processes) {
        if (!p.known) continue;
        process.WithLabels({{"gpu", index}, {"uuid", g.uuid}, {"pid", std::to_string(p.pid)}})
            .Set(static_cast<double>(p.bytes));
      }
    }
  }
  auto& xid =
      r.AddCounter("pier_gpu_xid_errors_total",
                   "Critical XID errors NVML reported, by GPU and XID number.", {"gpu", "xid"});
  for (const auto& [key, n] : snapshot.xid_errors) {
    xid.WithLabels({{"gpu", std::to_string(key.first)}, {"xid", std::to_string(key.second)}})
        .Increment(static_cast<double>(n));
  }
  auto& last_xid =
      r.AddGauge("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", {"gpu"});
  for (const auto& [gpu, value] : snapshot.last_xid) {
    last_xid.WithLabels({{"gpu", std::to_string(gpu)}}).Set(static_cast<double>(value));
  }
  r.AddGauge("pier_gpu_telemetry_period_seconds",
             "The sampling period in use: short when the GPUs are idle, long under load.")
      .WithLabels({})
      .Set(snapshot.period_seconds);
  r.AddCounter("pier_gpu_telemetry_samples_total", "GPU telemetry samples taken.")
      .WithLabels({})
      .Increment(static_cast<double>(snapshot.samples));
  r.AddCounter("pier_gpu_telemetry_read_errors_total",
               "Readings NVML refused (other than Not Supported); each kind is logged once.")
      .WithLabels({})
      .Increment(static_cast<double>(snapshot.read_errors));
  r.RenderTo(out);
}

}  // namespace pier::metrics
