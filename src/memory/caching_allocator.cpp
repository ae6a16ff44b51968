#include "memory/caching_allocator.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "memory/byte_size.h"

namespace pier {
namespace {
constexpr size_t kNodesPerChunk = 256;
size_t RoundUp(size_t x, size_t to) { return (x + to - 1) / to * to; }
std::string Hex(uintptr_t addr) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "0x%zx", static_cast<size_t>(addr));
  return buffer;
}
}  // namespace

bool CachingAllocator::FreeOrder::operator()(const BlockNode* a, const BlockNode* b) const {
  if (a->stream_id != b->stream_id) return a->stream_id < b->stream_id;
  if (a->size != b->size) return a->size < b->size;
  return a->addr < b->addr;
}

CachingAllocator::CachingAllocator(AllocatorBackend* backend, CachingAllocatorOptions options)
    : backend_(backend), options_(options) {
  PIER_CHECK(backend_ != nullptr, "CachingAllocator needs a backend");
  PIER_CHECK(options_.alignment != 0 && (options_.alignment & (options_.alignment - 1)) == 0,
             "alignment must be a power of two");
  PIER_CHECK(options_.small_segment_bytes >= options_.small_block_max_bytes,
             "small segments must hold the largest small block");
}

CachingAllocator::~CachingAllocator() {
  ProcessPendingFrees();
  PIER_CHECK(live_.empty() && pending_.empty(), "CachingAllocator destroyed with " +
                                                    std::to_string(live_.size()) +
                                                    " live blocks (a Block outlived its governor)");
  Trim();
  PIER_CHECK(segments_.empty(), "segments left after the final trim");
}

size_t CachingAllocator::RoundedBytes(size_t bytes) const {
  return RoundUp(std::max<size_t>(bytes, 1), options_.alignment);
}

size_t CachingAllocator::SegmentBytesFor(size_t bytes) const {
  size_t size = RoundedBytes(bytes);
  if (size <= options_.small_block_max_bytes) return options_.small_segment_bytes;
  if (size < options_.large_segment_bytes) return options_.large_segment_bytes;
  return RoundUp(size, options_.large_round_bytes);
}

CachingAllocator::BlockNode* CachingAllocator::NewNode() {
  if (free_nodes_.empty()) {
    node_chunks_.push_back(std::make_unique<BlockNode[]>(kNodesPerChunk));
    BlockNode* chunk = node_chunks_.back().get();
    for (size_t i = kNodesPerChunk; i > 0; --i) free_nodes_.push_back(&chunk[i - 1]);
  }
  BlockNode* node = free_nodes_.back();
  free_nodes_.pop_back();
  *node = BlockNode{};
  return node;
}

void CachingAllocator::DeleteNode(BlockNode* node) {
  node->other_streams.clear();
  node->events.clear();
  free_nodes_.push_back(node);
}

CachingAllocator::BlockNode* CachingAllocator::FindFree(size_t size, bool small, Stream stream) {
  FreeSet& set = FreeSetFor(small);
  BlockNode probe;
  probe.stream_id = stream.id;
  probe.size = size;
  probe.addr = 0;
  auto it = set.lower_bound(&probe);
  if (it == set.end() || (*it)->stream_id != stream.id) return nullptr;
  BlockNode* node = *it;
  set.erase(it);
  --stats_.free_blocks;
  return node;
}

Result<CachingAllocator::BlockNode*> CachingAllocator::NewSegment(size_t size, bool small,
                                                                  Stream stream) {
  Result<void*> memory = backend_->AllocateSegment(size);
  if (!memory.ok()) return memory.status();
  auto segment = std::make_unique<Segment>();
  segment->base = reinterpret_cast<uintptr_t>(*memory);
  PIER_CHECK(segment->base % options_.alignment == 0, "backend returned a misaligned segment");
  segment->size = size;
  segment->stream = stream;
  segment->small = small;
  BlockNode* node = NewNode();
  node->addr = segment->base;
  node->size = size;
  node->stream_id = stream.id;
  node->segment = segment.get();
  segment->first = node;
  segments_.emplace(segment->base, std::move(segment));
  stats_.reserved_bytes += size;
  ++stats_.segment_alloc_count;
  return node;
}

