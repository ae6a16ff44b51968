// PIER_HD: a function written once for the host and the GPU. Under nvcc it is
// `__host__ __device__` and always inlined; under g++ plain `inline` C++, so host code and
// tests include the same header without any CUDA header. For the arithmetic the CPU and the
// GPU must compute to the same bits (tensor/float16_bits.h, kernels/cuda/quant_dot.h,
// row_math.h, attention_math.h). Such headers stay C++17: nvcc builds the .cu files as C++17.
#pragma once

#if defined(__CUDACC__)
#define PIER_HD __host__ __device__ __forceinline__
#else
#define PIER_HD inline
#endif
