// NvmlLibrary: NVIDIA's management library (NVML), loaded at run time with
// dlopen("libnvidia-ml.so.1"). Nothing links it: a machine without NVIDIA's driver runs Pier
// as well, and only the GPU metrics are missing.
//
// The declarations below are written for Pier from NVML's documented C API (nvml.h is not
// needed to build): opaque handles, the few structs Pier reads (laid out as the API defines
// them), return codes and enum values, and one function pointer per entry point. Entry points
// Pier needs to work at all (init, count, handles, memory) are required: a library without
// them is "too old" and Load refuses it. The others are optional: a null pointer means this
// driver lacks that call, and the readings it gives are absent.
//
// Thread-safety: NVML itself is thread-safe; the table is immutable after Load.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace pier::metrics::nvml {

using Return = int;  // nvmlReturn_t
using Device = struct DeviceOpaque*;
using EventSet = struct EventSetOpaque*;

// nvmlReturn_t values Pier tells apart.
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorTimeout = 10;
inline constexpr Return kErrorGpuIsLost = 15;

// Enum values of the calls' arguments.
inline constexpr int kTemperatureGpu = 0;      // nvmlTemperatureSensors_t
inline constexpr int kClockSm = 1;             // nvmlClockType_t
inline constexpr int kClockMemory = 2;         //
inline constexpr int kPcieTxBytes = 0;         // nvmlPcieUtilCounter_t (KB/s)
inline constexpr int kPcieRxBytes = 1;         //
inline constexpr int kEccCorrected = 0;        // nvmlMemoryErrorType_t
inline constexpr int kEccUncorrected = 1;      //
inline constexpr int kEccVolatile = 0;         // nvmlEccCounterType_t: since the driver loaded
inline constexpr int kMigEnabled = 1;          // nvmlDeviceGetMigMode's current mode
inline constexpr uint64_t kEventXid = 0x8;     // nvmlEventTypeXidCriticalError
inline constexpr unsigned kStringBuffer = 96;  // NVML_DEVICE_{NAME,UUID}_V2_BUFFER_SIZE

struct Utilization {  // nvmlUtilization_t (percent over the driver's last sample period)
  unsigned gpu;
  unsigned memory;
};
struct Memory {  // nvmlMemory_t (bytes)
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct ProcessInfo {  // nvmlProcessInfo_t (v2 and v3 layout)
  unsigned pid;
  unsigned long long used_gpu_memory;
  unsigned gpu_instance_id;
  unsigned compute_instance_id;
};
struct EventData {  // nvmlEventData_t
  Device device;
  unsigned long long event_type;
  unsigned long long event_data;  // the XID number for kEventXid
  unsigned gpu_instance_id;
  unsigned compute_instance_id;
};

struct Api {
  // Required.
  Return (*init)();
  Return (*shutdown)();
  const char* (*error_string)(Return);
  Return (*device_count)(unsigned*);
  Return (*device_handle)(unsigned, Device*);
  Return (*memory_info)(Device, Memory*);
  // Optional (null when the driver lacks them).
  Return (*driver_version)(char*, unsigned);
  Return (*name)(Device, char*, unsigned);
  Return (*uuid)(Device, char*, unsigned);
  Return (*utilization)(Device, Utilization*);
  Return (*temperature)(Device, int, unsigned*);
  Return (*power_usage)(Device, unsigned*);           // milliwatts
  Return (*clock_info)(Device, int, unsigned*);       // MHz
  Return (*pcie_throughput)(Device, int, unsigned*);  // KB/s
  Return (*total_ecc_errors)(Device, int, int, unsigned long long*);
  Return (*compute_processes)(Device, unsigned*, ProcessInfo*);  // _v3
  Return (*mig_mode)(Device, unsigned*, unsigned*);
  Return (*max_mig_devices)(Device, unsigned*);
  Return (*mig_device_handle)(Device, unsigned, Device*);
  Return (*gpu_instance_id)(Device, unsigned*);
  Return (*event_set_create)(EventSet*);
  Return (*register_events)(Device, unsigned long long, EventSet);
  Return (*event_set_wait)(EventSet, EventData*, unsigned);  // _v2; timeout in ms
  Return (*event_set_free)(EventSet);
};

class Library {
 public:
  // dlopen(`soname`) and resolve the entry points. kNotFound when it cannot be opened (no
  // NVIDIA driver), kFailedPrecondition naming the first missing required entry point ("too
  // old"). The library is not initialised: call api().init().
  [[nodiscard]] static Result<std::unique_ptr<Library>> Load(const std::string& soname);
  ~Library();  // dlclose
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  const Api& api() const { return api_; }
  // NVML's text for `code` ("Not Supported"), or "NVML error N" without error_string.
  std::string ErrorText(Return code) const;
  const std::string& path() const { return path_; }

 private:
  Library() = default;
  void* handle_ = nullptr;
  Api api_{};
  std::string path_;
};

}  // namespace pier::metrics::nvml
