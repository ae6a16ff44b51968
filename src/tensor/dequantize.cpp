#include "tensor/dequantize.h"

#include <cstring>
#include <string>

#include "tensor/byte_load.h"
#include "tensor/float16.h"

namespace pier {
namespace {

constexpr int kQK = 32;    // elements per block of the legacy quants (Q4_0 .. Q8_0)
constexpr int kQKK = 256;  // elements per super-block of the k-quants

// Q4_0 block (18 bytes): f16 d | qs[16]. Element j is the low nibble of qs[j],
// element j + 16 the high nibble; value = (q - 8) * d.
void DequantizeQ4_0(const uint8_t* block, float* y) {
  const float d = LoadHalf(block);
  const uint8_t* qs = block + 2;
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0f) - 8) * d;
    y[j + kQK / 2] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// Q4_1 block (20 bytes): f16 d | f16 m | qs[16]; value = q * d + m.
void DequantizeQ4_1(const uint8_t* block, float* y) {
  const float d = LoadHalf(block);
  const float m = LoadHalf(block + 2);
  const uint8_t* qs = block + 4;
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0f) * d + m;
    y[j + kQK / 2] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// Q5_0 block (22 bytes): f16 d | u32 qh (bit i = 5th bit of element i) | qs[16];
// value = (q - 16) * d.
void DequantizeQ5_0(const uint8_t* block, float* y) {
  const float d = LoadHalf(block);
  const uint32_t qh = LoadU32(block + 2);
  const uint8_t* qs = block + 6;
  for (int j = 0; j < kQK / 2; ++j) {
    const int high0 = static_cast<int>((qh >> j) & 1u) << 4;
    const int high1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
    y[j] = static_cast<float>(((qs[j] & 0x0f) | high0) - 16) * d;
    y[j + kQK / 2] = static_cast<float>(((qs[j] >> 4) | high1) - 16) * d;
  }
}

// Q5_1 block (24 bytes): f16 d | f16 m | u32 qh | qs[16]; value = q * d + m.
void DequantizeQ5_1(const uint8_t* block, float* y) {
  const float d = LoadHalf(block);
  const float m = LoadHalf(block + 2);
  const uint32_t qh = LoadU32(block + 4);
  const uint8_t* qs = block + 8;
  for (int j = 0; j < kQK / 2; ++j) {
    const int high0 = static_cast<int>((qh >> j) & 1u) << 4;
    const int high1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
    y[j] = static_cast<float>((qs[j] & 0x0f) | high0) * d + m;
    y[j + kQK / 2] = static_cast<float>((qs[j] >> 4) | high1) * d + m;
  }
}

// Q8_0 block (34 bytes): f16 d | int8 qs[32]; value = q * d.
void DequantizeQ8_0(const uint8_t* block, float* y) {
  const float d = LoadHalf(block);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(static_cast<int8_t>(block[2 + j])) * d;
}

// The 12 scale bytes of Q4_K/Q5_K hold eight 6-bit (scale, min) pairs, one per
// 32-element sub-block: pairs 0-3 in the low 6 bits of bytes 0-3 / 4-7, pairs
// 4-7 in the nibbles of bytes 8-11 plus the top 2 bits of bytes 0-3 / 4-7.
void ScaleMinK4(int j, const uint8_t* scales, int* scale, int* min) {
  if (j < 4) {
    *scale = scales[j] & 63;
    *min = scales[j + 4] & 63;
  } else {
    *scale = (scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4);
    *min = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

// Q4_K super-block (144 bytes): f16 d | f16 dmin | scales[12] | qs[128].
// Each 64 elements use 32 bytes of qs: low nibbles for the first 32 (sub-block
// 2i), high nibbles for the next 32 (sub-block 2i+1); value = d*sc * q - dmin*m.
void DequantizeQ4_K(const uint8_t* block, float* y) {
  const float d = LoadHalf(block);
  const float dmin = LoadHalf(block + 2);
  const uint8_t* scales = block + 4;
  const uint8_t* q = block + 16;
  for (int sub = 0; sub < 8; sub += 2) {
    int sc = 0, m = 0;
    ScaleMinK4(sub, scales, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    ScaleMinK4(sub + 1, scales, &sc, &m);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0f) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    q += 32;
  }
}

// Q5_K super-block (176 bytes): f16 d | f16 dmin | scales[12] | qh[32] | qs[128].
// As Q4_K, with the 5th bit of element l of sub-block s in bit s of qh[l].
void DequantizeQ5_K(const uint8_t* block, float* y) {
  const float d = LoadHalf(block);
  const float dmin = LoadHalf(block + 2);
  const uint8_t* scales = block + 4;
  const uint8_t* qh = block + 16;
  const uint8_t* ql = block + 48;
  for (int sub = 0; sub < 8; sub += 2) {
    int sc = 0, m = 0;
    ScaleMinK4(sub, scales, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    ScaleMinK4(sub + 1, scales, &sc, &m);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
    const uint8_t bit1 = static_cast<uint8_t>(1u << sub);
    const uint8_t bit2 = static_cast<uint8_t>(1u << (sub + 1));
    for (int l = 0; l < 32; ++l) {
      const int q = (ql[l] & 0x0f) + ((qh[l] & bit1) ? 16 : 0);
      *y++ = d1 * static_cast<float>(q) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      const int q = (ql[l] >> 4) + ((qh[l] & bit2) ? 16 : 0);
      *y++ = d2 * static_cast<float>(q) - m2;
    }
    ql += 32;
  }
}

// Q6_K super-block (210 bytes): ql[128] (low 4 bits) | qh[64] (high 2 bits) |
// int8 scales[16] (one per 16 elements) | f16 d; value = d*scale * (q - 32).
// Each half (128 elements) uses 64 bytes of ql and 32 of qh: element l + 32k
// (k = 0..3) takes a nibble of ql[l + 32*(k&1)] and bits 2k..2k+1 of qh[l].
void DequantizeQ6_K(const uint8_t* block, float* y) {
  const uint8_t* ql = block;
  const uint8_t* qh = block + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(block + 192);
  const float d = LoadHalf(block + 208);
  for (int half = 0; half < kQKK / 128; ++half) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

using BlockDecoder = void (*)(const uint8_t* block, float* y);

BlockDecoder DecoderFor(DType type) {
  switch (type) {
    case DType::kQ4_0:
      return DequantizeQ4_0;
    case DType::kQ4_1:
      return DequantizeQ4_1;
    case DType::kQ5_0:
      return DequantizeQ5_0;
    case DType::kQ5_1:
      return DequantizeQ5_1;
    case DType::kQ8_0:
      return DequantizeQ8_0;
    case DType::kQ4_K:
      return DequantizeQ4_K;
    case DType::kQ5_K:
      return DequantizeQ5_K;
    case DType::kQ6_K:
      return DequantizeQ6_K;
    default:
      return nullptr;
  }
}

}  // namespace

bool CanDequantize(DType type) {
  return type == DType::kF32 || type == DType::kF16 || type == DType::kBF16 ||
         DecoderFor(type) != nullptr;
}

Status DequantizeRow(DType type, const uint8_t* src, float* dst, int64_t n) {
  if (!CanDequantize(type)) {
    return UnsupportedError("dequantizing " + std::string(DTypeName(type)) +
                            " tensors is not supported");
  }
  const DTypeTraits traits = Traits(type);
  if (n < 0 || n % traits.block_size != 0) {
    return InvalidArgumentError("cannot dequantize " + std::to_string(n) + " " +
                                std::string(traits.name) + " elements: not a multiple of the " +
                                "block size " + std::to_string(traits.block_size));
  }
  switch (type) {
    case DType::kF32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return Status::Ok();
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = Fp16ToFp32(LoadU16(src + 2 * i));
      return Status::Ok();
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFp32(LoadU16(src + 2 * i));
      return Status::Ok();
    default:
      break;
  }
  const BlockDecoder decode = DecoderFor(type);
  const int64_t blocks = n / traits.block_size;
  for (int64_t b = 0; b < blocks; ++b) {
    decode(src + b * traits.type_size, dst + b * traits.block_size);
  }
  return Status::Ok();
}

}  // namespace pier
