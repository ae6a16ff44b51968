// A stand-in libnvidia-ml.so.1 for the GPU telemetry tests: the NVML entry points Pier uses,
// answering from a script file (named by $PIER_FAKE_NVML_SCRIPT, read again at every call so
// a test can change the values between samples), so Pier loads it
// through the same dlopen path as NVIDIA's library. Built twice: the full one, and with
// FAKE_NVML_OLD an "old" one that lacks the _v2 entry points.
//
// Script lines, "key=value" ('#' starts a comment):
//   init=error:9                  nvmlInit_v2's answer (default success)
//   driver=550.54.15
//   devices=2
//   gpu0.name=... gpu0.uuid=GPU-... gpu0.util=35 gpu0.mem_util=10
//   gpu0.mem_total=BYTES gpu0.mem_used=BYTES gpu0.temperature=51 gpu0.power_mw=250000
//   gpu0.sm_clock=1980 gpu0.mem_clock=2619 gpu0.pcie_tx=1000 gpu0.pcie_rx=2000 (KB/s)
//   gpu0.ecc_corrected=3 gpu0.ecc_uncorrected=0
//   gpu0.processes=PID:BYTES,PID:BYTES
//   gpu0.xids=79,48@3             XID events (@: the GPU instance), each delivered once by
//                                 nvmlEventSetWait_v2
//   gpu1.mig_devices=2 gpu1.mig0.uuid=MIG-... gpu1.mig0.gi=3 gpu1.mig0.mem_total=...
// A value "error:N" makes that call return N; a key left out answers 3 (Not Supported).
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

using Return = int;
constexpr Return kSuccess = 0, kInvalidArgument = 2, kNotSupported = 3, kNotFound = 6,
                 kInsufficientSize = 7, kTimeout = 10;

struct Memory {
  unsigned long long total, free, used;
};
struct Utilization {
  unsigned gpu, memory;
};
struct ProcessInfo {
  unsigned pid;
  unsigned long long used;
  unsigned gi, ci;
};
struct EventData {
  void* device;
  unsigned long long type, data;
  unsigned gi, ci;
};

// Device handles are addresses of these; the key prefix says which script entries they read.
struct Handle {
  std::string prefix;  // "gpu0." or "gpu1.mig0."
};

std::mutex mu;
std::map<std::string, std::string> script;
std::map<std::string, Handle> handles;
std::map<std::string, size_t> xids_delivered;  // per GPU prefix

void Load() {
  script.clear();
  const char* path = std::getenv("PIER_FAKE_NVML_SCRIPT");
  if (path == nullptr) return;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    auto trim = [](std::string s) {
      const auto b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
      return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
    };
    script[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
}

// The script's answer for `key`: kSuccess with `value`, the scripted error, or Not Supported.
Return Get(const std::string& key, std::string* value) {
  Load();
  auto it = script.find(key);
  if (it == script.end()) return kNotSupported;
  if (it->second.rfind("error:", 0) == 0) return std::atoi(it->second.c_str() + 6);
  *value = it->second;
  return kSuccess;
}
template <typename T>
Return GetNumber(const std::string& key, T* out) {
  std::string v;
  Return r = Get(key, &v);
  if (r == kSuccess) *out = static_cast<T>(std::strtoull(v.c_str(), nullptr, 10));
  return r;
}
const Handle* Of(void* device) { return static_cast<const Handle*>(device); }
Handle* HandleFor(const std::string& prefix) {
  Handle& h = handles[prefix];
  h.prefix = prefix;
  return &h;
}
Return CopyText(const std::string& key, char* out, unsigned length) {
  std::string v;
  Return r = Get(key, &v);
  if (r != kSuccess) return r;
  if (v.size() + 1 > length) return kInsufficientSize;
  std::memcpy(out, v.c_str(), v.size() + 1);
  return kSuccess;
}

}  // namespace

