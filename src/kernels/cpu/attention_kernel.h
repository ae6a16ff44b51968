// Paged attention's per-task kernels: up to 8 consecutive query tokens of a sequence, all their
// heads, against the sequence's K/V. PagedAttention (paged_attention.h) splits a batch into
// such tasks and runs them on its thread pool; this header is its internal interface, and the
// tests' way to run each implementation.
//
// Three implementations compute the same canonical arithmetic (attention_lanes.h) and so the
// same bits: the portable one (attention_portable.cpp: C++ loops over explicit lanes, one query
// at a time, compiled for AVX2 and the baseline), an AVX2 one (attention_avx2.cpp) and an
// AVX-512 one (attention_avx512.cpp) with intrinsics, both reading each tile of K/V once for
// all of a task's queries. Each call only reads the store and q and writes its own out and
// scores; tasks with disjoint out and scores may run concurrently.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "kernels/cpu/attention_lanes.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/paged_kv.h"

namespace pier::kernels::internal {

// Largest head_dim the kernels take (their per-row buffers are sized by it).
inline constexpr int64_t kAttentionMaxHeadDim = kPagedAttentionMaxHeadDim;

// n_queries consecutive query tokens of one sequence (a decode token: 1; a prefill chunk: a
// few), all their query heads, against the sequence's K/V (every K/V head). Query i is at
// position n_ctx - n_queries + i and attends positions 0 .. n_ctx - n_queries + i; its
// result is the same bits as a task of that query alone.
struct AttentionTask {
  const PagedKvView* kv = nullptr;
  int64_t layer = 0;
  const int32_t* block_table = nullptr;  // the sequence's blocks
  int64_t n_ctx = 0;                     // positions 0 .. n_ctx - 1 are attended (by the last)
  int64_t n_queries = 1;
  // Sliding window: when positive, a query at position p attends only p - window + 1 .. p.
  int64_t window = 0;
  // Logit soft-capping (Gemma 2): when positive, every score s becomes cap * tanh(s / cap).
  float softcap = 0.0f;
  int64_t n_head = 0;        // query heads, a multiple of the layout's n_kv_head
  const float* q = nullptr;  // [n_queries][n_head][head_dim]
  float* out = nullptr;      // [n_queries][n_head][head_dim]
  float* scores = nullptr;   // scratch: [n_queries][n_head][score_stride]
  int64_t score_stride = 0;  // >= n_ctx rounded up to a multiple of 16
  float* inv_sum = nullptr;  // scratch: [n_queries][n_head]
  float* work = nullptr;     // scratch: AttentionWorkFloats (portable kernel)
  // The task this thread runs next (its first K planes are requested into the cache while
  // this one ends), or n_ctx 0; and whether this task's were requested by the one before.
  const int32_t* next_block_table = nullptr;
  int64_t next_n_ctx = 0;
  bool first_planes_requested = false;
  // Whether to request K/V planes ahead at all (PagedAttention asks it of every task: decode
  // tokens' planes come from memory, and a prefill group's have usually left the core's caches
  // since the group before read them).
  bool prefetch = true;
};

// Addresses of the K (or V) rows, all K/V heads, at positions 0, 1, 2, ... n_ctx - 1 of a
// task's sequence, in order (Next() is called once per position). Block addresses are looked
// up once per block. A task reads its K planes and then its V planes, each block's plane in
// a different place, which the hardware prefetchers cannot guess: while the walker hands out
// the rows of one plane it requests those of the plane kAhead further in that order (the
// first V planes after the last K planes, the next task's first K planes after the last V
// planes) into the cache, one row per row handed out, so the requests are spread over the
// compute instead of stalling it in one burst.
// Sliding window: the first position any query of the task attends, rounded down to a tile
// of 16 (query 0, the earliest, has the earliest window). The tiles before it hold only
// positions masked for every query: the kernels skip them, since their terms would add exact
// zeros to every sum (and -inf to every max), which changes no bit.
inline int64_t FirstAttendedTile(const AttentionTask& task) {
  if (task.window <= 0) return 0;
  const int64_t first_query = task.n_ctx - task.n_queries;
  return std::max<int64_t>(0, first_query - task.window + 1) / kAttentionTilePositions *
         kAttentionTilePositions;
}

class AttentionRowWalker {
 public:
  // Hands out the rows from position FirstAttendedTile(t) on.
  AttentionRowWalker(const AttentionTask& t, bool values)
      : kv_(*t.kv),
        layer_(t.layer),
        table_(t.block_table),
        next_table_(t.next_block_table),
        n_ctx_(t.n_ctx),
        next_n_ctx_(t.next_n_ctx),
        block_size_(t.kv->layout().block_size),
        row_bytes_(static_cast<int64_t>(t.kv->layout().row_bytes())),
        first_block_(FirstAttendedTile(t) / block_size_),
        n_blocks_((t.n_ctx + block_size_ - 1) / block_size_ - first_block_),
        n_planes_(2 * n_blocks_ + std::min(kAhead, (t.next_n_ctx + block_size_ - 1) / block_size_)),
        plane_index_(values ? n_blocks_ : 0),
        prefetch_(t.prefetch) {
    Enter(plane_index_);
    offset_ = FirstAttendedTile(t) % block_size_;
    if (prefetch_ && !values && (!t.first_planes_requested || t.window > 0)) {
      for (int64_t i = plane_index_; i < plane_index_ + kAhead && i < n_planes_; ++i) {
        for (int64_t r = 0; r < RowsOf(i); ++r) PrefetchRow(Plane(i), r);
      }
    }
  }