void CachingAllocator::ReleaseSegment(Segment* segment) {
  BlockNode* node = segment->first;
  PIER_CHECK(node != nullptr && !node->allocated && !node->pending && node->next == nullptr,
             "releasing a segment that is in use");
  FreeSetFor(segment->small).erase(node);
  --stats_.free_blocks;
  DeleteNode(node);
  stats_.reserved_bytes -= segment->size;
  ++stats_.segment_free_count;
  uintptr_t base = segment->base;
  size_t size = segment->size;
  segments_.erase(base);
  backend_->FreeSegment(reinterpret_cast<void*>(base), size);
}

Result<AllocatedBlock> CachingAllocator::Allocate(size_t bytes, Stream stream, uint32_t tag) {
  if (bytes == 0) return InvalidArgumentError("allocation of 0 bytes");
  ProcessPendingFrees();
  const size_t size = RoundedBytes(bytes);
  const bool small = size <= options_.small_block_max_bytes;
  BlockNode* node = FindFree(size, small, stream);
  if (node == nullptr) {
    const size_t segment_bytes = SegmentBytesFor(bytes);
    // Wholly free large segments too small for this request would sit idle beside the new
    // one; return them first so that growing buffers (workspace sized by the batch) do not
    // pile up cached segments.
    if (!small) ReleaseFreeSegmentsBelow(segment_bytes);
    Result<BlockNode*> fresh = NewSegment(segment_bytes, small, stream);
    if (!fresh.ok()) {
      // Give cached segments back and ask for no more than this request needs.
      Trim();
      size_t minimal = small ? options_.small_segment_bytes : RoundUp(size, options_.alignment);
      fresh = NewSegment(minimal, small, stream);
    }
    if (!fresh.ok()) {
      ++stats_.failure_count;
      return fresh.status();
    }
    node = *fresh;
  }
  const size_t remainder = node->size - size;
  const bool split =
      small ? remainder >= options_.alignment : remainder > options_.small_block_max_bytes;
  if (split) {
    BlockNode* rest = NewNode();
    rest->addr = node->addr + size;
    rest->size = remainder;
    rest->stream_id = node->stream_id;
    rest->segment = node->segment;
    rest->prev = node;
    rest->next = node->next;
    if (node->next != nullptr) node->next->prev = rest;
    node->next = rest;
    node->size = size;
    FreeSetFor(small).insert(rest);
    ++stats_.free_blocks;
  }
  node->allocated = true;
  node->requested = bytes;
  node->tag = tag;
  live_.emplace(node->addr, node);
  stats_.allocated_bytes += node->size;
  stats_.requested_bytes += bytes;
  charged_bytes_ += size;
  ++stats_.live_blocks;
  ++stats_.alloc_count;
  UpdatePeaks();
  return AllocatedBlock{reinterpret_cast<void*>(node->addr), node->size, bytes};
}

Result<FreedBlock> CachingAllocator::Free(void* ptr) {
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  auto it = live_.find(addr);
  if (it == live_.end()) {
    // Say precisely what is wrong without touching anything.
    auto seg = segments_.upper_bound(addr);
    if (seg != segments_.begin()) {
      --seg;
      const Segment& segment = *seg->second;
      if (addr < segment.base + segment.size) {
        for (const BlockNode* n = segment.first; n != nullptr; n = n->next) {
          if (n->addr == addr) {
            return FailedPreconditionError("double free of the block at " + Hex(addr) + " (" +
                                           FormatBytes(n->size) + "): it is already free");
          }
        }
        return InvalidArgumentError("free of " + Hex(addr) +
                                    ": inside a segment but not the start of a block");
      }
    }
    return InvalidArgumentError("free of " + Hex(addr) + ": a pointer this pool never handed out");
  }
  BlockNode* node = it->second;
  live_.erase(it);
  FreedBlock freed{node->size, node->requested, node->tag};
  stats_.allocated_bytes -= node->size;
  stats_.requested_bytes -= node->requested;
  charged_bytes_ -= RoundedBytes(node->requested);
  --stats_.live_blocks;
  ++stats_.free_count;
  node->allocated = false;
  node->requested = 0;
  if (!node->other_streams.empty()) {
    for (Stream s : node->other_streams) {
      Result<Event> event = backend_->RecordEvent(s);
      // Without an event we cannot know when the other stream is done: wait conservatively
      // by keeping the block pending until a later poll records one successfully.
      if (event.ok()) node->events.push_back(*event);
    }
    node->other_streams.clear();
    node->pending = true;
    stats_.pending_bytes += node->size;
    pending_.push_back(node);
    return freed;
  }
  MakeFree(node);
  return freed;
}

