#include "metrics/gpu_telemetry.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "metrics/nvml_library.h"

namespace pier::metrics {

using nvml::Return;

struct GpuTelemetry::Handles {
  struct Entry {
    nvml::Device device = nullptr;
    unsigned gpu = 0;
    int mig = -1;
    unsigned gpu_instance_id = 0;
    std::string uuid = {};
    std::string name = {};
  };
  std::vector<Entry> devices;  // whole GPUs, each followed by its MIG devices
  nvml::EventSet events = nullptr;
  bool events_registered = false;  // at least one GPU reports XIDs into `events`
  std::string driver_version;
};

namespace {

// A string reading (name, UUID); empty when the call is absent or refused.
std::string Text(Return (*fn)(nvml::Device, char*, unsigned), nvml::Device device) {
  if (fn == nullptr) return "";
  char buffer[nvml::kStringBuffer] = {};
  if (fn(device, buffer, sizeof buffer) != nvml::kSuccess) return "";
  return std::string(buffer, strnlen(buffer, sizeof buffer));
}

}  // namespace

GpuTelemetry::GpuTelemetry(GpuTelemetryOptions options)
    : options_(std::move(options)), period_(options_.min_period) {
  Open();
  if (!available()) {
    spdlog::info("GPU telemetry: {}; no GPU metrics", unavailable_reason_);
    return;
  }
  SampleNow();
  if (options_.start_threads) {
    sampler_ = std::thread([this] { SampleLoop(); });
    if (handles_->events_registered) events_ = std::thread([this] { EventLoop(); });
  }
}

GpuTelemetry::~GpuTelemetry() {
  {
    MutexLock lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (sampler_.joinable()) sampler_.join();
  if (events_.joinable()) events_.join();  // its wait times out within 500 ms
  if (library_ != nullptr) {
    const nvml::Api& api = library_->api();
    if (handles_ != nullptr && handles_->events != nullptr && api.event_set_free != nullptr) {
      api.event_set_free(handles_->events);
    }
    api.shutdown();
  }
}

void GpuTelemetry::Open() {
  Result<std::unique_ptr<nvml::Library>> lib = nvml::Library::Load(options_.library);
  if (!lib.ok()) {
    unavailable_reason_ = lib.status().message();
    return;
  }
  const nvml::Api& api = (*lib)->api();
  if (Return r = api.init(); r != nvml::kSuccess) {
    unavailable_reason_ = "NVML did not initialise (" + (*lib)->ErrorText(r) + ")";
    return;
  }
  unsigned count = 0;
  if (Return r = api.device_count(&count); r != nvml::kSuccess) {
    unavailable_reason_ = "NVML did not count the GPUs (" + (*lib)->ErrorText(r) + ")";
    api.shutdown();
    return;
  }
  handles_ = std::make_unique<Handles>();
  if (api.driver_version != nullptr) {
    char buffer[nvml::kStringBuffer] = {};
    if (api.driver_version(buffer, sizeof buffer) == nvml::kSuccess) {
      handles_->driver_version = std::string(buffer, strnlen(buffer, sizeof buffer));
    }
  }
  if (api.event_set_create != nullptr && api.register_events != nullptr &&
      api.event_set_wait != nullptr && api.event_set_create(&handles_->events) != nvml::kSuccess) {
    handles_->events = nullptr;
  }
  for (unsigned i = 0; i < count; ++i) {
    Handles::Entry gpu{.gpu = i};
    if (Return r = api.device_handle(i, &gpu.device); r != nvml::kSuccess) {
      spdlog::warn("GPU telemetry: GPU {} has no NVML handle ({}); its metrics are absent", i,
                   (*lib)->ErrorText(r));
      continue;
    }
    gpu.uuid = Text(api.uuid, gpu.device);
    gpu.name = Text(api.name, gpu.device);
    if (handles_->events != nullptr) {
      const Return r = api.register_events(gpu.device, nvml::kEventXid, handles_->events);
      if (r == nvml::kSuccess) {
        handles_->events_registered = true;
      } else if (r != nvml::kErrorNotSupported) {
        spdlog::warn("GPU telemetry: GPU {} does not report XID errors ({})", i,
                     (*lib)->ErrorText(r));
      }
    }
    const nvml::Device parent = gpu.device;
    handles_->devices.push_back(std::move(gpu));
    unsigned current = 0, pending = 0, max_mig = 0;
    if (api.mig_mode == nullptr || api.max_mig_devices == nullptr ||
        api.mig_device_handle == nullptr ||
        api.mig_mode(parent, &current, &pending) != nvml::kSuccess ||
        current != nvml::kMigEnabled || api.max_mig_devices(parent, &max_mig) != nvml::kSuccess) {
      continue;
    }
    for (unsigned m = 0; m < max_mig; ++m) {
      Handles::Entry mig{.gpu = i, .mig = static_cast<int>(m)};
      // Slots without an instance answer "Not Found".
      if (api.mig_device_handle(parent, m, &mig.device) != nvml::kSuccess) continue;
      mig.uuid = Text(api.uuid, mig.device);
      mig.name = Text(api.name, mig.device);
      if (api.gpu_instance_id != nullptr) api.gpu_instance_id(mig.device, &mig.gpu_instance_id);
      handles_->devices.push_back(std::move(mig));
    }
  }
  library_ = std::move(*lib);
  const size_t mig_instances =
      static_cast<size_t>(std::count_if(handles_->devices.begin(), handles_->devices.end(),
                                        [](const auto& d) { return d.mig >= 0; }));
  spdlog::info("GPU telemetry: NVML {} (driver {}), {} GPU(s), {} MIG instance(s)",
               library_->path(), handles_->driver_version, count, mig_instances);
}

void GpuTelemetry::LogOnce(const std::string& what) {
  if (logged_.insert(what).second) spdlog::warn("GPU telemetry: {}", what);
}

void GpuTelemetry::SampleNow() {
  if (!available()) return;
  const nvml::Api& api = library_->api();
  std::vector<GpuReading> readings;
  std::vector<std::string> refusals;
  uint64_t read_errors = 0;
  for (const Handles::Entry& d : handles_->devices) {
    GpuReading g{.gpu = d.gpu,
                 .mig = d.mig,
                 .gpu_instance_id = d.gpu_instance_id,
                 .uuid = d.uuid,
                 .name = d.name};
    // Runs one call; a refusal other than "Not Supported" is counted and logged once.
    auto ok = [&](const char* what, Return r) {
      if (r == nvml::kSuccess) return true;
      if (r != nvml::kErrorNotSupported) {
        ++read_errors;
        refusals.push_back(
            (d.mig < 0 ? "GPU " + std::to_string(d.gpu)
                       : "GPU " + std::to_string(d.gpu) + " MIG " + std::to_string(d.mig)) +
            ": " + what + ": " + library_->ErrorText(r));
      }
      return false;
    };
    nvml::Memory memory{};
    if (ok("memory", api.memory_info(d.device, &memory))) {
      g.memory_used_bytes = memory.used;
      g.memory_total_bytes = memory.total;
    }
    // A MIG instance answers for its memory and processes; the rest is the whole GPU's (and
    // NVML may refuse it on an instance with another code than Not Supported).
    const bool whole = d.mig < 0;
    nvml::Utilization util{};
    if (whole && api.utilization != nullptr &&
        ok("utilization", api.utilization(d.device, &util))) {
      g.utilization = std::min(util.gpu, 100u) / 100.0;
      g.memory_utilization = std::min(util.memory, 100u) / 100.0;
    }
    unsigned value = 0;
    if (whole && api.temperature != nullptr &&
        ok("temperature", api.temperature(d.device, nvml::kTemperatureGpu, &value))) {
      g.temperature_celsius = value;
    }
    if (whole && api.power_usage != nullptr && ok("power", api.power_usage(d.device, &value))) {
      g.power_watts = value / 1000.0;
    }
    if (whole && api.clock_info != nullptr) {
      if (ok("SM clock", api.clock_info(d.device, nvml::kClockSm, &value))) {
        g.sm_clock_hertz = value * 1e6;
      }
      if (ok("memory clock", api.clock_info(d.device, nvml::kClockMemory, &value))) {
        g.memory_clock_hertz = value * 1e6;
      }
    }
    if (whole && api.pcie_throughput != nullptr) {
      if (ok("PCIe TX", api.pcie_throughput(d.device, nvml::kPcieTxBytes, &value))) {
        g.pcie_tx_bytes_per_second = value * 1024.0;
      }
      if (ok("PCIe RX", api.pcie_throughput(d.device, nvml::kPcieRxBytes, &value))) {
        g.pcie_rx_bytes_per_second = value * 1024.0;
      }
    }
    unsigned long long ecc = 0;
    if (whole && api.total_ecc_errors != nullptr) {
      if (ok("ECC corrected",
             api.total_ecc_errors(d.device, nvml::kEccCorrected, nvml::kEccVolatile, &ecc))) {
        g.ecc_corrected = ecc;
      }
      if (ok("ECC uncorrected",
             api.total_ecc_errors(d.device, nvml::kEccUncorrected, nvml::kEccVolatile, &ecc))) {
        g.ecc_uncorrected = ecc;
      }
    }
    if (api.compute_processes != nullptr) {
      std::vector<nvml::ProcessInfo> infos(16);
      Return r = nvml::kErrorInsufficientSize;
      unsigned n = 0;
      for (int attempt = 0; attempt < 3 && r == nvml::kErrorInsufficientSize; ++attempt) {
        n = static_cast<unsigned>(infos.size());
        r = api.compute_processes(d.device, &n, infos.data());
        if (r == nvml::kErrorInsufficientSize)
          infos.resize(std::max<size_t>(n + 8, infos.size() * 2));
      }
      if (ok("processes", r)) {
        std::vector<GpuProcessMemory> processes;
        for (unsigned i = 0; i < std::min<size_t>(n, infos.size()); ++i) {
          // NVML_VALUE_NOT_AVAILABLE (all ones): the driver does not know (MIG, no rights).
          const bool known = infos[i].used_gpu_memory != ULLONG_MAX;
          processes.push_back(
              {.pid = infos[i].pid, .bytes = known ? infos[i].used_gpu_memory : 0, .known = known});
        }
        g.processes = std::move(processes);
      }
    }
    readings.push_back(std::move(g));
  }
  // The period follows the busiest whole GPU.
  double load = 0;
  for (const GpuReading& g : readings) {
    if (g.mig < 0 && g.utilization.has_value()) load = std::max(load, *g.utilization);
  }
  const auto span = options_.max_period - options_.min_period;
  const auto period =
      options_.min_period +
      std::chrono::milliseconds(static_cast<int64_t>(static_cast<double>(span.count()) * load));
  MutexLock lock(mutex_);
  for (const std::string& r : refusals) LogOnce(r);
  snapshot_.available = true;
  snapshot_.driver_version = handles_->driver_version;
  snapshot_.gpus = std::move(readings);
  snapshot_.samples += 1;
  snapshot_.read_errors += read_errors;
  period_ = std::max(period, std::chrono::milliseconds(1));
  snapshot_.period_seconds = static_cast<double>(period_.count()) / 1000.0;
}

bool GpuTelemetry::PollEvents(std::chrono::milliseconds timeout) {
  if (!available() || handles_->events == nullptr) return false;
  const nvml::Api& api = library_->api();
  nvml::EventData data{};
  const Return r = api.event_set_wait(handles_->events, &data,
                                      static_cast<unsigned>(std::max<int64_t>(0, timeout.count())));
  if (r == nvml::kErrorTimeout) return false;
  MutexLock lock(mutex_);
  if (r != nvml::kSuccess) {
    LogOnce("waiting for XID events: " + library_->ErrorText(r));
    // An error answers at once: wait out the timeout here, or the event thread would spin.
    lock.WaitFor(wake_, timeout, [this] {
      mutex_.AssertHeld();
      return stop_;
    });
    return false;
  }
  if ((data.event_type & nvml::kEventXid) == 0) return false;
  std::optional<unsigned> gpu;
  for (const Handles::Entry& d : handles_->devices) {
    if (d.device == data.device) gpu = d.gpu;
  }
  if (!gpu.has_value()) return false;
  snapshot_.xid_errors[{*gpu, data.event_data}] += 1;
  snapshot_.last_xid[*gpu] = data.event_data;
  if (IsDeviceFatalXid(data.event_data)) {
    fatal_xids_.push_back({.gpu = *gpu, .gpu_instance_id = data.gpu_instance_id});
  }
  spdlog::error("GPU telemetry: GPU {} reported XID {}", *gpu, data.event_data);
  return true;
}

void GpuTelemetry::SampleLoop() {
  MutexLock lock(mutex_);
  while (!stop_) {
    const auto wait = period_;
    lock.WaitFor(wake_, wait, [this] {
      mutex_.AssertHeld();
      return stop_;
    });
    if (stop_) break;
    lock.Unlock();
    SampleNow();
    lock.Lock();
  }
}

void GpuTelemetry::EventLoop() {
  while (true) {
    {
      MutexLock lock(mutex_);
      if (stop_) return;
    }
    PollEvents(std::chrono::milliseconds(500));
  }
}

GpuTelemetrySnapshot GpuTelemetry::Snapshot() const {
  MutexLock lock(mutex_);
  return snapshot_;
}

std::chrono::milliseconds GpuTelemetry::period() const {
  MutexLock lock(mutex_);
  return period_;
}

std::optional<uint64_t> GpuTelemetry::ProcessDeviceMemory(int64_t pid) const {
  MutexLock lock(mutex_);
  // Per physical GPU, the instances' lists when any has one (a MIG-enabled GPU answers per
  // instance without special rights), else the GPU's own: never both, so nothing counts twice.
  std::set<unsigned> from_instances;
  for (const GpuReading& g : snapshot_.gpus) {
    if (g.mig >= 0 && g.processes.has_value()) from_instances.insert(g.gpu);
  }
  std::optional<uint64_t> total;
  for (const GpuReading& g : snapshot_.gpus) {
    if (!g.processes.has_value() || (g.mig >= 0) != from_instances.contains(g.gpu)) continue;
    if (!total.has_value()) total = 0;
    for (const GpuProcessMemory& p : *g.processes) {
      if (p.pid != pid) continue;
      if (!p.known) return std::nullopt;
      *total += p.bytes;
    }
  }
  return total;
}

bool IsDeviceFatalXid(uint64_t xid) {
  // The XIDs NVIDIA's guide attributes to the device rather than to one application: double-
  // bit and uncontained ECC errors, row-remapping events, NVLink, the GPU falling off the
  // bus, a high single-bit rate, GSP failures. Application faults (13, 31, 43, 45, 68, ...)
  // any process on the GPU can cause; they are counted, not acted on.
  switch (xid) {
    case 48:   // double-bit ECC error
    case 63:   // ECC page retirement / row remapping recorded
    case 64:   // ... failed
    case 74:   // NVLink error
    case 79:   // GPU has fallen off the bus
    case 92:   // high single-bit ECC error rate
    case 94:   // contained ECC error
    case 95:   // uncontained ECC error
    case 119:  // GSP RPC timeout
    case 120:  // GSP error
    case 140:  // unrecovered ECC error
      return true;
    default:
      return false;
  }
}

uint64_t GpuTelemetry::DeviceFatalXids(std::string_view gpu) const {
  MutexLock lock(mutex_);
  std::optional<unsigned> index;
  std::optional<unsigned> instance;  // a MIG binding: only its GPU instance's, or device-wide
  for (const GpuReading& g : snapshot_.gpus) {
    if (g.uuid == gpu || (g.mig < 0 && std::to_string(g.gpu) == gpu)) {
      index = g.gpu;
      if (g.mig >= 0) instance = g.gpu_instance_id;
    }
  }
  if (!index.has_value()) return 0;
  constexpr unsigned kWholeDevice = 0xFFFFFFFFu;  // NVML's "not attributed to an instance"
  uint64_t count = 0;
  for (const FatalXid& x : fatal_xids_) {
    if (x.gpu != *index) continue;
    if (instance.has_value() && x.gpu_instance_id != *instance &&
        x.gpu_instance_id != kWholeDevice) {
      continue;
    }
    ++count;
  }
  return count;
}

}  // namespace pier::metrics