  // The next position's row: [n_kv_head][head_dim] values of the layout's dtype.
  const std::byte* Next() {
    if (offset_ == rows_) {
      Enter(++plane_index_);
      offset_ = 0;
    }
    if (next_plane_ != nullptr) {
      // Row `offset_` of the next plane, and on the last row all the next plane's rest.
      const int64_t last = offset_ + 1 == rows_ ? next_rows_ : std::min(offset_ + 1, next_rows_);
      for (int64_t r = offset_; r < last; ++r) PrefetchRow(next_plane_, r);
    }
    return plane_ + offset_++ * row_bytes_;
  }

  // The next n rows (n >= 1) into rows[0..n): what n calls of Next() give, with the same rows
  // of the plane ahead requested, but without a call per row when they lie in one plane (a
  // tile of 16 positions in a block of 16: the usual case).
  void NextRows(int n, const std::byte** rows) {
    if (offset_ == rows_) {
      Enter(++plane_index_);
      offset_ = 0;
    }
    if (offset_ + n > rows_) {
      for (int i = 0; i < n; ++i) rows[i] = Next();
      return;
    }
    if (next_plane_ != nullptr) {
      const int64_t end = offset_ + n == rows_ ? next_rows_ : std::min(offset_ + n, next_rows_);
      for (int64_t r = offset_; r < end; ++r) PrefetchRow(next_plane_, r);
    }
    for (int i = 0; i < n; ++i) rows[i] = plane_ + (offset_ + i) * row_bytes_;
    offset_ += n;
  }

 private:
  static constexpr int64_t kLineBytes = 64;
  // Planes requested ahead of the one being read. Measured on Zen 4 (decode, 16 sequences):
  // 2 planes ahead, to the outer caches (locality 1: PREFETCHT2), beat 1 or 3 planes and
  // PREFETCHT0, which stalls on the few L1 miss buffers.
  static constexpr int64_t kAhead = 2;

  // Plane `index` of the blocks read (from first_block_ on: a sliding window's earlier blocks
  // are never touched, and may have been released): K of block first_block_ + index for
  // index < n_blocks_, V of block first_block_ + index - n_blocks_ below 2 n_blocks_, then the
  // next task's first K planes.
  const std::byte* Plane(int64_t index) const {
    if (index < n_blocks_) return kv_.KeyPlane(layer_, table_[first_block_ + index]);
    if (index < 2 * n_blocks_) {
      return kv_.ValuePlane(layer_, table_[first_block_ + index - n_blocks_]);
    }
    return kv_.KeyPlane(layer_, next_table_[index - 2 * n_blocks_]);
  }
  int64_t RowsOf(int64_t index) const {
    if (index < 2 * n_blocks_) {
      return std::min(block_size_, n_ctx_ - (first_block_ + index % n_blocks_) * block_size_);
    }
    return std::min(block_size_, next_n_ctx_ - (index - 2 * n_blocks_) * block_size_);
  }
  void Enter(int64_t index) {
    plane_ = Plane(index);
    rows_ = RowsOf(index);
    const bool has_next = prefetch_ && index + kAhead < n_planes_;
    next_plane_ = has_next ? Plane(index + kAhead) : nullptr;
    next_rows_ = has_next ? RowsOf(index + kAhead) : 0;
  }
  void PrefetchRow(const std::byte* plane, int64_t r) const {
    for (int64_t b = 0; b < row_bytes_; b += kLineBytes)
      __builtin_prefetch(plane + r * row_bytes_ + b, /*rw=*/0, /*locality=*/1);
  }

