// CachingAllocator: the pool under the memory governor. Carves blocks out of segments.
//
// Segments come from a backend (the device via the governor, or pinned host memory) and are
// cached: a freed block goes back to a free list and is reused, and only Trim() (or a failed
// segment request) returns whole free segments to the backend. Requests are rounded up to
// 256 bytes. Requests up to `small_block_max_bytes` use the small pool (segments of
// `small_segment_bytes`, split finely); larger ones use the large pool (segments of
// `large_segment_bytes`, or the rounded request when bigger). Free blocks are indexed per
// pool by (stream, size, address): lookup is best fit (the smallest free block that fits,
// lowest address on ties) in O(log n). A block is split when the rest is worth keeping (any
// remainder in the small pool, more than `small_block_max_bytes` in the large pool); a freed
// block is coalesced at once with free neighbours in its segment. When the large pool needs a
// new segment, wholly free large segments too small for the request are returned first.
//
// Stream-ordered reuse: a segment belongs to the stream it was first allocated for and its
// blocks are reused only by requests on that stream. A block also used on other streams
// (RecordStream) is not reused when freed until events recorded on those streams complete.
//
// Ownership: the allocator owns its segments (returned to the backend by Trim and the
// destructor) and all block metadata; callers hold addresses, and the governor wraps them in
// RAII Block handles. Destroying the allocator with live blocks is a PIER_CHECK failure.
//
// Thread-safety: none. The owner (MemoryGovernor, PinnedHostPool) serializes every call with
// its mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <set>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "device/device.h"

namespace pier {

// Where segments come from, and how cross-stream frees are ordered.
class AllocatorBackend {
 public:
  virtual ~AllocatorBackend() = default;
  // A new segment of exactly `bytes` (aligned to 256 at least), or kResourceExhausted.
  [[nodiscard]] virtual Result<void*> AllocateSegment(size_t bytes) = 0;
  virtual void FreeSegment(void* ptr, size_t bytes) = 0;
  // An event recorded now on `stream` (so the allocator can tell when prior work is done).
  [[nodiscard]] virtual Result<Event> RecordEvent(Stream stream) = 0;
  [[nodiscard]] virtual bool EventDone(Event event) = 0;
  virtual void DestroyEvent(Event event) = 0;
};

struct CachingAllocatorOptions {
  size_t alignment = 256;
  size_t small_block_max_bytes = size_t{1} << 20;  // 1 MiB
  size_t small_segment_bytes = size_t{2} << 20;    // 2 MiB
  size_t large_segment_bytes = size_t{20} << 20;   // for requests below this
  size_t large_round_bytes = size_t{2} << 20;      // bigger requests: own segment, rounded
};

struct AllocatorStats {
  size_t reserved_bytes = 0;   // held in segments from the backend
  size_t allocated_bytes = 0;  // in allocated blocks (rounded sizes)
  size_t requested_bytes = 0;  // what callers asked for (live bytes)
  size_t pending_bytes = 0;    // freed, waiting for other streams before reuse
  size_t active_bytes = 0;     // allocated + pending: not available for reuse
  size_t free_bytes = 0;       // reserved - active
  size_t largest_free_block_bytes = 0;
  double external_fragmentation = 0;  // 1 - largest free / total free (0 when nothing free)
  size_t peak_reserved_bytes = 0;
  size_t peak_allocated_bytes = 0;
  size_t peak_requested_bytes = 0;
  size_t segments = 0;
  size_t live_blocks = 0;
  size_t free_blocks = 0;
  uint64_t alloc_count = 0;
  uint64_t free_count = 0;
  uint64_t failure_count = 0;        // requests refused for lack of memory
  uint64_t segment_alloc_count = 0;  // segments obtained from the backend
  uint64_t segment_free_count = 0;   // segments returned (Trim, retries)
};

// A block handed out by Allocate.
struct AllocatedBlock {
  void* ptr = nullptr;
  size_t size = 0;       // rounded, what is charged
  size_t requested = 0;  // as asked
};

// What Free found.
struct FreedBlock {
  size_t size = 0;
  size_t requested = 0;
  uint32_t tag = 0;
};

class CachingAllocator {
 public:
  CachingAllocator(AllocatorBackend* backend, CachingAllocatorOptions options = {});
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  const CachingAllocatorOptions& options() const { return options_; }

