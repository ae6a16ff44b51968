#include "device/ledger_device.h"

#include "common/check.h"

namespace pier {

LedgerDevice::LedgerDevice(int index, std::string name, uint64_t total_bytes)
    : Device(DeviceKind::kLedger, index, std::move(name)), total_bytes_(total_bytes) {}

Status LedgerDevice::Refuse(const char* what) const {
  return UnsupportedError(std::string(what) + " on " + name() +
                          ": this process only accounts for the GPU; its models run in worker "
                          "processes");
}

Result<void*> LedgerDevice::AllocateRaw(size_t, size_t) { return Refuse("allocating"); }
// Nothing was ever handed out, so nothing can come back.
void LedgerDevice::FreeRaw(void*, size_t) {
  PIER_CHECK(false, "FreeRaw on a ledger device: it hands nothing out");
}
Result<HostAllocation> LedgerDevice::AllocatePinnedHost(size_t) {
  return Refuse("allocating pinned memory");
}
void LedgerDevice::FreePinnedHost(const HostAllocation&) {
  PIER_CHECK(false, "FreePinnedHost on a ledger device: it hands nothing out");
}
Result<Stream> LedgerDevice::CreateStream() { return Refuse("creating a stream"); }
void LedgerDevice::DestroyStream(Stream) {}
Status LedgerDevice::Synchronize(Stream) { return Status::Ok(); }  // no work is ever queued
Result<Event> LedgerDevice::CreateEvent() { return Refuse("creating an event"); }
void LedgerDevice::DestroyEvent(Event) {}
Status LedgerDevice::RecordEvent(Event, Stream) { return Refuse("recording an event"); }
Result<bool> LedgerDevice::EventDone(Event) { return true; }
Status LedgerDevice::StreamWaitEvent(Stream, Event) { return Refuse("waiting on an event"); }
Status LedgerDevice::SynchronizeEvent(Event) { return Status::Ok(); }
Status LedgerDevice::CopyHostToDevice(void*, const void*, size_t, Stream) {
  return Refuse("copying");
}
Status LedgerDevice::CopyDeviceToHost(void*, const void*, size_t, Stream) {
  return Refuse("copying");
}
Status LedgerDevice::CopyDeviceToDevice(void*, const void*, size_t, Stream) {
  return Refuse("copying");
}
Status LedgerDevice::Memset(void*, uint8_t, size_t, Stream) { return Refuse("setting memory"); }

}  // namespace pier
