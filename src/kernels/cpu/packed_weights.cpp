// The packed layout of Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K matrices (matmul_internal.h):
// geometry, packing from GGUF rows, and reading one row back.

#include "kernels/cpu/packed_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/kv_convert.h"
#include "kernels/cpu/matmul_internal.h"
#include "tensor/dequantize.h"
#include "tensor/float16.h"

namespace pier::kernels {
namespace internal {
namespace {

size_t RoundUp(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// Bytes of one GGUF block and where its quants start.
struct GgufBlock {
  size_t bytes;
  size_t qs_offset;
  bool has_min;
};
GgufBlock GgufBlockOf(DType type) {
  switch (type) {
    case DType::kQ4_0:
      return {18, 2, false};
    case DType::kQ4_1:
      return {20, 4, true};
    case DType::kQ5_0:
      return {22, 6, false};
    case DType::kQ5_1:
      return {24, 8, true};
    default:
      return {34, 2, false};  // Q8_0
  }
}

}  // namespace

bool HasPackedLayout(DType type) {
  return type == DType::kQ4_0 || type == DType::kQ4_1 || type == DType::kQ5_0 ||
         type == DType::kQ5_1 || type == DType::kQ8_0 || type == DType::kQ4_K ||
         type == DType::kQ5_K || type == DType::kQ6_K;
}

PackedGeometry MakePackedGeometry(DType type, int64_t n_cols) {
  PackedGeometry g;
  g.type = type;
  g.n_blocks = n_cols / kBlock;
  g.qs_block_bytes = type == DType::kQ8_0 ? 512 : 256;
  const size_t n_blocks = static_cast<size_t>(g.n_blocks);
  g.d_offset = n_blocks * g.qs_block_bytes;
  if (type == DType::kQ4_K || type == DType::kQ5_K) {
    const size_t n_super = n_blocks / 8;
    if (type == DType::kQ5_K) {  // the fifth bits as Q5_0's, before the scales
      g.qh_offset = g.d_offset;
      g.d_offset = g.qh_offset + n_blocks * 4 * kPackRows;
    }
    g.m_offset = g.d_offset + n_super * 2 * kPackRows;
    g.sc_offset = g.m_offset + n_super * 2 * kPackRows;
    g.mn_offset = g.sc_offset + n_blocks * kPackRows;
    g.group_stride = RoundUp(g.mn_offset + n_blocks * kPackRows, 64);
    return g;
  }
  if (type == DType::kQ6_K) {
    const size_t n_super = n_blocks / 8;
    g.qh_offset = g.d_offset;
    g.sc_offset = g.qh_offset + n_blocks * 2 * 4 * kPackRows;
    g.d_offset = g.sc_offset + n_blocks * 2 * kPackRows;
    g.group_stride = RoundUp(g.d_offset + n_super * 2 * kPackRows, 64);
    return g;
  }
  if (type == DType::kQ5_0 || type == DType::kQ5_1) {
    g.qh_offset = g.d_offset;
    g.d_offset = g.qh_offset + n_blocks * 4 * kPackRows;
  }
  g.m_offset = g.d_offset + n_blocks * 2 * kPackRows;
  const bool has_min = type == DType::kQ4_1 || type == DType::kQ5_1;
  const size_t end = has_min ? g.m_offset + n_blocks * 2 * kPackRows : g.m_offset;
  g.group_stride = RoundUp(end, 64);
  return g;
}

namespace {

// Q4_K rows: per super-block of 256, f16 d | f16 dmin | scales[12] | qs[128], sub-blocks 2c
// and 2c + 1 in the low and high nibbles of qs[32c .. 32c + 31]. Q5_K rows: f16 d | f16 dmin |
// scales[12] | qh[32] | qs[128], element l of sub-block j with bit j of qh[l] as its fifth.
void PackGroupQ4K(const PackedGeometry& g, const uint8_t* src, size_t row_bytes, int64_t n_valid,
                  uint8_t* dst) {
  const bool q5 = g.type == DType::kQ5_K;
  const size_t super_bytes = q5 ? 176 : 144, qs_offset = q5 ? 48 : 16;
  for (int64_t i = 0; i < n_valid; ++i) {
    const uint8_t* row = src + i * row_bytes;
    for (int64_t s = 0; s < g.n_blocks / 8; ++s) {
      const uint8_t* super = row + super_bytes * s;
      std::memcpy(dst + g.d_offset + (s * kPackRows + i) * 2, super, 2);
      std::memcpy(dst + g.m_offset + (s * kPackRows + i) * 2, super + 2, 2);
      for (int j = 0; j < 8; ++j) {
        const int64_t b = 8 * s + j;
        int sc, m;
        ScaleMinK4(j, super + 4, &sc, &m);
        dst[g.sc_offset + b * kPackRows + i] = static_cast<uint8_t>(sc);
        dst[g.mn_offset + b * kPackRows + i] = static_cast<uint8_t>(m);
        const uint8_t* q = super + qs_offset + 32 * (j / 2);
        const int shift = 4 * (j % 2);
        if (q5) {  // bit e of the row's word: element e's fifth bit
          uint32_t qh = 0;
          for (int e = 0; e < 32; ++e) qh |= static_cast<uint32_t>((super[16 + e] >> j) & 1) << e;
          std::memcpy(dst + g.qh_offset + (b * kPackRows + i) * 4, &qh, 4);
        }
        uint8_t* qs = dst + b * g.qs_block_bytes;
        for (int e = 0; e < 16; ++e) {  // Q4_1's order: element e low, e + 16 high
          const uint8_t lo = (q[e] >> shift) & 0x0f, hi = (q[e + 16] >> shift) & 0x0f;
          qs[((e / 4) * kPackRows + i) * 4 + e % 4] = static_cast<uint8_t>(lo | (hi << 4));
        }
      }
    }
  }
}

// A GGUF Q6_K super-block (ql[128] | qh[64] | scales[16] s8 | f16 d) as its 256 quants
// (0..63, value d * scales[e / 16] * (q - 32)): element 128n + 32c + l (n < 2, c < 4, l < 32)
// has ql[64n + l + 32(c % 2)]'s low (c < 2) or high nibble and bits 2c, 2c + 1 of qh[32n + l].
void DecodeQ6K(const uint8_t* super, uint8_t* q) {
  for (int n = 0; n < 2; ++n) {
    const uint8_t* ql = super + 64 * n;
    const uint8_t* qh = super + 128 + 32 * n;
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t low = ql[l + 32 * (c % 2)] >> (4 * (c / 2)) & 0x0f;
        q[128 * n + 32 * c + l] = static_cast<uint8_t>(low | ((qh[l] >> (2 * c)) & 3) << 4);
      }
    }
  }
}

// Q6_K rows (super-blocks of 210 bytes) into the layout of matmul_internal.h.
void PackGroupQ6K(const PackedGeometry& g, const uint8_t* src, size_t row_bytes, int64_t n_valid,
                  uint8_t* dst) {
  uint8_t q[256];
  for (int64_t i = 0; i < n_valid; ++i) {
    const uint8_t* row = src + i * row_bytes;
    for (int64_t s = 0; s < g.n_blocks / 8; ++s) {
      const uint8_t* super = row + 210 * s;
      DecodeQ6K(super, q);
      std::memcpy(dst + g.d_offset + (s * kPackRows + i) * 2, super + 208, 2);
      for (int j = 0; j < 8; ++j) {
        const int64_t b = 8 * s + j;
        const uint8_t* qb = q + 32 * j;
        uint8_t* qs = dst + b * g.qs_block_bytes;
        uint32_t high[2] = {0, 0};
        for (int e = 0; e < 16; ++e) {  // Q4_1's nibble order: element e low, e + 16 high
          qs[((e / 4) * kPackRows + i) * 4 + e % 4] =
              static_cast<uint8_t>((qb[e] & 0x0f) | (qb[e + 16] & 0x0f) << 4);
          for (int h = 0; h < 2; ++h) {  // bits 8k + 2j of word h: element 16h + 4j + k
            high[h] |= static_cast<uint32_t>(qb[16 * h + e] >> 4) << (8 * (e % 4) + 2 * (e / 4));
          }
        }
        for (int h = 0; h < 2; ++h) {
          std::memcpy(dst + g.qh_offset + ((b * 2 + h) * kPackRows + i) * 4, &high[h], 4);
          dst[g.sc_offset + (b * 2 + h) * kPackRows + i] = super[192 + 2 * j + h];
        }
      }
    }
  }
}

}  // namespace

void PackGroup(const PackedGeometry& g, const uint8_t* src, size_t row_bytes, int64_t n_valid,
               uint8_t* dst) {
  std::memset(dst, 0, g.group_stride);
  if (g.type == DType::kQ4_K || g.type == DType::kQ5_K) {
    return PackGroupQ4K(g, src, row_bytes, n_valid, dst);
  }
  if (g.type == DType::kQ6_K) return PackGroupQ6K(g, src, row_bytes, n_valid, dst);
  const GgufBlock gb = GgufBlockOf(g.type);
  const size_t chunks = g.qs_block_bytes / (4 * kPackRows);
  for (int64_t i = 0; i < n_valid; ++i) {
    const uint8_t* row = src + i * row_bytes;
    for (int64_t b = 0; b < g.n_blocks; ++b) {
      const uint8_t* blk = row + b * gb.bytes;
      uint8_t* qs = dst + b * g.qs_block_bytes;
      for (size_t j = 0; j < chunks; ++j) {
        std::memcpy(qs + (j * kPackRows + i) * 4, blk + gb.qs_offset + 4 * j, 4);
      }
      std::memcpy(dst + g.d_offset + (b * kPackRows + i) * 2, blk, 2);
      if (gb.has_min) std::memcpy(dst + g.m_offset + (b * kPackRows + i) * 2, blk + 2, 2);
      if (g.qh_offset != 0) {  // Q5: the 32 fifth bits sit just before the quants
        std::memcpy(dst + g.qh_offset + (b * kPackRows + i) * 4, blk + gb.qs_offset - 4, 4);
      }
    }
  }
}

namespace {

// One GGUF Q4_0 block (18 bytes) from 32 floats, as ggml's quantize_row_q4_0_ref makes it
// (Q8_0 rows: kv_convert.h's ConvertF32ToQ8_0, the same as ggml's quantize_row_q8_0_ref). A
// NaN or infinite weight, which that reference leaves undefined, becomes 8: the value 0.
void QuantizeBlockQ4_0(const float* x, uint8_t* out) {
  float amax = 0.0f, max = 0.0f;  // the value of largest magnitude, with its sign
  for (int i = 0; i < 32; ++i) {
    if (amax < std::fabs(x[i])) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const uint16_t dh = Fp32ToFp16(d);
  std::memcpy(out, &dh, 2);
  auto quant = [id](float v) {
    const float shifted = v * id + 8.5f;  // 0.5 .. 16.5 for finite weights
    return shifted >= 0.0f && shifted <= 16.5f
               ? std::min(15, static_cast<int>(static_cast<int8_t>(shifted)))
               : 8;
  };
  for (int i = 0; i < 16; ++i)
    out[2 + i] = static_cast<uint8_t>(quant(x[i]) | quant(x[16 + i]) << 4);
}

}  // namespace

Result<WeightMatrix> QuantizeToPackedImpl(const WeightMatrix& w, DType target,
                                          std::span<std::byte> dst,
                                          void (*on_rows_done)(void*, int64_t), void* context) {
  if (target != DType::kQ8_0 && target != DType::kQ4_0) {
    return UnsupportedError("weights can be quantized at load to q8_0 or q4_0, not " +
                            std::string(DTypeName(target)));
  }
  if (w.type != DType::kF32 && w.type != DType::kF16 && w.type != DType::kBF16) {
    return UnsupportedError("only f32, f16 and bf16 weights are quantized at load, not " +
                            std::string(DTypeName(w.type)));
  }
  if (w.layout != WeightLayout::kGguf || w.n_rows < 0 || w.n_cols <= 0 || w.n_cols % kBlock != 0) {
    return InvalidArgumentError(
        "QuantizeToPacked: a GGUF-layout matrix whose rows are whole "
        "blocks of 32 is needed");
  }
  WeightMatrix as_target{target, w.n_rows, w.n_cols, nullptr, *RowBytes(target, w.n_cols)};
  if (dst.size() < PackedWeightBytes(as_target) ||
      reinterpret_cast<uintptr_t>(dst.data()) % 64 != 0) {
    return InvalidArgumentError(
        "QuantizeToPacked: destination smaller than QuantizedPackedBytes or not 64-byte aligned");
  }
  const PackedGeometry g = MakePackedGeometry(target, w.n_cols);
  uint8_t* out = reinterpret_cast<uint8_t*>(dst.data());
  std::vector<uint8_t> rows(kPackRows * as_target.row_bytes);  // one group in GGUF layout
  std::vector<float> row(static_cast<size_t>(w.n_cols));
  int64_t reported = 0;
  for (int64_t r0 = 0; r0 < w.n_rows; r0 += kPackRows) {
    const int64_t n_valid = std::min(kPackRows, w.n_rows - r0);
    for (int64_t i = 0; i < n_valid; ++i) {
      PIER_RETURN_IF_ERROR(DequantizeRow(w.type, w.data + (r0 + i) * w.row_bytes, row.data(),
                                         w.n_cols));  // exact for float types
      uint8_t* out_row = rows.data() + i * as_target.row_bytes;
      if (target == DType::kQ8_0) {
        ConvertF32ToQ8_0(row.data(), w.n_cols, reinterpret_cast<std::byte*>(out_row));
      } else {
        for (int64_t b = 0; b < w.n_cols / kBlock; ++b) {
          QuantizeBlockQ4_0(row.data() + b * kBlock, out_row + b * 18);
        }
      }
    }
    PackGroup(g, rows.data(), as_target.row_bytes, n_valid,
              out + (r0 / kPackRows) * g.group_stride);
    const int64_t done = r0 + n_valid;
    if (done - reported >= 256 && done < w.n_rows) {
      on_rows_done(context, done);
      reported = done;
    }
  }
  on_rows_done(context, w.n_rows);
  as_target.data = out;
  as_target.layout = WeightLayout::kPacked16;
  return as_target;
}

const uint8_t* PackedGroup(const PackedJob& job, int64_t g, uint8_t* buffer) {
  if (job.groups != nullptr) return job.groups + g * job.geometry.group_stride;
  const WeightMatrix& w = *job.source;
  const int64_t r0 = g * kPackRows;
  PackGroup(job.geometry, w.data + r0 * w.row_bytes, w.row_bytes,
            std::min<int64_t>(kPackRows, w.n_rows - r0), buffer);
  return buffer;
}

Result<WeightMatrix> PackWeightsImpl(const WeightMatrix& w, std::span<std::byte> dst,
                                     void (*on_rows_done)(void*, int64_t), void* context) {
  if (!HasPackedLayout(w.type)) {
    return UnsupportedError(std::string("no packed layout for weight type ") +
                            std::string(DTypeName(w.type)));
  }
  if (w.layout != WeightLayout::kGguf) {
    return InvalidArgumentError("PackWeights: the source must be in GGUF layout");
  }
  const std::optional<uint64_t> row_bytes = RowBytes(w.type, w.n_cols);
  if (w.n_rows < 0 || w.n_cols <= 0 || w.n_cols % kBlock != 0 || !row_bytes ||
      w.row_bytes < *row_bytes) {
    return InvalidArgumentError("PackWeights: bad shape or row size");
  }
  if (dst.size() < PackedWeightBytes(w) || reinterpret_cast<uintptr_t>(dst.data()) % 64 != 0) {
    return InvalidArgumentError(
        "PackWeights: destination smaller than PackedWeightBytes or "
        "not 64-byte aligned");
  }
  const PackedGeometry g = MakePackedGeometry(w.type, w.n_cols);
  uint8_t* out = reinterpret_cast<uint8_t*>(dst.data());
  // Report progress about every 4 MiB of source so a caller can drop pages as it goes.
  const int64_t report_rows = std::max<int64_t>(
      kPackRows, (int64_t{4} << 20) / static_cast<int64_t>(w.row_bytes) / kPackRows * kPackRows);
  int64_t reported = 0;
  for (int64_t r0 = 0; r0 < w.n_rows; r0 += kPackRows) {
    PackGroup(g, w.data + r0 * w.row_bytes, w.row_bytes, std::min(kPackRows, w.n_rows - r0),
              out + (r0 / kPackRows) * g.group_stride);
    const int64_t done = std::min(w.n_rows, r0 + kPackRows);
    if (done - reported >= report_rows && done < w.n_rows) {
      on_rows_done(context, done);
      reported = done;
    }
  }
  on_rows_done(context, w.n_rows);
  WeightMatrix packed = w;
  packed.data = out;
  packed.layout = WeightLayout::kPacked16;
  return packed;
}

}  // namespace internal

bool HasPackedLayout(DType type) { return internal::HasPackedLayout(type); }

size_t PackedWeightBytes(const WeightMatrix& w) {
  if (!internal::HasPackedLayout(w.type) || w.n_rows <= 0 || w.n_cols <= 0) return 0;
  const internal::PackedGeometry g = internal::MakePackedGeometry(w.type, w.n_cols);
  const int64_t groups = (w.n_rows + internal::kPackRows - 1) / internal::kPackRows;
  return g.group_stride * static_cast<size_t>(groups);
}

size_t QuantizedPackedBytes(const WeightMatrix& w, DType target) {
  if (target != DType::kQ8_0 && target != DType::kQ4_0) return 0;
  const std::optional<uint64_t> row_bytes = RowBytes(target, w.n_cols);
  if (!row_bytes || w.n_cols % internal::kBlock != 0) return 0;
  return PackedWeightBytes(WeightMatrix{target, w.n_rows, w.n_cols, nullptr, *row_bytes});
}

Result<WeightMatrix> PackWeights(const WeightMatrix& w, std::span<std::byte> dst) {
  return PackWeights(w, dst, [](int64_t) {});
}

Status DequantizePackedRow(const WeightMatrix& w, int64_t row, float* out) {
  if (w.layout != WeightLayout::kPacked16 || !internal::HasPackedLayout(w.type)) {
    return InvalidArgumentError("DequantizePackedRow: the matrix is not packed");
  }
  if (row < 0 || row >= w.n_rows) {
    return InvalidArgumentError("DequantizePackedRow: row " + std::to_string(row) +
                                " is out of range");
  }
  using internal::kPackRows;
  const internal::PackedGeometry g = internal::MakePackedGeometry(w.type, w.n_cols);
  const uint8_t* group = w.data + (row / kPackRows) * g.group_stride;
  const int64_t i = row % kPackRows;
  if (w.type == DType::kQ6_K) {
    for (int64_t b = 0; b < g.n_blocks; ++b) {
      uint16_t dh;
      std::memcpy(&dh, group + g.d_offset + ((b / 8) * kPackRows + i) * 2, 2);
      const uint8_t* qs = group + b * g.qs_block_bytes;
      for (int e = 0; e < 32; ++e) {
        const int h = e / 16, k = e % 16;
        const uint8_t byte = qs[((k / 4) * kPackRows + i) * 4 + k % 4];
        uint32_t high;
        std::memcpy(&high, group + g.qh_offset + ((b * 2 + h) * kPackRows + i) * 4, 4);
        const int q = (h == 0 ? byte & 0x0f : byte >> 4) |
                      static_cast<int>((high >> (8 * (k % 4) + 2 * (k / 4))) & 3) << 4;
        const auto sc = static_cast<int8_t>(group[g.sc_offset + (b * 2 + h) * kPackRows + i]);
        // As DequantizeRow: d * scale * (q - 32).
        out[b * internal::kBlock + e] =
            Fp16ToFp32(dh) * static_cast<float>(sc) * static_cast<float>(q - 32);
      }
    }
    return Status::Ok();
  }
  if (w.type == DType::kQ4_K || w.type == DType::kQ5_K) {
    for (int64_t b = 0; b < g.n_blocks; ++b) {
      uint16_t dh, mh;
      uint32_t qh = 0;  // Q5_K's fifth bits
      if (g.qh_offset != 0) std::memcpy(&qh, group + g.qh_offset + (b * kPackRows + i) * 4, 4);
      std::memcpy(&dh, group + g.d_offset + ((b / 8) * kPackRows + i) * 2, 2);
      std::memcpy(&mh, group + g.m_offset + ((b / 8) * kPackRows + i) * 2, 2);
      // As DequantizeRow: d1 * q - m1, with d1 = d * sc and m1 = dmin * m.
      const float d1 = Fp16ToFp32(dh) * static_cast<float>(group[g.sc_offset + b * kPackRows + i]);
      const float m1 = Fp16ToFp32(mh) * static_cast<float>(group[g.mn_offset + b * kPackRows + i]);
      const uint8_t* qs = group + b * g.qs_block_bytes;
      float* o = out + b * internal::kBlock;
      for (int e = 0; e < 16; ++e) {
        const uint8_t byte = qs[((e / 4) * kPackRows + i) * 4 + e % 4];
        const int lo = (byte & 0x0f) | static_cast<int>(((qh >> e) & 1u) << 4);
        const int hi = (byte >> 4) | static_cast<int>(((qh >> (e + 16)) & 1u) << 4);
        o[e] = d1 * static_cast<float>(lo) - m1;
        o[e + 16] = d1 * static_cast<float>(hi) - m1;
      }
    }
    return Status::Ok();
  }
  for (int64_t b = 0; b < g.n_blocks; ++b) {
    uint16_t dh;
    std::memcpy(&dh, group + g.d_offset + (b * kPackRows + i) * 2, 2);
    const float d = Fp16ToFp32(dh);
    const uint8_t* qs = group + b * g.qs_block_bytes;
    float* o = out + b * internal::kBlock;
    if (w.type == DType::kQ8_0) {
      for (int e = 0; e < 32; ++e) {
        o[e] =
            d * static_cast<float>(static_cast<int8_t>(qs[((e / 4) * kPackRows + i) * 4 + e % 4]));
      }
      continue;
    }
    float m = 0.0f;
    if (w.type == DType::kQ4_1 || w.type == DType::kQ5_1) {
      uint16_t mh;
      std::memcpy(&mh, group + g.m_offset + (b * kPackRows + i) * 2, 2);
      m = Fp16ToFp32(mh);
    }
    uint32_t qh = 0;
    if (g.qh_offset != 0) std::memcpy(&qh, group + g.qh_offset + (b * kPackRows + i) * 4, 4);
    for (int e = 0; e < 16; ++e) {
      const uint8_t byte = qs[((e / 4) * kPackRows + i) * 4 + e % 4];
      const int lo = (byte & 0x0f) | static_cast<int>(((qh >> e) & 1u) << 4);
      const int hi = (byte >> 4) | static_cast<int>(((qh >> (e + 16)) & 1u) << 4);
      // As DequantizeRow: (q - offset) * d, or q * d + m.
      switch (w.type) {
        case DType::kQ4_1:
        case DType::kQ5_1:
          o[e] = static_cast<float>(lo) * d + m;
          o[e + 16] = static_cast<float>(hi) * d + m;
          break;
        case DType::kQ5_0:
          o[e] = static_cast<float>(lo - 16) * d;
          o[e + 16] = static_cast<float>(hi - 16) * d;
          break;
        default:
          o[e] = static_cast<float>(lo - 8) * d;
          o[e + 16] = static_cast<float>(hi - 8) * d;
          break;
      }
    }
  }
  return Status::Ok();
}

}  // namespace pier::kernels
