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
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
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

}  // namespace pier
