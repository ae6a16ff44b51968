#include "memory/workspace.h"

#include <algorithm>

namespace pier {

Status Workspace::Reserve(size_t bytes) {
  if (memory_ && memory_.size() >= bytes) return Status::Ok();
  // Grow by at least half again, so that slowly growing batches re-allocate rarely.
  const size_t target = std::max(bytes, memory_.size() + memory_.size() / 2);
  memory_.Reset();
  MemoryResult<Block> block = governor_.Allocate(owner_, std::max<size_t>(target, 64));
  if (!block.ok()) {
    // Retry with exactly what this step needs before giving up.
    block = governor_.Allocate(owner_, std::max<size_t>(bytes, 64));
    if (!block.ok()) return block.status();
  }
  memory_ = std::move(block).value();
  return Status::Ok();
}

}  // namespace pier
