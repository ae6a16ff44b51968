// The scalar path of MatMul: the canonical computation of matmul_internal.h
// written out lane by lane. It is the fallback on CPUs without AVX2 and the
// reference every SIMD path must match bit for bit.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/matmul_internal.h"
#include "tensor/float16.h"

namespace pier::kernels::internal {
namespace {

void QuantRowsScalar(const QuantJob& job, int64_t row_begin, int64_t row_end) {
  const WeightMatrix& w = *job.w;
  const QuantLayout& lay = job.layout;
  const bool has_offsets = HasOffsets(w.type);
  const bool is_signed = HasSignedWeights(w.type);
  thread_local std::vector<std::byte> buffer;
  if (buffer.size() < job.unpack.row_stride) buffer.resize(job.unpack.row_stride);
  std::byte* row = buffer.data();
  const uint8_t* wq = reinterpret_cast<const uint8_t*>(row);
  const float* dw = reinterpret_cast<const float*>(row + job.unpack.dw_offset);
  const float* mw = reinterpret_cast<const float*>(row + job.unpack.mw_offset);

  for (int64_t r = row_begin; r < row_end; ++r) {
    UnpackRowScalar(w.type, w.data + r * w.row_bytes, lay, job.unpack, row);
    for (int64_t t = 0; t < job.n_tokens; ++t) {
      const std::byte* xrow = job.xq + t * lay.row_stride;
      const int8_t* xq = reinterpret_cast<const int8_t*>(xrow);
      const float* xd = reinterpret_cast<const float*>(xrow + lay.d_offset);
      const float* xs = reinterpret_cast<const float*>(xrow + lay.s_offset);
      float acc[kLanes] = {};
      for (int64_t b = 0; b < lay.n_blocks; ++b) {
        for (int l = 0; l < kLanes; ++l) {
          int32_t isum = 0;
          for (int e = 4 * l; e < 4 * l + 4; ++e) {
            const int32_t qw = is_signed ? static_cast<int8_t>(wq[kBlock * b + e])
                                         : static_cast<int32_t>(wq[kBlock * b + e]);
            isum += qw * xq[kBlock * b + e];
          }
          const float f = static_cast<float>(isum) * xd[b];
          acc[l] = std::fma(f, dw[kLanes * b + l], acc[l]);
          if (has_offsets) acc[l] = std::fma(mw[kLanes * b + l], xs[kLanes * b + l], acc[l]);
        }
      }
      job.y[t * job.ldy + r] = Hsum8(acc);
    }
  }
}

// The packed canonical form (matmul_internal.h), row by row within each group.
void PackedGroupsScalar(const PackedJob& job, int64_t group_begin, int64_t group_end) {
  const PackedGeometry& g = job.geometry;
  const QuantLayout& lay = job.layout;
  const bool is_q8 = g.type == DType::kQ8_0;
  thread_local std::vector<uint8_t> buffer;
  if (buffer.size() < g.group_stride) buffer.resize(g.group_stride);
  for (int64_t gi = group_begin; gi < group_end; ++gi) {
    const uint8_t* group = PackedGroup(job, gi, buffer.data());
    const PackedJob::GroupOutput out = job.OutputOf(gi);
    for (int64_t i = 0; i < out.n_valid; ++i) {
      for (int64_t t = 0; t < job.n_tokens; ++t) {
        const std::byte* xrow = job.xq + t * lay.row_stride;
        const int8_t* xq = reinterpret_cast<const int8_t*>(xrow);
        const float* xd = reinterpret_cast<const float*>(xrow + lay.d_offset);
        const float* bx = reinterpret_cast<const float*>(xrow + lay.bx_offset);
        float acc = 0.0f;
        for (int64_t b = 0; b < g.n_blocks; ++b) {
          const uint8_t* qs = group + b * g.qs_block_bytes;
          const int8_t* x = xq + kBlock * b;
          if (g.type == DType::kQ6_K) {
            int32_t isum = 0;
            for (int h = 0; h < 2; ++h) {
              uint32_t high;
              std::memcpy(&high, group + g.qh_offset + ((b * 2 + h) * kPackRows + i) * 4, 4);
              int32_t half = 0;
              for (int k = 0; k < 16; ++k) {
                const uint8_t byte = qs[((k / 4) * kPackRows + i) * 4 + k % 4];
                const int32_t qw = (h == 0 ? byte & 0x0f : byte >> 4) |
                                   static_cast<int32_t>((high >> (8 * (k % 4) + 2 * (k / 4))) & 3)
                                       << 4;
                half += (qw - 32) * x[16 * h + k];
              }
              isum += static_cast<int8_t>(group[g.sc_offset + (b * 2 + h) * kPackRows + i]) * half;
            }
            uint16_t dh;
            std::memcpy(&dh, group + g.d_offset + ((b / 8) * kPackRows + i) * 2, 2);
            acc = std::fma(static_cast<float>(isum), Fp16ToFp32(dh) * xd[b], acc);
            continue;
          }
          int32_t isum = 0;
          for (int e = 0; e < 32; ++e) {
            int32_t qw;
            if (is_q8) {
              qw = static_cast<int8_t>(qs[((e / 4) * kPackRows + i) * 4 + e % 4]);
            } else {
              const int k = e % 16;
              const uint8_t byte = qs[((k / 4) * kPackRows + i) * 4 + k % 4];
              qw = e < 16 ? (byte & 0x0f) : (byte >> 4);
              if (g.qh_offset != 0) {  // Q5: the fifth bit, bit e of the row's qh
                uint32_t qh;
                std::memcpy(&qh, group + g.qh_offset + (b * kPackRows + i) * 4, 4);
                qw |= static_cast<int32_t>(((qh >> e) & 1u) << 4);
              }
            }
            isum += qw * x[e];
          }
          uint16_t dh;
          if (g.type == DType::kQ4_K || g.type == DType::kQ5_K) {
            uint16_t mh;
            std::memcpy(&dh, group + g.d_offset + ((b / 8) * kPackRows + i) * 2, 2);
            std::memcpy(&mh, group + g.m_offset + ((b / 8) * kPackRows + i) * 2, 2);
            const float dw =
                Fp16ToFp32(dh) * static_cast<float>(group[g.sc_offset + b * kPackRows + i]);
            const float mw =
                -(Fp16ToFp32(mh) * static_cast<float>(group[g.mn_offset + b * kPackRows + i]));
            acc = std::fma(static_cast<float>(isum), dw * xd[b], acc);
            acc = std::fma(mw, bx[b], acc);
            continue;
          }
          std::memcpy(&dh, group + g.d_offset + (b * kPackRows + i) * 2, 2);
          const float dw = Fp16ToFp32(dh);
          acc = std::fma(static_cast<float>(isum), dw * xd[b], acc);
          if (g.type == DType::kQ4_1 || g.type == DType::kQ5_1) {
            uint16_t mh;
            std::memcpy(&mh, group + g.m_offset + (b * kPackRows + i) * 2, 2);
            acc = std::fma(Fp16ToFp32(mh), bx[b], acc);
          } else if (g.type == DType::kQ4_0) {
            acc = std::fma(-8.0f * dw, bx[b], acc);
          } else if (g.type == DType::kQ5_0) {
            acc = std::fma(-16.0f * dw, bx[b], acc);
          }
        }
        out.y[t * out.ldy + i] = acc;
      }
    }
  }
}

float LoadWeight(DType type, const uint8_t* row, int64_t k) {
  switch (type) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, row + 4 * k, 4);
      return v;
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, row + 2 * k, 2);
      return Fp16ToFp32(h);
    }
    default: {
      uint16_t h;
      std::memcpy(&h, row + 2 * k, 2);
      return Bf16ToFp32(h);
    }
  }
}

