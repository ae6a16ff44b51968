// MatMul driver: validation, path selection, activation quantization and the
// split of output rows across the thread pool.

#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/thread_pool.h"
#include "kernels/cpu/matmul_internal.h"

namespace pier::kernels {
namespace internal {
namespace {

size_t RoundUp(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

const IsaKernels& KernelsFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return Avx512Kernels();
    case Isa::kAvx2:
      return Avx2Kernels();
    case Isa::kScalar:
      break;
  }
  return ScalarKernels();
}

bool IsFloatType(DType type) {
  return type == DType::kF32 || type == DType::kF16 || type == DType::kBF16;
}

// Enough multiply-adds per chunk that a thread hand-off pays for itself.
constexpr int64_t kMinChunkMacs = 1 << 15;

}  // namespace

#ifndef PIER_KERNELS_X86
const IsaKernels& Avx2Kernels() { return ScalarKernels(); }
const IsaKernels& Avx512Kernels() { return ScalarKernels(); }
#endif

QuantLayout MakeQuantLayout(int64_t n_cols) {
  QuantLayout layout;
  layout.n_cols = n_cols;
  layout.n_blocks = n_cols / kBlock;
  layout.d_offset = RoundUp(n_cols, 64);
  layout.s_offset = layout.d_offset + RoundUp(4 * layout.n_blocks, 32);
  layout.qsum_offset = RoundUp(layout.s_offset + 4 * kLanes * layout.n_blocks, 64);
  layout.bx_offset = RoundUp(layout.qsum_offset + 4 * layout.n_blocks, 64);
  layout.row_stride = RoundUp(layout.bx_offset + 4 * layout.n_blocks, 64);
  return layout;
}

UnpackLayout MakeUnpackLayout(const QuantLayout& layout) {
  UnpackLayout unpack;
  unpack.dw_offset = RoundUp(layout.n_cols, 64);
  unpack.mw_offset = unpack.dw_offset + 4 * kLanes * layout.n_blocks;
  unpack.row_stride = RoundUp(unpack.mw_offset + 4 * kLanes * layout.n_blocks, 64);
  return unpack;
}

void ScatterBlocks(const std::byte* row, const QuantLayout& layout, int64_t t, int64_t n_tokens,
                   std::byte* xb) {
  const float* d = reinterpret_cast<const float*>(row + layout.d_offset);
  const float* bx = reinterpret_cast<const float*>(row + layout.bx_offset);
  const int32_t* qsum = reinterpret_cast<const int32_t*>(row + layout.qsum_offset);
  for (int64_t b = 0; b < layout.n_blocks; ++b) {
    XEntry e;
    std::memcpy(e.q, row + kBlock * b, kBlock);
    e.d = d[b];
    e.bx = bx[b];
    e.qsum = qsum[b];
    e.qsum_lo = 0;
    for (int k = 0; k < 16; ++k) e.qsum_lo += e.q[k];
    std::memcpy(xb + (b * n_tokens + t) * sizeof(XEntry), &e, sizeof(XEntry));
  }
}

namespace {

// Rows [row_begin, row_end) of a GGUF-layout matrix as a matrix of their own.
WeightMatrix RowsOf(const WeightMatrix& w, int64_t row_begin, int64_t row_end) {
  WeightMatrix sub = w;
  sub.n_rows = row_end - row_begin;
  sub.data = w.data + row_begin * static_cast<int64_t>(w.row_bytes);
  return sub;
}

}  // namespace

Status MatMulToSlicesWithIsa(Isa isa, const WeightMatrix& w, const float* x, int64_t n_tokens,
                             std::span<const OutputSlice> slices, std::span<std::byte> scratch,
                             ThreadPool& pool) {
  if (!IsaSupported(isa)) {
    return UnsupportedError(std::string("MatMul: this CPU lacks the ") + IsaName(isa) + " path");
  }
  const bool quantized = IsQuantized(w.type);
  if (!quantized && !IsFloatType(w.type)) {
    return UnsupportedError("MatMul: no CPU kernel for weight type " +
                            std::string(DTypeName(w.type)));
  }
  if (w.n_rows < 0 || w.n_cols <= 0 || n_tokens < 0) {
    return InvalidArgumentError("MatMul: negative or empty shape");
  }
  const int64_t block = Traits(w.type).block_size;
  if (w.n_cols % block != 0 || (quantized && w.n_cols % kBlock != 0)) {
    return InvalidArgumentError("MatMul: n_cols " + std::to_string(w.n_cols) +
                                " is not a multiple of the " + std::string(DTypeName(w.type)) +
                                " block size");
  }
  const std::optional<uint64_t> row_bytes = RowBytes(w.type, w.n_cols);
  if (!row_bytes || w.row_bytes < *row_bytes) {
    return InvalidArgumentError("MatMul: row_bytes is smaller than one row of the matrix");
  }
  const bool packed_kernel = HasPackedLayout(w.type);
  int64_t slice_rows = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    const OutputSlice& s = slices[i];
    if (s.n_rows < 0) return InvalidArgumentError("MatMul: an output slice has negative rows");
    if (s.ldy < s.n_rows) return InvalidArgumentError("MatMul: ldy is smaller than n_rows");
    if (packed_kernel && i + 1 < slices.size() && s.n_rows % kPackRows != 0) {
      return InvalidArgumentError("MatMul: output slices of a " + std::string(DTypeName(w.type)) +
                                  " matrix must hold whole groups of 16 rows (but the last)");
    }
    slice_rows += s.n_rows;
  }
  if (slice_rows != w.n_rows) {
    return InvalidArgumentError("MatMul: the output slices hold " + std::to_string(slice_rows) +
                                " rows, the matrix " + std::to_string(w.n_rows));
  }
  if (scratch.size() < MatMulScratchBytes(w, n_tokens)) {
    return InvalidArgumentError("MatMul: scratch buffer smaller than MatMulScratchBytes");
  }
  if (w.layout == WeightLayout::kPacked16 && !packed_kernel) {
    return InvalidArgumentError("MatMul: a packed matrix of a type without a packed layout");
  }
  if (n_tokens == 0 || w.n_rows == 0) return Status::Ok();
  for (const OutputSlice& s : slices) {
    if (s.n_rows > 0 && s.y == nullptr) return InvalidArgumentError("MatMul: null buffer");
  }
  if (w.data == nullptr || x == nullptr) return InvalidArgumentError("MatMul: null buffer");

