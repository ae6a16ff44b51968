// Scalar unpacking of quantized weight rows into the canonical per-block form
// (see matmul_internal.h): small integers, an 8-lane scale vector, offsets per half.

#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul_internal.h"
#include "tensor/byte_load.h"
#include "tensor/float16.h"

namespace pier::kernels::internal {

void ScaleMinK4(int j, const uint8_t* scales, int* scale, int* min) {
  if (j < 4) {
    *scale = scales[j] & 63;
    *min = scales[j + 4] & 63;
  } else {
    *scale = (scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4);
    *min = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

namespace {

// Destination of one unpacked block of 32: q [32], dw [8], mw [8].
struct BlockOut {
  uint8_t* q;
  float* dw;
  float* mw;

  void SetScales(float d0, float m0, float d1, float m1) const {
    for (int l = 0; l < 4; ++l) {
      dw[l] = d0;
      dw[l + 4] = d1;
      mw[l] = m0;
      mw[l + 4] = m1;
    }
  }
};

// Q4_0 (18 bytes): f16 d | qs[16]; w = d * (q - 8): q_w = q, dw = d, mw = -8 d.
void UnpackQ4_0(const uint8_t* b, const BlockOut& out) {
  const float d = LoadHalf(b);
  for (int j = 0; j < 16; ++j) {
    out.q[j] = b[2 + j] & 0x0f;
    out.q[j + 16] = b[2 + j] >> 4;
  }
  out.SetScales(d, -8.0f * d, d, -8.0f * d);
}

// Q4_1 (20 bytes): f16 d | f16 m | qs[16]; w = d * q + m.
void UnpackQ4_1(const uint8_t* b, const BlockOut& out) {
  const float d = LoadHalf(b);
  const float m = LoadHalf(b + 2);
  for (int j = 0; j < 16; ++j) {
    out.q[j] = b[4 + j] & 0x0f;
    out.q[j + 16] = b[4 + j] >> 4;
  }
  out.SetScales(d, m, d, m);
}

// Q5_0 (22 bytes): f16 d | u32 qh | qs[16]; w = d * (q - 16).
void UnpackQ5_0(const uint8_t* b, const BlockOut& out) {
  const float d = LoadHalf(b);
  const uint32_t qh = LoadU32(b + 2);
  for (int j = 0; j < 16; ++j) {
    out.q[j] = static_cast<uint8_t>((b[6 + j] & 0x0f) | (((qh >> j) & 1u) << 4));
    out.q[j + 16] = static_cast<uint8_t>((b[6 + j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
  }
  out.SetScales(d, -16.0f * d, d, -16.0f * d);
}

// Q5_1 (24 bytes): f16 d | f16 m | u32 qh | qs[16]; w = d * q + m.
void UnpackQ5_1(const uint8_t* b, const BlockOut& out) {
  const float d = LoadHalf(b);
  const float m = LoadHalf(b + 2);
  const uint32_t qh = LoadU32(b + 4);
  for (int j = 0; j < 16; ++j) {
    out.q[j] = static_cast<uint8_t>((b[8 + j] & 0x0f) | (((qh >> j) & 1u) << 4));
    out.q[j + 16] = static_cast<uint8_t>((b[8 + j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
  }
  out.SetScales(d, m, d, m);
}

// Q8_0 (34 bytes): f16 d | int8 qs[32]; w = d * q (signed q_w, no offset).
void UnpackQ8_0(const uint8_t* b, const BlockOut& out) {
  const float d = LoadHalf(b);
  std::memcpy(out.q, b + 2, 32);
  out.SetScales(d, 0.0f, d, 0.0f);
}

// Q4_K (144 bytes, 256 elements): f16 d | f16 dmin | scales[12] | qs[128].
// Sub-block s: w = d * sc_s * q - dmin * m_s; sub-blocks 2c and 2c+1 share
// qs[32c .. 32c+31] (low and high nibbles).
void UnpackQ4_K(const uint8_t* b, const BlockOut* out) {
  const float d = LoadHalf(b);
  const float dmin = LoadHalf(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (int s = 0; s < 8; ++s) {
    int sc, m;
    ScaleMinK4(s, scales, &sc, &m);
    const uint8_t* q = qs + 32 * (s / 2);
    const int shift = (s % 2) * 4;
    for (int l = 0; l < 32; ++l) out[s].q[l] = (q[l] >> shift) & 0x0f;
    const float dw = d * static_cast<float>(sc);
    const float mw = -(dmin * static_cast<float>(m));
    out[s].SetScales(dw, mw, dw, mw);
  }
}

// Q5_K (176 bytes): f16 d | f16 dmin | scales[12] | qh[32] | qs[128]; as Q4_K
// with the 5th bit of element l of sub-block s in bit s of qh[l].
void UnpackQ5_K(const uint8_t* b, const BlockOut* out) {
  const float d = LoadHalf(b);
  const float dmin = LoadHalf(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int s = 0; s < 8; ++s) {
    int sc, m;
    ScaleMinK4(s, scales, &sc, &m);
    const uint8_t* q = qs + 32 * (s / 2);
    const int shift = (s % 2) * 4;
    for (int l = 0; l < 32; ++l) {
      out[s].q[l] = static_cast<uint8_t>(((q[l] >> shift) & 0x0f) | (((qh[l] >> s) & 1) << 4));
    }
    const float dw = d * static_cast<float>(sc);
    const float mw = -(dmin * static_cast<float>(m));
    out[s].SetScales(dw, mw, dw, mw);
  }
}

// Q6_K (210 bytes): ql[128] | qh[64] | int8 scales[16] | f16 d; element group g
// of 16 has w = d * scales[g] * (q - 32), q = 6 bits. Per 128-element half n,
// element l (l < 32) of each quarter takes its low nibble from ql[64n + l] (quarters
// 0, 2: low nibble; quarters 1, 3: ql[64n + 32 + l]) and 2 bits of qh[32n + l].
void UnpackQ6_K(const uint8_t* b, const BlockOut* out) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = LoadHalf(b + 208);
  for (int n = 0; n < 2; ++n) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t h = qh[32 * n + l];
      const uint8_t lo0 = ql[64 * n + l], lo1 = ql[64 * n + 32 + l];
      out[4 * n + 0].q[l] = static_cast<uint8_t>((lo0 & 0x0f) | ((h & 3) << 4));
      out[4 * n + 1].q[l] = static_cast<uint8_t>((lo1 & 0x0f) | (((h >> 2) & 3) << 4));
      out[4 * n + 2].q[l] = static_cast<uint8_t>((lo0 >> 4) | (((h >> 4) & 3) << 4));
      out[4 * n + 3].q[l] = static_cast<uint8_t>((lo1 >> 4) | (((h >> 6) & 3) << 4));
    }
  }
  for (int s = 0; s < 8; ++s) {
    const float d0 = d * static_cast<float>(scales[2 * s]);
    const float d1 = d * static_cast<float>(scales[2 * s + 1]);
    out[s].SetScales(d0, d0 * -32.0f, d1, d1 * -32.0f);
  }
}

}  // namespace

bool IsQuantized(DType type) {
  switch (type) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ8_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return true;
    default:
      return false;
  }
}

bool HasSignedWeights(DType type) { return type == DType::kQ8_0; }
bool HasOffsets(DType type) { return IsQuantized(type) && type != DType::kQ8_0; }

void UnpackRowScalar(DType type, const uint8_t* src, const QuantLayout& layout,
                     const UnpackLayout& unpack, std::byte* dst) {
  uint8_t* q = reinterpret_cast<uint8_t*>(dst);
  float* dw = reinterpret_cast<float*>(dst + unpack.dw_offset);
  float* mw = reinterpret_cast<float*>(dst + unpack.mw_offset);
  const int64_t nb = layout.n_blocks;
  auto block = [&](int64_t i) {
    return BlockOut{q + kBlock * i, dw + kLanes * i, mw + kLanes * i};
  };
  switch (type) {
    case DType::kQ4_0:
      for (int64_t i = 0; i < nb; ++i) UnpackQ4_0(src + 18 * i, block(i));
      return;
    case DType::kQ4_1:
      for (int64_t i = 0; i < nb; ++i) UnpackQ4_1(src + 20 * i, block(i));
      return;
    case DType::kQ5_0:
      for (int64_t i = 0; i < nb; ++i) UnpackQ5_0(src + 22 * i, block(i));
      return;
    case DType::kQ5_1:
      for (int64_t i = 0; i < nb; ++i) UnpackQ5_1(src + 24 * i, block(i));
      return;
    case DType::kQ8_0:
      for (int64_t i = 0; i < nb; ++i) UnpackQ8_0(src + 34 * i, block(i));
      return;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K: {
      const int64_t super_bytes = type == DType::kQ4_K ? 144 : type == DType::kQ5_K ? 176 : 210;
      for (int64_t i = 0; i < nb / 8; ++i) {
        BlockOut out[8];
        for (int s = 0; s < 8; ++s) out[s] = block(8 * i + s);
        const uint8_t* b = src + super_bytes * i;
        if (type == DType::kQ4_K) {
          UnpackQ4_K(b, out);
        } else if (type == DType::kQ5_K) {
          UnpackQ5_K(b, out);
        } else {
          UnpackQ6_K(b, out);
        }
      }
      return;
    }
    default:
      PIER_CHECK(false, "UnpackRowScalar: not a quantized type");
  }
}

}  // namespace pier::kernels::internal