void FloatRowsScalar(const FloatJob& job, int64_t row_begin, int64_t row_end) {
  const WeightMatrix& w = *job.w;
  const int64_t n = w.n_cols;
  const int64_t n_padded = (n + kLanes - 1) / kLanes * kLanes;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* wrow = w.data + r * w.row_bytes;
    for (int64_t t = 0; t < job.n_tokens; ++t) {
      const float* x = job.x + t * n;
      float acc[kLanes] = {};
      for (int64_t k = 0; k < n_padded; ++k) {
        const float wk = k < n ? LoadWeight(w.type, wrow, k) : 0.0f;
        const float xk = k < n ? x[k] : 0.0f;
        acc[k % kLanes] = std::fma(wk, xk, acc[k % kLanes]);
      }
      job.y[t * job.ldy + r] = Hsum8(acc);
    }
  }
}

}  // namespace

void QuantizeRowScalar(const float* x, const QuantLayout& layout, std::byte* row) {
  int8_t* qs = reinterpret_cast<int8_t*>(row);
  float* d_out = reinterpret_cast<float*>(row + layout.d_offset);
  float* s_out = reinterpret_cast<float*>(row + layout.s_offset);
  int32_t* qsum_out = reinterpret_cast<int32_t*>(row + layout.qsum_offset);
  float* bx_out = reinterpret_cast<float*>(row + layout.bx_offset);
  for (int64_t b = 0; b < layout.n_blocks; ++b) {
    const float* xb = x + kBlock * b;
    float amax = 0.0f;
    for (int i = 0; i < kBlock; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int32_t sums[kLanes] = {};
    for (int i = 0; i < kBlock; ++i) {
      const int32_t q = static_cast<int32_t>(std::nearbyint(xb[i] * id));
      qs[kBlock * b + i] = static_cast<int8_t>(q);
      sums[i / 4] += q;
    }
    d_out[b] = d;
    for (int l = 0; l < kLanes; ++l) s_out[kLanes * b + l] = static_cast<float>(sums[l]) * d;
    int32_t qsum = 0;
    for (int l = 0; l < kLanes; ++l) qsum += sums[l];
    qsum_out[b] = qsum;
    bx_out[b] = static_cast<float>(qsum) * d;
  }
}

const IsaKernels& ScalarKernels() {
  static const IsaKernels kernels{QuantizeRowScalar, nullptr, QuantRowsScalar, FloatRowsScalar,
                                  PackedGroupsScalar};
  return kernels;
}

}  // namespace pier::kernels::internal
