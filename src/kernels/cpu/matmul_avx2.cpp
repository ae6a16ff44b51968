// MatMul's AVX2 + FMA + F16C (16 registers, maddubs/madd) path; see matmul_x86.inc.
// Only reached after BestIsa() / IsaSupported() checked the CPU.

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "kernels/cpu/matmul_internal.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#define PIER_X86_VNNI 0
#define PIER_X86_TILE_TOKENS 2
#define PIER_X86_TILE_ROWS 2

namespace pier::kernels::internal::avx2 {
#include "kernels/cpu/matmul_packed_x86.inc"
#include "kernels/cpu/matmul_x86.inc"
}  // namespace pier::kernels::internal::avx2

#pragma GCC pop_options

namespace pier::kernels::internal {

const IsaKernels& Avx2Kernels() {
  static const IsaKernels kernels{avx2::QuantizeRow, avx2::QuantizeEntries, avx2::QuantRows,
                                  avx2::FloatRows, avx2::PackedGroups};
  return kernels;
}

}  // namespace pier::kernels::internal