extern "C" {

#ifndef FAKE_NVML_OLD
Return nvmlInit_v2() {
  std::lock_guard lock(mu);
  Load();
  std::string v;
  return Get("init", &v) == kNotSupported ? kSuccess : Get("init", &v);
}
Return nvmlDeviceGetCount_v2(unsigned* count) {
  std::lock_guard lock(mu);
  Load();
  return GetNumber("devices", count);
}
Return nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  std::lock_guard lock(mu);
  unsigned count = 0;
  if (GetNumber("devices", &count) != kSuccess || index >= count) return kInvalidArgument;
  std::string v;
  const std::string prefix = "gpu" + std::to_string(index) + ".";
  if (Get(prefix + "handle", &v) != kNotSupported) return Get(prefix + "handle", &v);
  *device = HandleFor(prefix);
  return kSuccess;
}
#else
Return nvmlInit() { return kSuccess; }
#endif
Return nvmlShutdown() { return kSuccess; }
const char* nvmlErrorString(Return r) {
  switch (r) {
    case kNotSupported:
      return "Not Supported";
    case kNotFound:
      return "Not Found";
    case 9:
      return "Driver Not Loaded";
    case 15:
      return "GPU is lost";
    case 999:
      return "Unknown Error";
    default:
      return "Fake NVML error";
  }
}
Return nvmlSystemGetDriverVersion(char* out, unsigned length) {
  std::lock_guard lock(mu);
  return CopyText("driver", out, length);
}
Return nvmlDeviceGetName(void* d, char* out, unsigned length) {
  std::lock_guard lock(mu);
  return CopyText(Of(d)->prefix + "name", out, length);
}
Return nvmlDeviceGetUUID(void* d, char* out, unsigned length) {
  std::lock_guard lock(mu);
  return CopyText(Of(d)->prefix + "uuid", out, length);
}
Return nvmlDeviceGetMemoryInfo(void* d, Memory* m) {
  std::lock_guard lock(mu);
  const std::string& p = Of(d)->prefix;
  unsigned long long total = 0, used = 0;
  if (Return r = GetNumber(p + "mem_total", &total); r != kSuccess) return r;
  if (Return r = GetNumber(p + "mem_used", &used); r != kSuccess) return r;
  *m = {total, total - used, used};
  return kSuccess;
}
Return nvmlDeviceGetUtilizationRates(void* d, Utilization* u) {
  std::lock_guard lock(mu);
  const std::string& p = Of(d)->prefix;
  *u = {};
  if (Return r = GetNumber(p + "util", &u->gpu); r != kSuccess) return r;
  GetNumber(p + "mem_util", &u->memory);
  return kSuccess;
}
Return nvmlDeviceGetTemperature(void* d, int sensor, unsigned* value) {
  std::lock_guard lock(mu);
  if (sensor != 0) return kInvalidArgument;
  return GetNumber(Of(d)->prefix + "temperature", value);
}
Return nvmlDeviceGetPowerUsage(void* d, unsigned* value) {
  std::lock_guard lock(mu);
  return GetNumber(Of(d)->prefix + "power_mw", value);
}
Return nvmlDeviceGetClockInfo(void* d, int type, unsigned* value) {
  std::lock_guard lock(mu);
  if (type != 1 && type != 2) return kInvalidArgument;
  return GetNumber(Of(d)->prefix + (type == 1 ? "sm_clock" : "mem_clock"), value);
}
Return nvmlDeviceGetPcieThroughput(void* d, int counter, unsigned* value) {
  std::lock_guard lock(mu);
  if (counter != 0 && counter != 1) return kInvalidArgument;
  return GetNumber(Of(d)->prefix + (counter == 0 ? "pcie_tx" : "pcie_rx"), value);
}
Return nvmlDeviceGetTotalEccErrors(void* d, int type, int counter, unsigned long long* value) {
  std::lock_guard lock(mu);
  if (counter != 0 || (type != 0 && type != 1)) return kInvalidArgument;
  return GetNumber(Of(d)->prefix + (type == 0 ? "ecc_corrected" : "ecc_uncorrected"), value);
}
Return nvmlDeviceGetComputeRunningProcesses_v3(void* d, unsigned* count, ProcessInfo* infos) {
  std::lock_guard lock(mu);
  std::string v;
  if (Return r = Get(Of(d)->prefix + "processes", &v); r != kSuccess) return r;
  std::vector<ProcessInfo> list;
  for (size_t pos = 0; pos < v.size();) {
    size_t comma = v.find(',', pos);
    if (comma == std::string::npos) comma = v.size();
    const std::string item = v.substr(pos, comma - pos);
    const auto colon = item.find(':');
    if (colon != std::string::npos) {
      list.push_back({static_cast<unsigned>(std::strtoul(item.c_str(), nullptr, 10)),
                      std::strtoull(item.c_str() + colon + 1, nullptr, 10), 0, 0});
    }
    pos = comma + 1;
  }
  const unsigned room = *count;
  *count = static_cast<unsigned>(list.size());
  if (list.size() > room) return kInsufficientSize;
  for (size_t i = 0; i < list.size(); ++i) infos[i] = list[i];
  return kSuccess;
}
Return nvmlDeviceGetMigMode(void* d, unsigned* current, unsigned* pending) {
  std::lock_guard lock(mu);
  unsigned n = 0;
  if (GetNumber(Of(d)->prefix + "mig_devices", &n) != kSuccess) return kNotSupported;
  *current = *pending = 1;
  return kSuccess;
}
Return nvmlDeviceGetMaxMigDeviceCount(void* d, unsigned* count) {
  std::lock_guard lock(mu);
  unsigned n = 0;
  if (Return r = GetNumber(Of(d)->prefix + "mig_devices", &n); r != kSuccess) return r;
  *count = n + 1;  // one empty slot answers Not Found, as on a partly partitioned GPU
  return kSuccess;
}
Return nvmlDeviceGetMigDeviceHandleByIndex(void* d, unsigned index, void** mig) {
  std::lock_guard lock(mu);
  unsigned n = 0;
  GetNumber(Of(d)->prefix + "mig_devices", &n);
  if (index >= n) return kNotFound;
  *mig = HandleFor(Of(d)->prefix + "mig" + std::to_string(index) + ".");
  return kSuccess;
}
Return nvmlDeviceGetGpuInstanceId(void* d, unsigned* id) {
  std::lock_guard lock(mu);
  return GetNumber(Of(d)->prefix + "gi", id);
}
Return nvmlEventSetCreate(void** set) {
  *set = &handles;  // any non-null address
  return kSuccess;
}
Return nvmlDeviceRegisterEvents(void*, unsigned long long types, void*) {
  return (types & 0x8) != 0 ? kSuccess : kNotSupported;
}
// Delivers the next undelivered scripted XID of any GPU, or waits `timeout` ms (at most 50,
// so tests stay fast) and answers Timeout.
Return nvmlEventSetWait_v2(void*, EventData* data, unsigned timeout) {
  {
    std::lock_guard lock(mu);
    Load();
    for (auto& [prefix, handle] : handles) {
      if (prefix.find(".mig") != std::string::npos) continue;
      std::string v;
      if (Get(prefix + "xids", &v) != kSuccess) continue;
      // "79" (not attributed to a GPU instance) or "79@3" (GPU instance 3).
      std::vector<std::pair<unsigned long long, unsigned>> xids;
      for (size_t pos = 0; pos < v.size();) {
        size_t comma = v.find(',', pos);
        if (comma == std::string::npos) comma = v.size();
        const std::string item = v.substr(pos, comma - pos);
        const auto at = item.find('@');
        xids.emplace_back(std::strtoull(item.c_str(), nullptr, 10),
                          at == std::string::npos ? 0xFFFFFFFFu
                                                  : static_cast<unsigned>(std::strtoul(
                                                        item.c_str() + at + 1, nullptr, 10)));
        pos = comma + 1;
      }
      size_t& delivered = xids_delivered[prefix];
      if (delivered < xids.size()) {
        const auto [xid, gi] = xids[delivered++];
        *data = {&handle, 0x8, xid, gi, 0};
        return kSuccess;
      }
    }
  }
  usleep(std::min(timeout, 50u) * 1000);
  return kTimeout;
}
Return nvmlEventSetFree(void*) { return kSuccess; }

}  // extern "C"
