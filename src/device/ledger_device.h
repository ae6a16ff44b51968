// LedgerDevice: a GPU that this process keeps the books for but never touches. The server
// process (`pier serve`) runs GPU models in worker processes; each worker opens the GPU and
// allocates there under its own governor, while the server's governor for that GPU only
// accounts: it charges each worker's grant (ChargeExternal) and mirrors its elastic KV lease
// (accounting-only), so one budget still covers every model on the GPU and admission refuses
// a model that would not fit before a worker is started. The server process holds no CUDA
// context on such a GPU (no memory taken there, and a GPU fault cannot reach it).
//
// Its capacity is what NVML reports for the GPU or MIG instance. Every call that would touch
// memory or queue work is refused with UNSUPPORTED, naming the device.
//
// Thread-safety: immutable after construction.
#pragma once

#include <cstdint>
#include <string>

#include "device/device.h"

namespace pier {

class LedgerDevice final : public Device {
 public:
  // `name`: e.g. "cuda:0 (NVIDIA H200)"; `index` as the GPU's.
  LedgerDevice(int index, std::string name, uint64_t total_bytes);

  size_t TotalBytes() const override { return total_bytes_; }
  size_t FreeBytes() const override { return total_bytes_; }
  [[nodiscard]] Result<void*> AllocateRaw(size_t bytes, size_t alignment) override;
  void FreeRaw(void* ptr, size_t bytes) override;
  [[nodiscard]] Result<HostAllocation> AllocatePinnedHost(size_t bytes) override;
  void FreePinnedHost(const HostAllocation& allocation) override;
  [[nodiscard]] Result<Stream> CreateStream() override;
  void DestroyStream(Stream stream) override;
  [[nodiscard]] Status Synchronize(Stream stream) override;
  [[nodiscard]] Result<Event> CreateEvent() override;
  void DestroyEvent(Event event) override;
  [[nodiscard]] Status RecordEvent(Event event, Stream stream) override;
  [[nodiscard]] Result<bool> EventDone(Event event) override;
  [[nodiscard]] Status StreamWaitEvent(Stream stream, Event event) override;
  [[nodiscard]] Status SynchronizeEvent(Event event) override;
  [[nodiscard]] Status CopyHostToDevice(void* device_dst, const void* host_src, size_t bytes,
                                        Stream stream) override;
  [[nodiscard]] Status CopyDeviceToHost(void* host_dst, const void* device_src, size_t bytes,
                                        Stream stream) override;
  [[nodiscard]] Status CopyDeviceToDevice(void* device_dst, const void* device_src, size_t bytes,
                                          Stream stream) override;
  [[nodiscard]] Status Memset(void* device_dst, uint8_t value, size_t bytes,
                              Stream stream) override;

 private:
  Status Refuse(const char* what) const;

  const uint64_t total_bytes_;
};

}  // namespace pier