Status CachingAllocator::RecordStream(void* ptr, Stream stream) {
  auto it = live_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == live_.end()) return InvalidArgumentError("RecordStream on a block that is not live");
  BlockNode* node = it->second;
  if (stream.id == node->stream_id) return Status::Ok();
  if (std::find(node->other_streams.begin(), node->other_streams.end(), stream) ==
      node->other_streams.end()) {
    node->other_streams.push_back(stream);
  }
  return Status::Ok();
}

void CachingAllocator::ProcessPendingFrees() {
  if (pending_.empty()) return;
  std::vector<BlockNode*> still;
  for (BlockNode* node : pending_) {
    bool done = true;
    for (Event e : node->events) done = done && backend_->EventDone(e);
    if (!done) {
      still.push_back(node);
      continue;
    }
    for (Event e : node->events) backend_->DestroyEvent(e);
    node->events.clear();
    node->pending = false;
    stats_.pending_bytes -= node->size;
    MakeFree(node);
  }
  pending_ = std::move(still);
}

void CachingAllocator::MakeFree(BlockNode* node) {
  FreeSet& set = FreeSetFor(node->segment->small);
  auto mergeable = [](const BlockNode* n) { return n != nullptr && !n->allocated && !n->pending; };
  if (mergeable(node->prev)) {
    BlockNode* prev = node->prev;
    set.erase(prev);
    --stats_.free_blocks;
    prev->size += node->size;
    prev->next = node->next;
    if (node->next != nullptr) node->next->prev = prev;
    DeleteNode(node);
    node = prev;
  }
  if (mergeable(node->next)) {
    BlockNode* next = node->next;
    set.erase(next);
    --stats_.free_blocks;
    node->size += next->size;
    node->next = next->next;
    if (next->next != nullptr) next->next->prev = node;
    DeleteNode(next);
  }
  set.insert(node);
  ++stats_.free_blocks;
}

void CachingAllocator::ReleaseFreeSegmentsBelow(size_t bytes) {
  std::vector<Segment*> idle;
  for (auto& [base, segment] : segments_) {
    BlockNode* first = segment->first;
    if (!segment->small && segment->size < bytes && !first->allocated && !first->pending &&
        first->next == nullptr) {
      idle.push_back(segment.get());
    }
  }
  for (Segment* segment : idle) ReleaseSegment(segment);
}

size_t CachingAllocator::Trim() {
  ProcessPendingFrees();
  std::vector<Segment*> idle;
  for (auto& [base, segment] : segments_) {
    BlockNode* first = segment->first;
    if (!first->allocated && !first->pending && first->next == nullptr) {
      idle.push_back(segment.get());
    }
  }
  size_t released = 0;
  for (Segment* segment : idle) {
    released += segment->size;
    ReleaseSegment(segment);
  }
  return released;
}

void CachingAllocator::UpdatePeaks() {
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  stats_.peak_requested_bytes = std::max(stats_.peak_requested_bytes, stats_.requested_bytes);
}

AllocatorStats CachingAllocator::Stats() const {
  AllocatorStats stats = stats_;
  stats.segments = segments_.size();
  stats.active_bytes = stats.allocated_bytes + stats.pending_bytes;
  stats.free_bytes = stats.reserved_bytes - stats.active_bytes;
  size_t largest = 0;
  if (!small_free_.empty()) largest = std::max(largest, (*small_free_.rbegin())->size);
  if (!large_free_.empty()) largest = std::max(largest, (*large_free_.rbegin())->size);
  // The sets are ordered by stream first: with several streams the last element is not
  // necessarily the largest, so scan when more than one stream is in use.
  auto scan = [&largest](const FreeSet& set) {
    if (set.empty() || (*set.begin())->stream_id == (*set.rbegin())->stream_id) return;
    for (const BlockNode* n : set) largest = std::max(largest, n->size);
  };
  scan(small_free_);
  scan(large_free_);
  stats.largest_free_block_bytes = largest;
  stats.external_fragmentation =
      stats.free_bytes == 0
          ? 0.0
          : 1.0 - static_cast<double>(largest) / static_cast<double>(stats.free_bytes);
  return stats;
}

