// DeviceSet: the devices this process serves on, each with its one MemoryGovernor: one budget
// per device, shared by every model placed there. Created once (by `pier serve`, `pier run`,
// a benchmark or a test) and borrowed by every model it loads; nothing below serving/ creates
// a device's governor, so two models on one device can never each believe they own all of it.
//
// The set holds the CPU device (capacity probed from the system and its cgroup, or given by
// `--device-memory`; budget `--memory-budget`), the pinned host pool KV swap space comes from
// (`--swap-space`), and the GPUs a model asked for (GovernorFor("cuda:N"), opened on first
// use through the CUDA plugin, each with a governor over its whole memory).
//
// Ownership: owns the devices and governors; the governors must outlive every model (and
// every block) charged to them. Thread-safety: the accessors are const after Create; the
// governors are thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "device/device.h"
#include "engine/scheduler/fair_share.h"
#include "memory/byte_size.h"
#include "memory/memory_governor.h"
#include "memory/pinned_host_pool.h"
#include "placement/placer.h"

namespace pier::serving {

struct DeviceSetOptions {
  BudgetSpec cpu_budget = BudgetSpec::Percent(100);  // `--memory-budget`
  std::optional<uint64_t> cpu_capacity;              // `--device-memory`; unset: probed
  // `--memory-reserve`: kept out of the budget, never handed to a model (headroom for what
  // the governor does not see: the process's own heap, the OS).
  uint64_t cpu_reserve_bytes = 0;
  // The pinned host pool's limit for KV swap space (`--swap-space`); 0: no swap space.
  uint64_t swap_space_bytes = 0;
  // `--topology`: place worker instances on the machine this hwloc XML file describes instead
  // of this one (to check a configuration for another machine; workers still bind here).
  std::string topology_xml;
  // Each GPU's budget (a worker process's is its grant); the whole GPU by default.
  BudgetSpec gpu_budget = BudgetSpec::Percent(100);
};

// A GPU (or MIG instance) that worker processes compute on, as the server process keeps it.
struct WorkerGpu {
  MemoryGovernor* governor = nullptr;  // where each worker's grant is charged
  std::string visible;                 // the worker's CUDA_VISIBLE_DEVICES: a UUID or index
  int index = -1;                      // the (parent) GPU, in PCI bus order
};

class DeviceSet {
 public:
  // The CPU device's probe errors; INVALID_ARGUMENT for a zero capacity or a budget above the
  // capacity (with "with --device-memory X" when the capacity was given).
  [[nodiscard]] static Result<std::unique_ptr<DeviceSet>> Create(const DeviceSetOptions& options);
  ~DeviceSet();
  DeviceSet(const DeviceSet&) = delete;
  DeviceSet& operator=(const DeviceSet&) = delete;

  Device& cpu() { return *cpu_; }
  MemoryGovernor& cpu_governor() { return *cpu_governor_; }
  const MemoryGovernor& cpu_governor() const { return *cpu_governor_; }
  // Host memory for preemption by swap: every model's swap slots come from here, up to
  // swap_space_bytes in all (not charged to a device budget: it is staging memory).
  PinnedHostPool& swap_pool() { return *swap_pool_; }
  // The device's fair-share ledger (engine/scheduler/fair_share.h), shared by the engines of
  // every model loaded in this process: tenants share the device across its models. (Worker
  // processes have their own device sets, so their models are shared within each worker.)
  const std::shared_ptr<engine::FairShareLedger>& fair_share_ledger() const {
    return fair_share_ledger_;
  }
  // The governor of `device`: "cpu", "cuda:N" (GPU N in PCI bus order) or a GPU's UUID
  // ("GPU-...", found through NVML), opened with its own governor at the first call (one
  // budget per device). INVALID_ARGUMENT for another name; UNSUPPORTED for a MIG UUID (only a
  // process's start can choose one); UNAVAILABLE with the reason (no plugin, no driver, no
  // such GPU) when the GPU cannot be used, so a model placed there fails to load with it
  // instead of silently running on the CPU.
  [[nodiscard]] Result<MemoryGovernor*> GovernorFor(std::string_view device);

  // The GPU `device` ("cuda:N", a GPU's UUID or a MIG instance's "MIG-...") as worker
  // processes use it: its governor here, which only accounts (ledger_device.h: the server
  // process opens no CUDA context there) unless this process already computes on that GPU,
  // sized from NVML; and what the worker sees it as. UNAVAILABLE when NVML cannot be read or
  // does not list it; FAILED_PRECONDITION for a whole GPU in MIG mode (name an instance);
  // INVALID_ARGUMENT for a name that is not a GPU's. After it, GovernorFor refuses that GPU
  // (FAILED_PRECONDITION): one budget cannot be kept both here and in the workers.
  [[nodiscard]] Result<WorkerGpu> WorkerGpuFor(std::string_view device);

  // Every device's governor: the CPU's, then each GPU and MIG instance opened or kept for
  // workers so far (for /admin/models). The pointers live as long as the set.
  std::vector<MemoryGovernor*> Governors();

  // Where worker instances are placed: the machine's topology (hwloc), read at the first call
  // (a worker's own device set never reads it). hwloc's error when it cannot be read.
  [[nodiscard]] Result<placement::Placer*> placer();

 private:
  DeviceSet() = default;

  std::string topology_xml_;
  Mutex placer_mutex_;
  std::unique_ptr<placement::Placer> placer_ PIER_GUARDED_BY(placer_mutex_);  // made lazily

  std::unique_ptr<Device> cpu_;
  // GPUs opened by GovernorFor, each with its governor (destroyed before its device).
  struct Gpu {
    std::unique_ptr<Device> device;
    std::unique_ptr<MemoryGovernor> governor;
  };
  Mutex gpus_mutex_;
  std::map<int, Gpu> gpus_ PIER_GUARDED_BY(gpus_mutex_);
  std::map<std::string, Gpu> migs_ PIER_GUARDED_BY(gpus_mutex_);  // by MIG UUID (ledgers)
  BudgetSpec gpu_budget_ = BudgetSpec::Percent(100);
  std::unique_ptr<MemoryGovernor> cpu_governor_;  // destroyed before the device
  std::unique_ptr<PinnedHostPool> swap_pool_;     // destroyed first
  std::shared_ptr<engine::FairShareLedger> fair_share_ledger_ =
      std::make_shared<engine::FairShareLedger>();
};

}  // namespace pier::serving
