#include "device/device.h"

namespace pier {

std::string_view DeviceKindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu:
      return "cpu";
    case DeviceKind::kCuda:
      return "cuda";
    case DeviceKind::kFake:
      return "fake";
    case DeviceKind::kLedger:
      return "ledger";
  }
  return "unknown";
}

namespace {
Status NoVirtualMemory(const Device& device) {
  return UnsupportedError("device " + device.name() +
                          " does not support virtual-memory arenas; grow by segments instead");
}
}  // namespace

Result<VirtualRange> Device::ReserveAddressRange(size_t /*bytes*/) {
  return NoVirtualMemory(*this);
}

Status Device::MapChunk(const VirtualRange& /*range*/, size_t /*offset*/, size_t /*bytes*/) {
  return NoVirtualMemory(*this);
}

Status Device::UnmapChunk(const VirtualRange& /*range*/, size_t /*offset*/, size_t /*bytes*/) {
  return NoVirtualMemory(*this);
}

void Device::ReleaseAddressRange(const VirtualRange& /*range*/) {}

}  // namespace pier