nlohmann::json CachingAllocator::Snapshot() const {
  nlohmann::json segments = nlohmann::json::array();
  for (const auto& [base, segment] : segments_) {
    nlohmann::json blocks = nlohmann::json::array();
    for (const BlockNode* n = segment->first; n != nullptr; n = n->next) {
      nlohmann::json block = {{"offset", n->addr - segment->base},
                              {"bytes", n->size},
                              {"state", n->allocated ? "allocated"
                                        : n->pending ? "pending"
                                                     : "free"}};
      if (n->allocated) {
        block["requested"] = n->requested;
        block["tag"] = n->tag;
      }
      blocks.push_back(std::move(block));
    }
    segments.push_back({{"address", Hex(base)},
                        {"bytes", segment->size},
                        {"stream", segment->stream.id},
                        {"pool", segment->small ? "small" : "large"},
                        {"blocks", std::move(blocks)}});
  }
  return {{"segments", std::move(segments)}};
}

Status CachingAllocator::CheckInvariants() const {
  size_t reserved = 0, allocated = 0, requested = 0, charged = 0, pending = 0, live = 0,
         free_blocks = 0;
  for (const auto& [base, segment] : segments_) {
    reserved += segment->size;
    uintptr_t expect = segment->base;
    const BlockNode* prev = nullptr;
    for (const BlockNode* n = segment->first; n != nullptr; n = n->next) {
      if (n->addr != expect) return InternalError("gap or overlap at " + Hex(n->addr));
      if (n->prev != prev) return InternalError("broken prev link at " + Hex(n->addr));
      if (n->segment != segment.get()) return InternalError("block in the wrong segment");
      if (n->addr % options_.alignment != 0) return InternalError("misaligned block");
      if (n->size == 0) return InternalError("empty block at " + Hex(n->addr));
      const bool is_free = !n->allocated && !n->pending;
      if (is_free && prev != nullptr && !prev->allocated && !prev->pending) {
        return InternalError("two adjacent free blocks not coalesced at " + Hex(n->addr));
      }
      const FreeSet& set = segment->small ? small_free_ : large_free_;
      const bool indexed = set.count(const_cast<BlockNode*>(n)) != 0;
      if (indexed != is_free) return InternalError("free index out of sync at " + Hex(n->addr));
      if (n->allocated) {
        auto it = live_.find(n->addr);
        if (it == live_.end() || it->second != n) return InternalError("live map out of sync");
        allocated += n->size;
        requested += n->requested;
        charged += RoundedBytes(n->requested);
        if (n->requested > n->size) return InternalError("block smaller than its request");
        ++live;
      }
      if (n->pending) pending += n->size;
      if (is_free) ++free_blocks;
      expect = n->addr + n->size;
      prev = n;
    }
    if (expect != segment->base + segment->size) {
      return InternalError("blocks do not cover the segment at " + Hex(base));
    }
  }
  if (reserved != stats_.reserved_bytes || allocated != stats_.allocated_bytes ||
      requested != stats_.requested_bytes || charged != charged_bytes_ ||
      pending != stats_.pending_bytes || live != live_.size() || live != stats_.live_blocks ||
      free_blocks != stats_.free_blocks || free_blocks != small_free_.size() + large_free_.size()) {
    return InternalError("counters disagree with the blocks: reserved " + std::to_string(reserved) +
                         " vs " + std::to_string(stats_.reserved_bytes) + ", allocated " +
                         std::to_string(allocated) + " vs " +
                         std::to_string(stats_.allocated_bytes));
  }
  return Status::Ok();
}

}  // namespace pier