  const IsaKernels& kernels = KernelsFor(isa);
  // Row tiles of one slice's rows, split over the pool.
  auto for_row_tiles = [&](const WeightMatrix& sub, auto&& run) {
    const int64_t n_tiles = (sub.n_rows + kRowTile - 1) / kRowTile;
    const int64_t min_tiles =
        std::max<int64_t>(1, kMinChunkMacs / (kRowTile * sub.n_cols * n_tokens));
    pool.ParallelFor(n_tiles, min_tiles, [&](int64_t begin, int64_t end) {
      run(begin * kRowTile, std::min(sub.n_rows, end * kRowTile));
    });
  };

  if (!quantized) {
    int64_t first = 0;
    for (const OutputSlice& s : slices) {
      const WeightMatrix sub = RowsOf(w, first, first + s.n_rows);
      first += s.n_rows;
      const FloatJob job{&sub, x, n_tokens, s.y, s.ldy};
      for_row_tiles(sub, [&](int64_t r0, int64_t r1) { kernels.float_rows(job, r0, r1); });
    }
    return Status::Ok();
  }

  const QuantLayout layout = MakeQuantLayout(w.n_cols);
  std::byte* xq =
      reinterpret_cast<std::byte*>(RoundUp(reinterpret_cast<uintptr_t>(scratch.data()), 64));
  const int64_t min_tokens = std::max<int64_t>(1, (int64_t{1} << 14) / w.n_cols);
  // The packed SIMD kernels read block-major entries, the others rows.
  std::byte* xb = packed_kernel && kernels.quantize_entries != nullptr
                      ? reinterpret_cast<std::byte*>(RoundUp(
                            reinterpret_cast<uintptr_t>(xq + n_tokens * layout.row_stride), 64))
                      : nullptr;
  const int64_t entry_stride = n_tokens * static_cast<int64_t>(sizeof(XEntry));
  pool.ParallelFor(n_tokens, min_tokens, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      if (xb != nullptr) {
        kernels.quantize_entries(x + t * w.n_cols, layout, xb + t * sizeof(XEntry), entry_stride);
      } else {
        kernels.quantize_row(x + t * w.n_cols, layout, xq + t * layout.row_stride);
      }
    }
  });

  if (packed_kernel) {
    PackedJob job;
    job.geometry = MakePackedGeometry(w.type, w.n_cols);
    job.layout = layout;
    if (w.layout == WeightLayout::kPacked16) {
      job.groups = w.data;
    } else {
      job.source = &w;
    }
    job.n_rows = w.n_rows;
    job.xq = xq;
    job.xb = xb;
    job.n_tokens = n_tokens;
    job.slices = slices;
    const int64_t n_groups = (w.n_rows + kPackRows - 1) / kPackRows;
    const int64_t min_groups =
        std::max<int64_t>(1, kMinChunkMacs / (kPackRows * w.n_cols * n_tokens));
    pool.ParallelFor(n_groups, min_groups,
                     [&](int64_t begin, int64_t end) { kernels.packed_groups(job, begin, end); });
    return Status::Ok();
  }

  int64_t first = 0;
  for (const OutputSlice& s : slices) {
    const WeightMatrix sub = RowsOf(w, first, first + s.n_rows);
    first += s.n_rows;
    QuantJob job;
    job.w = &sub;
    job.layout = layout;
    job.unpack = MakeUnpackLayout(job.layout);
    job.xq = xq;
    job.n_tokens = n_tokens;
    job.y = s.y;
    job.ldy = s.ldy;
    for_row_tiles(sub, [&](int64_t r0, int64_t r1) { kernels.quant_rows(job, r0, r1); });
  }
  return Status::Ok();
}

