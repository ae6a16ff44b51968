// Element types of tensors, numbered as GGUF/ggml number them.
//
// Quantized types store elements in blocks: `block_size` elements packed into
// `type_size` bytes. A row of n elements (n a multiple of block_size) takes
// n / block_size * type_size bytes. Plain data; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace pier {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
  kNVFP4 = 40,
  kQ1_0 = 41,
};

struct DTypeTraits {
  std::string_view name;  // "q4_1", as ggml spells it
  int64_t block_size;     // elements per block (1 for plain types)
  int64_t type_size;      // bytes per block
  bool supported;         // Pier can read and dequantize it
};

// Traits of a raw GGUF type number; nullopt for a number ggml never defined.
std::optional<DTypeTraits> GetDTypeTraits(uint32_t raw_type);
// Traits of a known type.
DTypeTraits Traits(DType type);
std::string_view DTypeName(DType type);

// Bytes taken by `n_elements` elements of `type`; nullopt when n_elements is
// negative or not a multiple of the block size, or the byte count overflows.
std::optional<uint64_t> RowBytes(DType type, int64_t n_elements);

}  // namespace pier
