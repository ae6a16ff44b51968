// OrtChargingAllocator: the OrtAllocator Pier registers with ONNX Runtime's environment, so a
// session made with `session.use_env_allocators=1` (and its CPU arena off) takes its memory,
// weights and working buffers alike, from the memory governor: each allocation is a pool
// Block charged to the owner that an OrtChargeScope names on the allocating thread (session
// creation, warm-up and every Run open one). Blocks are 256-byte aligned (ONNX Runtime asks
// for 64).
//
// ONNX Runtime allocates on the thread that creates a session or calls Run; an allocation made
// with no scope open (none is expected) is taken from the heap, uncharged, and counted in
// unscoped_bytes() so it shows instead of hiding. What ONNX Runtime takes past the allocator
// (graph parsing, constant folding, MLAS scratch, thread stacks) is measured by the session
// (onnx_session.h), not here.
//
// Thread-safety: Alloc and Free from any thread; a scope belongs to its thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "memory/memory_governor.h"

struct OrtApi;
struct OrtEnv;

namespace pier::tensor_models {

// What one session's allocations come to, kept by the session and updated by the allocator
// (shared: a buffer ONNX Runtime frees late still finds its counter).
struct OrtChargeCounter {
  std::atomic<uint64_t> bytes{0};  // held now (charged, as the pool rounds them)
  std::atomic<uint64_t> peak{0};   // the most held at once since ResetPeak
  std::atomic<uint64_t> allocations{0};
  void ResetPeak() { peak.store(bytes.load()); }
};

// Names who pays for the allocations made on this thread while it lives; nests (the previous
// scope returns when it ends). The governor and counter must outlive every allocation made.
class OrtChargeScope {
 public:
  OrtChargeScope(MemoryGovernor* governor, OwnerId owner,
                 std::shared_ptr<OrtChargeCounter> counter);
  ~OrtChargeScope();
  OrtChargeScope(const OrtChargeScope&) = delete;
  OrtChargeScope& operator=(const OrtChargeScope&) = delete;

  // The governor's refusal of an allocation made in this scope (ONNX Runtime only says it
  // failed to allocate), empty when none was refused.
  const std::string& refusal() const { return refusal_; }

 private:
  friend class OrtChargingAllocator;
  MemoryGovernor* governor_;
  OwnerId owner_;
  std::shared_ptr<OrtChargeCounter> counter_;
  std::string refusal_;
  OrtChargeScope* previous_;
};

class OrtChargingAllocator {
 public:
  // Makes the allocator and registers it with `env` (for CPU memory). Once per process.
  [[nodiscard]] static Result<OrtChargingAllocator*> Register(const OrtApi& api, OrtEnv* env);

  uint64_t unscoped_bytes() const { return unscoped_bytes_.load(); }

  struct Impl;

 private:
  OrtChargingAllocator() = default;
  std::atomic<uint64_t> unscoped_bytes_{0};
  Impl* impl_ = nullptr;  // lives as long as the process, as ONNX Runtime's environment
};

}  // namespace pier::tensor_models