  // A block of at least `bytes` (> 0) for work on `stream`, tagged with `tag` (the owner id).
  // When no cached block fits it asks the backend for a segment; if that fails it returns
  // its free cached segments and tries once more with the smallest segment that fits.
  // kResourceExhausted (the backend's message) when that fails too.
  [[nodiscard]] Result<AllocatedBlock> Allocate(size_t bytes, Stream stream, uint32_t tag);

  // Returns a block. kInvalidArgument for a pointer this allocator never handed out (or the
  // middle of a block); kFailedPrecondition for a block that is already free. Neither
  // changes any state.
  [[nodiscard]] Result<FreedBlock> Free(void* ptr);

  // Marks a live block as used by work on `stream`, so that freeing it waits for that work.
  [[nodiscard]] Status RecordStream(void* ptr, Stream stream);

  // Size of the segment a request of `bytes` would need when nothing is cached (planning).
  size_t SegmentBytesFor(size_t bytes) const;
  // `bytes` rounded to the allocation granularity: what a block of that request is charged.
  size_t RoundedBytes(size_t bytes) const;

  // Returns every wholly free segment to the backend; the bytes returned.
  size_t Trim();

  // Polls events of pending frees and makes completed blocks reusable.
  void ProcessPendingFrees();

  AllocatorStats Stats() const;
  // Cheap counters (Stats() also scans for the largest free block).
  size_t reserved_bytes() const { return stats_.reserved_bytes; }
  size_t allocated_bytes() const { return stats_.allocated_bytes; }
  // Sum of RoundedBytes(requested) over live blocks: what owners are charged. A block can be
  // larger than that when the rest of a large block was too small to split off.
  size_t charged_bytes() const { return charged_bytes_; }
  size_t pending_bytes() const { return stats_.pending_bytes; }
  // {"segments":[{"address","bytes","stream","pool","blocks":[{"offset","bytes","state","tag"}]}]}
  nlohmann::json Snapshot() const;

  // Walks every segment and checks the block lists against the free index and the
  // counters: blocks tile each segment, no two free neighbours, sums match. O(blocks).
  // Returns kInternal naming the first broken invariant.
  [[nodiscard]] Status CheckInvariants() const;

 private:
  struct Segment;
  struct BlockNode {
    uintptr_t addr = 0;
    size_t size = 0;
    size_t requested = 0;
    uintptr_t stream_id = 0;  // the segment's stream (copied for the free index)
    Segment* segment = nullptr;
    BlockNode* prev = nullptr;  // neighbour at a lower address in the segment
    BlockNode* next = nullptr;  // neighbour at a higher address in the segment
    bool allocated = false;
    bool pending = false;  // freed, waiting for events
    uint32_t tag = 0;
    std::vector<Stream> other_streams;  // streams besides the segment's that used it
    std::vector<Event> events;          // while pending
  };
  struct Segment {
    uintptr_t base = 0;
    size_t size = 0;
    Stream stream;
    bool small = false;
    BlockNode* first = nullptr;
  };
  struct FreeOrder {
    bool operator()(const BlockNode* a, const BlockNode* b) const;
  };
  using FreeSet = std::set<BlockNode*, FreeOrder>;

  FreeSet& FreeSetFor(bool small) { return small ? small_free_ : large_free_; }
  BlockNode* NewNode();
  void DeleteNode(BlockNode* node);
  BlockNode* FindFree(size_t size, bool small, Stream stream);
  Result<BlockNode*> NewSegment(size_t size, bool small, Stream stream);
  void ReleaseSegment(Segment* segment);
  // Returns wholly free large-pool segments smaller than `bytes`.
  void ReleaseFreeSegmentsBelow(size_t bytes);
  void MakeFree(BlockNode* node);  // coalesces and indexes
  void UpdatePeaks();

  AllocatorBackend* const backend_;
  const CachingAllocatorOptions options_;

  std::map<uintptr_t, std::unique_ptr<Segment>> segments_;  // by base address
  std::unordered_map<uintptr_t, BlockNode*> live_;          // allocated blocks by address
  std::vector<BlockNode*> pending_;                         // freed, awaiting events
  FreeSet small_free_;
  FreeSet large_free_;
  // Node storage: nodes are reused through free_nodes_; node_chunks_ owns them.
  std::vector<std::unique_ptr<BlockNode[]>> node_chunks_;
  std::vector<BlockNode*> free_nodes_;

  AllocatorStats stats_;  // counters kept current; derived fields filled by Stats()
  size_t charged_bytes_ = 0;
};

}  // namespace pier