  const PagedKvView& kv_;
  int64_t layer_;
  const int32_t* table_;
  const int32_t* next_table_;
  int64_t n_ctx_, next_n_ctx_, block_size_, row_bytes_;
  int64_t first_block_;  // the first block read: FirstAttendedTile's
  int64_t n_blocks_;     // blocks read
  int64_t n_planes_;
  int64_t plane_index_;
  bool prefetch_;
  const std::byte* plane_ = nullptr;
  int64_t rows_ = 0, offset_ = 0;  // rows of the current plane that exist; next one
  const std::byte* next_plane_ = nullptr;
  int64_t next_rows_ = 0;
};

// Soft-capping: every attended score of each query (its tiles from FirstAttendedTile on, up to
// its own position) through attention::Softcap, between the score pass and MaskBeforeWindow; the
// scores past a query's position stay -inf.
inline void SoftcapScores(const AttentionTask& task) {
  if (task.softcap <= 0.0f) return;
  const int64_t first = FirstAttendedTile(task);
  for (int64_t i = 0; i < task.n_queries; ++i) {
    const int64_t n_ctx_i = task.n_ctx - (task.n_queries - 1 - i);
    for (int64_t h = 0; h < task.n_head; ++h) {
      float* s = task.scores + (i * task.n_head + h) * task.score_stride;
      for (int64_t p = first; p < n_ctx_i; ++p) s[p] = attention::Softcap(s[p], task.softcap);
    }
  }
}

// Sliding window: sets the scores of the positions before each query's window to -inf (those of
// the tiles the kernels skip included), between
// the score pass and the softmax (every implementation calls it there). Exp(-inf - max) is
// exactly 0, so a masked position adds +0 to the softmax sums and 0 * v to the P.V sums: the
// result is that of attending the window alone, and the same bits whichever kernel runs.
inline void MaskBeforeWindow(const AttentionTask& task) {
  if (task.window <= 0) return;
  for (int64_t i = 0; i < task.n_queries; ++i) {
    const int64_t position = task.n_ctx - (task.n_queries - 1 - i) - 1;
    const int64_t first = std::max<int64_t>(0, position - task.window + 1);
    for (int64_t h = 0; h < task.n_head; ++h) {
      std::fill_n(task.scores + (i * task.n_head + h) * task.score_stride, first,
                  -std::numeric_limits<float>::infinity());
    }
  }
}

// Floats of AttentionTask::work: [2][n_head][head_dim rounded up to 16].
inline int64_t AttentionWorkFloats(const KvLayout& layout, int64_t n_head) {
  return 2 * n_head * ((layout.head_dim + 15) / 16 * 16);
}

// Floats of `scores` per query head for a task of n_ctx positions: its score_stride.
inline int64_t AttentionScoreStride(int64_t n_ctx) { return (n_ctx + 15) / 16 * 16; }

// The implementations, each only called where ActiveIsa() (cpu_isa.h) allows it: the portable
// loops compiled for the baseline and for AVX2 (one query at a time), and the AVX2 and AVX-512
// intrinsics, which read each tile of K/V once for all of a task's queries.
void AttendPortable(const AttentionTask& task);
void AttendPortableAvx2(const AttentionTask& task);
void AttendAvx2(const AttentionTask& task);
void AttendAvx512(const AttentionTask& task);

// The canonical Exp (attention_lanes.h) of n values, as each implementation evaluates it.
void ExpPortable(const float* x, int64_t n, float* y);
void ExpPortableAvx2(const float* x, int64_t n, float* y);
void ExpAvx2(const float* x, int64_t n, float* y);
void ExpAvx512(const float* x, int64_t n, float* y);

// The implementation for `isa` (which this CPU must support).
using AttendFn = void (*)(const AttentionTask&);
AttendFn AttentionKernelFor(Isa isa);

// Runs `one_query` (a kernel that reads n_queries as 1) once per query of `task`, the last
// first: it reads every K/V row the others read, so they find them in the cache.
inline void AttendEachQuery(const AttentionTask& task, AttendFn one_query) {
  const int64_t head_floats = task.n_head * task.kv->layout().head_dim;
  for (int64_t i = task.n_queries - 1; i >= 0; --i) {
    AttentionTask one = task;
    one.n_queries = 1;
    one.n_ctx = task.n_ctx - (task.n_queries - 1 - i);
    one.q = task.q + i * head_floats;
    one.out = task.out + i * head_floats;
    one.scores = task.scores + i * task.n_head * task.score_stride;
    one.inv_sum = task.inv_sum + i * task.n_head;
    if (i != task.n_queries - 1) {
      one.prefetch = false;
      one.next_block_table = nullptr;
      one.next_n_ctx = 0;
    }
    one_query(one);
  }
}

// Most queries one task takes (a prefill chunk's tokens are grouped by up to this many;
// PagedAttentionQueriesPerTask).
inline constexpr int64_t kAttentionMaxQueries = 8;

}  // namespace pier::kernels::internal