Status MatMulWithIsa(Isa isa, const WeightMatrix& w, const float* x, int64_t n_tokens, float* y,
                     int64_t ldy, std::span<std::byte> scratch, ThreadPool& pool) {
  const OutputSlice slice{w.n_rows, y, ldy};
  return MatMulToSlicesWithIsa(isa, w, x, n_tokens, std::span<const OutputSlice>(&slice, 1),
                               scratch, pool);
}

}  // namespace internal

size_t MatMulScratchBytes(const WeightMatrix& w, int64_t n_tokens) {
  if (!internal::IsQuantized(w.type) || n_tokens <= 0 || w.n_cols <= 0) return 0;
  const internal::QuantLayout layout = internal::MakeQuantLayout(w.n_cols);
  size_t bytes = layout.row_stride * static_cast<size_t>(n_tokens) + 64;
  if (internal::HasPackedLayout(w.type)) {
    bytes += sizeof(internal::XEntry) * static_cast<size_t>(layout.n_blocks * n_tokens) + 64;
  }
  return bytes;
}

Status MatMul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, int64_t ldy,
              std::span<std::byte> scratch, ThreadPool& pool) {
  return internal::MatMulWithIsa(ActiveIsa(), w, x, n_tokens, y, ldy, scratch, pool);
}

Status MatMulToSlices(const WeightMatrix& w, const float* x, int64_t n_tokens,
                      std::span<const OutputSlice> slices, std::span<std::byte> scratch,
                      ThreadPool& pool) {
  return internal::MatMulToSlicesWithIsa(ActiveIsa(), w, x, n_tokens, slices, scratch, pool);
}

const char* MatMulIsaName() { return IsaName(ActiveIsa()); }

}  // namespace pier::kernels
