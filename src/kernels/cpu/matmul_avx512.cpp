// MatMul's AVX-512VL/BW/VNNI on 256-bit vectors (32 registers, vpdpbusd) path; see matmul_x86.inc.
// Only reached after BestIsa() / IsaSupported() checked the CPU.

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "kernels/cpu/matmul_internal.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")

#define PIER_X86_VNNI 1
#define PIER_X86_TILE_TOKENS 4
#define PIER_X86_TILE_ROWS 4

namespace pier::kernels::internal::avx512 {
#include "kernels/cpu/matmul_packed_x86.inc"
#include "kernels/cpu/matmul_x86.inc"
}  // namespace pier::kernels::internal::avx512

#pragma GCC pop_options

namespace pier::kernels::internal {

const IsaKernels& Avx512Kernels() {
  static const IsaKernels kernels{avx512::QuantizeRow, avx512::QuantizeEntries, avx512::QuantRows,
                                  avx512::FloatRows, avx512::PackedGroups};
  return kernels;
}

}  // namespace pier::kernels::internal
