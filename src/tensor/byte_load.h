// Little-endian loads of unaligned scalars from raw bytes: GGUF fields and quantized blocks.
//
// One set of loaders for every reader of file bytes: the GGUF cursor (model/byte_reader.h),
// the reference dequantization (tensor/dequantize.cpp) and the CPU kernels' weight unpacking
// (kernels/cpu/weight_unpack.cpp). They copy with memcpy, which the compiler turns into one
// unaligned load, so they cost nothing in the dequantization loops. The bytes are taken as
// they are: the host is little-endian, as GGUF is (checked below). Pure functions;
// thread-safe.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tensor/float16.h"

namespace pier {

static_assert(std::endian::native == std::endian::little,
              "GGUF readers assume a little-endian host");

// The scalar T stored at `p` (any alignment).
template <typename T>
inline T LoadLittleEndian(const uint8_t* p) {
  static_assert(std::is_trivially_copyable_v<T>);
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

inline uint16_t LoadU16(const uint8_t* p) { return LoadLittleEndian<uint16_t>(p); }
inline uint32_t LoadU32(const uint8_t* p) { return LoadLittleEndian<uint32_t>(p); }
// An IEEE half at `p`, as f32 (exact).
inline float LoadHalf(const uint8_t* p) { return Fp16ToFp32(LoadU16(p)); }

}  // namespace pier
