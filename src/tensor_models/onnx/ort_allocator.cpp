#include "tensor_models/onnx/ort_allocator.h"

#include <onnxruntime_c_api.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <new>
#include <unordered_map>
#include <utility>

#include "common/mutex.h"
#include "tensor_models/onnx/ort_library.h"

namespace pier::tensor_models {
namespace {

thread_local OrtChargeScope* current_scope = nullptr;

constexpr size_t kHeapAlignment = 64;

}  // namespace

struct OrtChargingAllocator::Impl {
  // First member: ONNX Runtime hands this pointer back as `this_`.
  OrtAllocator base{};
  OrtChargingAllocator* owner = nullptr;
  OrtMemoryInfo* info = nullptr;

  struct Entry {
    Block block;  // empty: taken from the heap (no scope was open)
    size_t heap_bytes = 0;
    std::shared_ptr<OrtChargeCounter> counter;
  };
  Mutex mutex;
  std::unordered_map<void*, Entry> entries PIER_GUARDED_BY(mutex);

  static Impl* Of(OrtAllocator* allocator) { return reinterpret_cast<Impl*>(allocator); }

  void* Allocate(size_t size) {
    if (size == 0) size = 1;
    OrtChargeScope* scope = current_scope;
    Entry entry;
    void* ptr = nullptr;
    if (scope != nullptr && scope->governor_ != nullptr) {
      MemoryResult<Block> block = scope->governor_->Allocate(scope->owner_, size);
      if (!block.ok()) {
        if (scope->refusal_.empty()) scope->refusal_ = block.error().ToStatus().message();
        // ONNX Runtime does not check for null (a null here crashed a run inside a kernel): its
        // own allocators throw, and every C API entry point turns the exception into an error
        // status, which the session reports with the governor's refusal.
        throw std::bad_alloc();
      }
      ptr = block->data();
      const uint64_t charged = block->charged_bytes();
      entry.block = std::move(*block);
      entry.counter = scope->counter_;
      if (entry.counter != nullptr) {
        const uint64_t now = entry.counter->bytes.fetch_add(charged) + charged;
        entry.counter->allocations.fetch_add(1);
        uint64_t peak = entry.counter->peak.load();
        while (now > peak && !entry.counter->peak.compare_exchange_weak(peak, now)) {
        }
      }
    } else {
      const size_t rounded = (size + kHeapAlignment - 1) / kHeapAlignment * kHeapAlignment;
      ptr = std::aligned_alloc(kHeapAlignment, rounded);
      if (ptr == nullptr) throw std::bad_alloc();
      entry.heap_bytes = rounded;
      if (owner->unscoped_bytes_.fetch_add(rounded) == 0) {
        spdlog::debug("onnxruntime allocated {} bytes outside any charge scope", rounded);
      }
    }
    MutexLock lock(mutex);
    entries.emplace(ptr, std::move(entry));
    return ptr;
  }

  void Free(void* ptr) {
    if (ptr == nullptr) return;
    Entry entry;
    {
      MutexLock lock(mutex);
      auto it = entries.find(ptr);
      if (it == entries.end()) {
        spdlog::error("onnxruntime freed {} which Pier's allocator did not give", ptr);
        return;
      }
      entry = std::move(it->second);
      entries.erase(it);
    }
    if (entry.block) {
      if (entry.counter != nullptr) entry.counter->bytes.fetch_sub(entry.block.charged_bytes());
      entry.block.Reset();
    } else {
      owner->unscoped_bytes_.fetch_sub(entry.heap_bytes);
      std::free(ptr);
    }
  }
};

OrtChargeScope::OrtChargeScope(MemoryGovernor* governor, OwnerId owner,
                               std::shared_ptr<OrtChargeCounter> counter)
    : governor_(governor), owner_(owner), counter_(std::move(counter)), previous_(current_scope) {
  current_scope = this;
}

OrtChargeScope::~OrtChargeScope() { current_scope = previous_; }

Result<OrtChargingAllocator*> OrtChargingAllocator::Register(const OrtApi& api, OrtEnv* env) {
  auto* allocator = new OrtChargingAllocator();
  auto* impl = new Impl();
  allocator->impl_ = impl;
  impl->owner = allocator;
  impl->base.version = ORT_API_VERSION;
  impl->base.Alloc = [](OrtAllocator* self, size_t size) { return Impl::Of(self)->Allocate(size); };
  impl->base.Reserve = [](OrtAllocator* self, size_t size) {
    return Impl::Of(self)->Allocate(size);
  };
  impl->base.Free = [](OrtAllocator* self, void* p) { Impl::Of(self)->Free(p); };
  impl->base.Info = [](const OrtAllocator* self) -> const OrtMemoryInfo* {
    return reinterpret_cast<const Impl*>(self)->info;
  };
  // The CPU device, as a plain device allocator: sessions with use_env_allocators take it for
  // their CPU memory instead of making their own arena.
  Status made = FromOrtStatus(
      api, api.CreateCpuMemoryInfo(OrtDeviceAllocator, OrtMemTypeDefault, &impl->info),
      "describing Pier's allocator");
  if (made.ok()) {
    made =
        FromOrtStatus(api, api.RegisterAllocator(env, &impl->base), "registering Pier's allocator");
  }
  if (!made.ok()) {
    // ONNX Runtime may still hold `impl` on a partial failure: both stay, as the environment.
    return made;
  }
  return allocator;
}

}  // namespace pier::tensor_models
