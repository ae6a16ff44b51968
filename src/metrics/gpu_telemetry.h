// GpuTelemetry: what NVML says about every GPU and MIG instance of this machine, sampled in
// the background for /metrics and for the worker supervisor's health checks.
//
// Readings per GPU: SM utilisation, memory used/total, temperature, power, SM and memory
// clocks, PCIe throughput, volatile ECC error counts, and the memory each process holds on
// it; per MIG instance, its memory and processes (the rest is the GPU's). Critical XID errors
// arrive as NVML events on a second thread and are counted per GPU and XID number. A reading NVML
// refuses for a GPU
// ("Not Supported", "GPU is lost", ...) is absent from the snapshot, the rest stay, and the
// refusal is logged once per GPU, reading and code.
//
// Sampling period: the overhead lesson of the field report (monitoring that samples often
// costs throughput when the GPU is busy). The period moves between `min_period` when the
// GPUs are idle and `max_period` under full load, linearly in the highest SM utilisation of
// the last sample; the period in use is a metric (pier_gpu_telemetry_period_seconds).
//
// Without NVML (no NVIDIA driver, a library too old, nvmlInit failing) the object still
// exists, available() is false, it says why once at info level, and renders nothing.
//
// Thread-safety: every method may be called from any thread. With `start_threads` a sampling
// thread and an event thread run until destruction; tests pass false and drive SampleNow and
// PollEvents themselves.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace pier::metrics {

namespace nvml {
class Library;
}

struct GpuTelemetryOptions {
  std::string library = "libnvidia-ml.so.1";    // dlopen's name (found on the loader's path)
  std::chrono::milliseconds min_period{1000};   // idle GPUs
  std::chrono::milliseconds max_period{10000};  // GPUs at 100% SM utilisation
  bool start_threads = true;
};

struct GpuProcessMemory {
  int64_t pid = 0;
  uint64_t bytes = 0;
  bool known = true;  // false: NVML lists the process without its memory (MIG, no rights)
};

// One GPU, or one MIG instance of it (mig >= 0). Absent optionals: NVML did not answer.
struct GpuReading {
  unsigned gpu = 0;              // the physical GPU's NVML index
  int mig = -1;                  // MIG device index on that GPU; -1: the whole GPU
  unsigned gpu_instance_id = 0;  // MIG only
  std::string uuid = {};         // "GPU-..." or "MIG-..."
  std::string name = {};
  std::optional<double> utilization = std::nullopt;         // SM, 0..1
  std::optional<double> memory_utilization = std::nullopt;  // memory controller busy, 0..1
  std::optional<uint64_t> memory_used_bytes = std::nullopt;
  std::optional<uint64_t> memory_total_bytes = std::nullopt;
  std::optional<double> temperature_celsius = std::nullopt;
  std::optional<double> power_watts = std::nullopt;
  std::optional<double> sm_clock_hertz = std::nullopt;
  std::optional<double> memory_clock_hertz = std::nullopt;
  std::optional<double> pcie_tx_bytes_per_second = std::nullopt;
  std::optional<double> pcie_rx_bytes_per_second = std::nullopt;
  std::optional<uint64_t> ecc_corrected = std::nullopt;    // since the driver loaded
  std::optional<uint64_t> ecc_uncorrected = std::nullopt;  //
  std::optional<std::vector<GpuProcessMemory>> processes = std::nullopt;
};

struct GpuTelemetrySnapshot {
  bool available = false;
  std::string driver_version;
  std::vector<GpuReading> gpus;  // whole GPUs in index order, each followed by its MIG devices
  // Critical XID errors counted per (GPU index, XID number), and the last XID per GPU.
  std::map<std::pair<unsigned, uint64_t>, uint64_t> xid_errors;
  std::map<unsigned, uint64_t> last_xid;
  double period_seconds = 0;
  uint64_t samples = 0;
  uint64_t read_errors = 0;  // readings NVML refused (not counting "Not Supported")
};

class GpuTelemetry {
 public:
  explicit GpuTelemetry(GpuTelemetryOptions options = {});
  ~GpuTelemetry();
  GpuTelemetry(const GpuTelemetry&) = delete;
  GpuTelemetry& operator=(const GpuTelemetry&) = delete;

  bool available() const { return library_ != nullptr; }
  // Why NVML is not used ("NVML is not available (...)"); empty when available.
  const std::string& unavailable_reason() const { return unavailable_reason_; }

  // Reads every GPU once and adapts the period.
  void SampleNow();
  // Waits up to `timeout` for one XID event and counts it; false when none came.
  bool PollEvents(std::chrono::milliseconds timeout);

  GpuTelemetrySnapshot Snapshot() const;
  std::chrono::milliseconds period() const;
  // Device memory `pid` holds over every GPU (last sample): on a MIG-enabled GPU from its
  // instances' process lists when NVML gives them, else from the GPU's. 0 when no list names
  // it; nullopt when there is no list, or one names it without its memory.
  std::optional<uint64_t> ProcessDeviceMemory(int64_t pid) const;
  // Device-level XID errors (IsDeviceFatalXid) counted on the GPU that `gpu` names: an
  // index ("1"), a "GPU-..." UUID, or a "MIG-..." UUID (then only those of its GPU instance
  // and those NVML does not attribute to one); 0 when unknown. What restarts the workers
  // bound there; every critical XID is in the snapshot's counts.
  uint64_t DeviceFatalXids(std::string_view gpu) const;

 private:
  struct Handles;
  void Open();
  void SampleLoop();
  void EventLoop();
  // Logs `what` once per distinct text.
  void LogOnce(const std::string& what) PIER_REQUIRES(mutex_);

  const GpuTelemetryOptions options_;
  std::unique_ptr<nvml::Library> library_;
  std::string unavailable_reason_;
  std::unique_ptr<Handles> handles_;  // device handles, the event set (fixed after Open)

  mutable Mutex mutex_;
  GpuTelemetrySnapshot snapshot_ PIER_GUARDED_BY(mutex_);
  std::chrono::milliseconds period_ PIER_GUARDED_BY(mutex_);
  std::set<std::string> logged_ PIER_GUARDED_BY(mutex_);
  struct FatalXid {
    unsigned gpu = 0;
    unsigned gpu_instance_id = 0;
  };
  std::vector<FatalXid> fatal_xids_ PIER_GUARDED_BY(mutex_);
  bool stop_ PIER_GUARDED_BY(mutex_) = false;
  std::condition_variable wake_;
  std::thread sampler_;
  std::thread events_;
};

// XIDs that mean the device itself failed (ECC, NVLink, off the bus, GSP), as opposed to an
// application's fault: the ones that restart the workers bound to that GPU.
bool IsDeviceFatalXid(uint64_t xid);

// Appends the snapshot's metrics in Prometheus' text format: Pier's names (pier_gpu_*) and the
// DCGM exporter's names and units where one exists (DCGM_FI_DEV_GPU_UTIL in percent,
// DCGM_FI_DEV_FB_USED in MiB, ...), so dashboards made for the DCGM exporter work. Nothing
// when the snapshot is not available.
// `waiting_allocations`: per GPU index, allocations waiting on a reclaim in that GPU's memory
// governor, for pier_gpu_memory_pressure_index (used / total x waiting; GPUs not in the map: 0).
void RenderGpuMetrics(const GpuTelemetrySnapshot& snapshot,
                      const std::map<unsigned, uint64_t>& waiting_allocations, std::string* out);

}  // namespace pier::metrics
