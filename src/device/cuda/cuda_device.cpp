#include "device/cuda/cuda_device.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

namespace pier::cuda {
namespace {

// cudaMalloc aligns every allocation to at least this.
constexpr size_t kCudaMallocAlignment = 256;

PierCudaStream ToStream(Stream stream) { return reinterpret_cast<PierCudaStream>(stream.id); }
PierCudaEvent ToEvent(Event event) { return reinterpret_cast<PierCudaEvent>(event.id); }

bool IsPowerOfTwo(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

}  // namespace

Result<std::unique_ptr<CudaDevice>> CudaDevice::Open(const CudaPlugin& plugin, int index) {
  const PierCudaPluginApi& api = plugin.api();
  int32_t count = 0;
  PIER_RETURN_IF_ERROR(plugin.ToStatus(api.device_count(&count), "counting CUDA devices"));
  if (index < 0 || index >= count) {
    return InvalidArgumentError("CUDA device " + std::to_string(index) + " does not exist (" +
                                std::to_string(count) + " visible)");
  }
  PierCudaDeviceInfo info{};
  PIER_RETURN_IF_ERROR(plugin.ToStatus(api.device_info(index, &info),
                                       "reading CUDA device " + std::to_string(index)));
  std::string name = "cuda:" + std::to_string(index) + " (" + info.name + ")";
  return std::unique_ptr<CudaDevice>(new CudaDevice(plugin, index, std::move(name), info));
}

Result<std::unique_ptr<CudaDevice>> CudaDevice::Open(int index) {
  const CudaPlugin* plugin = GetCudaPlugin();
  if (plugin == nullptr) return UnavailableError(GetCudaStatus().reason);
  return Open(*plugin, index);
}

CudaDevice::CudaDevice(const CudaPlugin& plugin, int index, std::string name,
                       PierCudaDeviceInfo info)
    : Device(DeviceKind::kCuda, index, std::move(name)), plugin_(plugin), info_(info) {}

CudaDevice::~CudaDevice() {
  MutexLock lock(ranges_mutex_);
  for (auto& [id, state] : ranges_) {
    UnmapGranules(state, 0, state.granules.size()).IgnoreError();
    api().vm_release(index(), state.base, state.bytes);
  }
}

size_t CudaDevice::FreeBytes() const {
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;
  if (api().memory_info(index(), &free_bytes, &total_bytes) != PIER_CUDA_OK) return 0;
  return free_bytes;
}

Result<void*> CudaDevice::AllocateRaw(size_t bytes, size_t alignment) {
  if (bytes == 0) return InvalidArgumentError(name() + ": cannot allocate 0 bytes");
  if (!IsPowerOfTwo(alignment) || alignment > kCudaMallocAlignment) {
    return InvalidArgumentError(name() + ": alignment " + std::to_string(alignment) +
                                " must be a power of two no larger than 256");
  }
  void* ptr = nullptr;
  PIER_RETURN_IF_ERROR(
      plugin_.ToStatus(api().device_alloc(index(), bytes, &ptr),
                       name() + ": allocating " + std::to_string(bytes) + " bytes"));
  return ptr;
}

void CudaDevice::FreeRaw(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  const Status status = plugin_.ToStatus(api().device_free(index(), ptr), "cudaFree");
  if (!status.ok()) {
    // Nothing the caller can do; the memory is lost but the process goes on.
    std::fprintf(stderr, "pier: %s: freeing %zu bytes at %p failed: %s\n", name().c_str(), bytes,
                 ptr, status.ToString().c_str());
  }
}

Result<HostAllocation> CudaDevice::AllocatePinnedHost(size_t bytes) {
  if (bytes == 0) return InvalidArgumentError(name() + ": cannot allocate 0 pinned bytes");
  void* ptr = nullptr;
  const PierCudaResult result = api().host_alloc(bytes, &ptr);
  if (result == PIER_CUDA_OK) return HostAllocation{ptr, bytes, true};
  if (result != PIER_CUDA_ERROR_OUT_OF_MEMORY) {
    return plugin_.ToStatus(result, name() + ": cudaHostAlloc of " + std::to_string(bytes));
  }
  // Pinning refused (locked-memory limit): ordinary pages still work, only slower.
  ptr = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (ptr == nullptr) {
    return ResourceExhaustedError(name() + ": no host memory for " + std::to_string(bytes) +
                                  " staging bytes");
  }
  return HostAllocation{ptr, bytes, false};
}

void CudaDevice::FreePinnedHost(const HostAllocation& allocation) {
  if (allocation.ptr == nullptr) return;
  if (!allocation.locked) {
    std::free(allocation.ptr);
    return;
  }
  const Status status = plugin_.ToStatus(api().host_free(allocation.ptr), "cudaFreeHost");
  if (!status.ok()) {
    std::fprintf(stderr, "pier: %s: %s\n", name().c_str(), status.ToString().c_str());
  }
}

Result<VirtualRange> CudaDevice::ReserveAddressRange(size_t bytes) {
  if (!SupportsVirtualMemory()) return Device::ReserveAddressRange(bytes);
  const size_t granularity = VmGranularity();
  if (bytes == 0) return InvalidArgumentError(name() + ": cannot reserve 0 bytes");
  const size_t rounded = (bytes + granularity - 1) / granularity * granularity;
  void* base = nullptr;
  PIER_RETURN_IF_ERROR(plugin_.ToStatus(
      api().vm_reserve(index(), rounded, &base),
      name() + ": reserving " + std::to_string(rounded) + " bytes of address space"));
  MutexLock lock(ranges_mutex_);
  const uintptr_t id = next_range_id_++;
  RangeState& state = ranges_[id];
  state.base = base;
  state.bytes = rounded;
  state.granules.assign(rounded / granularity, 0);
  return VirtualRange{base, rounded, id};
}

Result<CudaDevice::RangeState*> CudaDevice::FindSpan(const VirtualRange& range, size_t offset,
                                                     size_t bytes) {
  auto it = ranges_.find(range.id);
  if (it == ranges_.end() || it->second.base != range.base) {
    return InvalidArgumentError(name() + ": unknown address range");
  }
  const size_t granularity = VmGranularity();
  RangeState& state = it->second;
  if (bytes == 0 || offset % granularity != 0 || bytes % granularity != 0 || offset > state.bytes ||
      bytes > state.bytes - offset) {
    return InvalidArgumentError(name() + ": span [" + std::to_string(offset) + ", +" +
                                std::to_string(bytes) + ") is not granularity-aligned (" +
                                std::to_string(granularity) + ") inside the " +
                                std::to_string(state.bytes) + "-byte range");
  }
  return &state;
}

Status CudaDevice::MapChunk(const VirtualRange& range, size_t offset, size_t bytes) {
  if (!SupportsVirtualMemory()) return Device::MapChunk(range, offset, bytes);
  MutexLock lock(ranges_mutex_);
  PIER_ASSIGN_OR_RETURN(RangeState * state, FindSpan(range, offset, bytes));
  const size_t granularity = VmGranularity();
  const size_t first = offset / granularity;
  const size_t last = first + bytes / granularity;
  for (size_t g = first; g < last; ++g) {
    if (state->granules[g] != 0) {
      return InvalidArgumentError(name() + ": offset " + std::to_string(g * granularity) +
                                  " of the range is already mapped");
    }
  }
  auto* base = static_cast<char*>(state->base);
  for (size_t g = first; g < last; ++g) {
    uint64_t handle = 0;
    const PierCudaResult result =
        api().vm_map(index(), base + g * granularity, granularity, &handle);
    if (result != PIER_CUDA_OK) {
      Status status = plugin_.ToStatus(
          result, name() + ": mapping " + std::to_string(bytes) + " bytes into an arena");
      UnmapGranules(*state, first, g).IgnoreError();  // all or nothing
      return status;
    }
    state->granules[g] = handle;
  }
  return Status::Ok();
}

Status CudaDevice::UnmapGranules(RangeState& state, size_t first, size_t last) {
  const size_t granularity = VmGranularity();
  auto* base = static_cast<char*>(state.base);
  for (size_t g = first; g < last; ++g) {
    if (state.granules[g] == 0) continue;
    PIER_RETURN_IF_ERROR(plugin_.ToStatus(
        api().vm_unmap(index(), base + g * granularity, granularity, state.granules[g]),
        name() + ": unmapping an arena chunk"));
    state.granules[g] = 0;
  }
  return Status::Ok();
}

Status CudaDevice::UnmapChunk(const VirtualRange& range, size_t offset, size_t bytes) {
  if (!SupportsVirtualMemory()) return Device::UnmapChunk(range, offset, bytes);
  MutexLock lock(ranges_mutex_);
  PIER_ASSIGN_OR_RETURN(RangeState * state, FindSpan(range, offset, bytes));
  const size_t granularity = VmGranularity();
  return UnmapGranules(*state, offset / granularity, (offset + bytes) / granularity);
}

void CudaDevice::ReleaseAddressRange(const VirtualRange& range) {
  MutexLock lock(ranges_mutex_);
  auto it = ranges_.find(range.id);
  if (it == ranges_.end() || it->second.base != range.base) return;
  RangeState& state = it->second;
  Status status = UnmapGranules(state, 0, state.granules.size());
  if (status.ok()) {
    status = plugin_.ToStatus(api().vm_release(index(), state.base, state.bytes),
                              name() + ": releasing an address range");
  }
  if (!status.ok()) std::fprintf(stderr, "pier: %s\n", status.ToString().c_str());
  ranges_.erase(it);
}

Result<Stream> CudaDevice::CreateStream() {
  PierCudaStream stream = nullptr;
  PIER_RETURN_IF_ERROR(
      plugin_.ToStatus(api().stream_create(index(), &stream), name() + ": creating a stream"));
  return Stream{reinterpret_cast<uintptr_t>(stream)};
}

void CudaDevice::DestroyStream(Stream stream) {
  if (stream.id == 0) return;
  api().stream_destroy(index(), ToStream(stream));
}

Status CudaDevice::Synchronize(Stream stream) {
  return plugin_.ToStatus(api().stream_synchronize(index(), ToStream(stream)),
                          name() + ": synchronizing a stream");
}

Result<Event> CudaDevice::CreateEvent() {
  PierCudaEvent event = nullptr;
  PIER_RETURN_IF_ERROR(
      plugin_.ToStatus(api().event_create(index(), &event), name() + ": creating an event"));
  return Event{reinterpret_cast<uintptr_t>(event)};
}

void CudaDevice::DestroyEvent(Event event) {
  if (event.id == 0) return;
  api().event_destroy(index(), ToEvent(event));
}

Status CudaDevice::RecordEvent(Event event, Stream stream) {
  return plugin_.ToStatus(api().event_record(index(), ToEvent(event), ToStream(stream)),
                          name() + ": recording an event");
}

Result<bool> CudaDevice::EventDone(Event event) {
  int32_t done = 0;
  PIER_RETURN_IF_ERROR(plugin_.ToStatus(api().event_query(index(), ToEvent(event), &done),
                                        name() + ": querying an event"));
  return done != 0;
}

Status CudaDevice::StreamWaitEvent(Stream stream, Event event) {
  return plugin_.ToStatus(api().stream_wait_event(index(), ToStream(stream), ToEvent(event)),
                          name() + ": making a stream wait for an event");
}

Status CudaDevice::SynchronizeEvent(Event event) {
  return plugin_.ToStatus(api().event_synchronize(index(), ToEvent(event)),
                          name() + ": waiting for an event");
}

Status CudaDevice::Copy(void* dst, const void* src, size_t bytes, Stream stream, const char* what) {
  return plugin_.ToStatus(api().memcpy_async(index(), dst, src, bytes, ToStream(stream)),
                          name() + ": " + what + " of " + std::to_string(bytes) + " bytes");
}

Status CudaDevice::CopyHostToDevice(void* device_dst, const void* host_src, size_t bytes,
                                    Stream stream) {
  return Copy(device_dst, host_src, bytes, stream, "host-to-device copy");
}

Status CudaDevice::CopyDeviceToHost(void* host_dst, const void* device_src, size_t bytes,
                                    Stream stream) {
  return Copy(host_dst, device_src, bytes, stream, "device-to-host copy");
}

Status CudaDevice::CopyDeviceToDevice(void* device_dst, const void* device_src, size_t bytes,
                                      Stream stream) {
  return Copy(device_dst, device_src, bytes, stream, "device-to-device copy");
}

Status CudaDevice::Memset(void* device_dst, uint8_t value, size_t bytes, Stream stream) {
  return plugin_.ToStatus(api().memset_async(index(), device_dst, value, bytes, ToStream(stream)),
                          name() + ": memset of " + std::to_string(bytes) + " bytes");
}

Result<float> CudaDevice::ElapsedMs(Event start, Event end) {
  float ms = 0;
  PIER_RETURN_IF_ERROR(
      plugin_.ToStatus(api().event_elapsed_ms(index(), ToEvent(start), ToEvent(end), &ms),
                       name() + ": timing events"));
  return ms;
}

Status CudaDevice::DequantizeQ4_1(const void* src, float* dst, uint64_t n_blocks, Stream stream) {
  return plugin_.ToStatus(api().dequantize_q4_1_f32(index(), src, dst, n_blocks, ToStream(stream)),
                          name() + ": dequantize Q4_1");
}

Status CudaDevice::QuantizeActivations(const float* x, int64_t n_tokens, int64_t n_cols, void* xq,
                                       Stream stream) {
  return plugin_.ToStatus(
      api().quantize_activations(index(), x, n_tokens, n_cols, xq, ToStream(stream)),
      name() + ": quantize activations");
}

Status CudaDevice::QuantMatMul(int32_t type, const void* weights, int64_t n_rows, int64_t n_cols,
                               const void* xq, int64_t n_tokens, float* y, int64_t ldy,
                               Stream stream) {
  return plugin_.ToStatus(api().quant_matmul(index(), type, weights, n_rows, n_cols, xq, n_tokens,
                                             y, ldy, ToStream(stream)),
                          name() + ": quantized matrix product");
}

Status CudaDevice::AddRmsNorm(float* x, const float* add, const float* weight, int64_t n_tokens,
                              int64_t n, float eps, float* y, void* xq, Stream stream) {
  return plugin_.ToStatus(
      api().add_rms_norm(index(), x, add, weight, n_tokens, n, eps, y, xq, ToStream(stream)),
      name() + ": RMS norm");
}

Status CudaDevice::SiluMul(const float* gate, const float* up, int64_t n_tokens, int64_t n,
                           float* h, void* xq, Stream stream) {
  return plugin_.ToStatus(api().silu_mul(index(), gate, up, n_tokens, n, h, xq, ToStream(stream)),
                          name() + ": SwiGLU");
}

Status CudaDevice::Rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                        int64_t n_rot, bool neox, const float* cos_sin, Stream stream) {
  return plugin_.ToStatus(api().rope(index(), x, n_tokens, n_heads, head_dim, n_rot, neox ? 1 : 0,
                                     cos_sin, ToStream(stream)),
                          name() + ": RoPE");
}

Status CudaDevice::EmbeddingRows(int32_t type, const void* table, int64_t n_vocab, int64_t n_cols,
                                 const int32_t* ids, int64_t n_tokens, float* out, Stream stream) {
  return plugin_.ToStatus(api().embedding_rows(index(), type, table, n_vocab, n_cols, ids, n_tokens,
                                               out, ToStream(stream)),
                          name() + ": embedding rows");
}

Status CudaDevice::Argmax(const float* logits, int64_t n_tokens, int64_t n_vocab, int64_t ld,
                          int32_t* out, Stream stream) {
  return plugin_.ToStatus(
      api().argmax(index(), logits, n_tokens, n_vocab, ld, out, ToStream(stream)),
      name() + ": argmax");
}

Status CudaDevice::PagedAttention(const PierCudaAttentionArgs& args, Stream stream) {
  return plugin_.ToStatus(api().paged_attention(index(), &args, ToStream(stream)),
                          name() + ": paged attention");
}

Status CudaDevice::KvWrite(const float* k, const float* v, int64_t n_tokens,
                           const int32_t* positions, const int32_t* table_offsets,
                           const int32_t* block_tables, void* kv_base,
                           const PierCudaKvGeometry& geometry, Stream stream) {
  return plugin_.ToStatus(api().kv_write(index(), k, v, n_tokens, positions, table_offsets,
                                         block_tables, kv_base, &geometry, ToStream(stream)),
                          name() + ": K/V write");
}

Status CudaDevice::QuantMatMulSlices(int32_t type, const PierCudaMatrixSlice* matrices,
                                     int32_t count, int64_t n_cols, const void* xq,
                                     int64_t n_tokens, Stream stream) {
  return plugin_.ToStatus(api().quant_matmul_slices(index(), type, matrices, count, n_cols, xq,
                                                    n_tokens, ToStream(stream)),
                          name() + ": quantized matrix products");
}

Status CudaDevice::RopeKvWrite(float* q, const float* k, const float* v, int64_t n_tokens,
                               int64_t n_head, int64_t n_rot, const float* cos_sin,
                               const int32_t* positions, const int32_t* table_offsets,
                               const int32_t* block_tables, void* kv_base,
                               const PierCudaKvGeometry& geometry, Stream stream) {
  return plugin_.ToStatus(
      api().rope_kv_write(index(), q, k, v, n_tokens, n_head, n_rot, cos_sin, positions,
                          table_offsets, block_tables, kv_base, &geometry, ToStream(stream)),
      name() + ": RoPE and K/V write");
}

Status CudaDevice::BeginCapture(Stream stream) {
  return plugin_.ToStatus(api().begin_capture(index(), ToStream(stream)),
                          name() + ": begin graph capture");
}

Result<PierCudaGraph> CudaDevice::EndCapture(Stream stream) {
  PierCudaGraph graph = nullptr;
  PIER_RETURN_IF_ERROR(plugin_.ToStatus(api().end_capture(index(), ToStream(stream), &graph),
                                        name() + ": end graph capture"));
  return graph;
}

Status CudaDevice::LaunchGraph(PierCudaGraph graph, Stream stream) {
  return plugin_.ToStatus(api().graph_launch(index(), graph, ToStream(stream)),
                          name() + ": graph launch");
}

void CudaDevice::DestroyGraph(PierCudaGraph graph) { (void)api().graph_destroy(index(), graph); }

Status CudaDevice::PackedMatMul(int32_t type, const void* packed, int64_t n_rows, int64_t n_cols,
                                const void* xq, int64_t n_tokens, float* y, int64_t ldy,
                                Stream stream) {
  return plugin_.ToStatus(api().packed_matmul(index(), type, packed, n_rows, n_cols, xq, n_tokens,
                                              y, ldy, ToStream(stream)),
                          name() + ": packed quantized matrix product");
}

Status CudaDevice::MmaMatMul(int32_t type, const void* weights, int64_t n_rows, int64_t n_cols,
                             const void* xq, int64_t n_tokens, float* y, int64_t ldy,
                             Stream stream) {
  return plugin_.ToStatus(api().mma_matmul(index(), type, weights, n_rows, n_cols, xq, n_tokens, y,
                                           ldy, ToStream(stream)),
                          name() + ": tensor-core quantized matrix product");
}

}  // namespace pier::cuda
