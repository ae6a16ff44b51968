// Workspace: the runner's scratch memory (activations, kernel scratch, logits),
// one memory-governor block that grows when a batch needs more.
//
// A step first lays out its buffers with a WorkspacePlan (offsets only), then
// asks the Workspace to hold that many bytes, then takes pointers. The block is
// re-allocated only when a larger batch arrives (contents are not kept), so a
// steady stream of steps allocates nothing. This is the runner's single
// allocation point besides the KV store: every byte is charged to the owner
// given at creation.
//
// Ownership: owns its governor block. Thread-safety: none (the engine thread).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "memory/memory_governor.h"

namespace pier {

// Offsets of a step's buffers inside the workspace, each 64-byte aligned.
class WorkspacePlan {
 public:
  // Reserves `count` elements of T; returns the offset to pass to Workspace::At.
  template <typename T>
  size_t Add(int64_t count) {
    const size_t offset = bytes_;
    bytes_ += (static_cast<size_t>(count) * sizeof(T) + 63) / 64 * 64;
    return offset;
  }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_ = 0;
};

class Workspace {
 public:
  Workspace(MemoryGovernor& governor, OwnerId owner) : governor_(governor), owner_(owner) {}

  // Makes at least `bytes` available (earlier contents are lost when it grows). The
  // governor's refusal, as a Status, when it cannot.
  [[nodiscard]] Status Reserve(size_t bytes);

  template <typename T>
  T* At(size_t offset) const {
    return reinterpret_cast<T*>(memory_.as<std::byte>() + offset);
  }
  size_t capacity() const { return memory_.size(); }

 private:
  MemoryGovernor& governor_;
  OwnerId owner_;
  Block memory_;
};

}  // namespace pier
