#include "kernels/cpu/float_matmul.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/thread_pool.h"

// Lanes16 values never cross a call boundary that is not inlined (see encoder_ops.cpp).
#pragma GCC diagnostic ignored "-Wpsabi"

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define PIER_FLOAT_CLONES __attribute__((target_clones("avx512f", "avx2,fma", "default")))
#else
#define PIER_FLOAT_CLONES
#endif

namespace pier::kernels {
namespace {

typedef float Lanes16 __attribute__((vector_size(64)));
constexpr int kLanes = 16;
constexpr int kRows = 4;
constexpr int kTokens = 4;

[[gnu::always_inline]] inline Lanes16 Load16(const float* p) {
  Lanes16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Four sums of 16 lanes at once, each reduced in exactly Sum16's order (lane l with l + 8,
// then l + 4, l + 2, l + 1), by shuffles that keep four vectors' partial sums side by side.
[[gnu::always_inline]] inline void Sum16x4(const Lanes16& a, const Lanes16& b, const Lanes16& c,
                                           const Lanes16& d, float out[4]) {
  typedef int Index16 __attribute__((vector_size(64)));
  // Step 1: a_lo + a_hi | b_lo + b_hi, and the same for c, d (8 lanes each).
  const Lanes16 ab =
      __builtin_shuffle(a, b, Index16{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23}) +
      __builtin_shuffle(a, b,
                        Index16{8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31});
  const Lanes16 cd =
      __builtin_shuffle(c, d, Index16{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23}) +
      __builtin_shuffle(c, d,
                        Index16{8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31});
  // Step 2: within each 8, l + (l + 4): a(4) b(4) c(4) d(4).
  const Lanes16 q =
      __builtin_shuffle(ab, cd, Index16{0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27}) +
      __builtin_shuffle(ab, cd,
                        Index16{4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31});
  // Steps 3 and 4 on 4 lanes per sum.
  float s[16];
  std::memcpy(s, &q, sizeof(s));
  for (int v = 0; v < 4; ++v) {
    const float* p = s + 4 * v;
    out[v] = (p[0] + p[2]) + (p[1] + p[3]);
  }
}

[[gnu::always_inline]] inline float Sum16(const Lanes16& v) {
  // A fixed tree: (0+8, 1+9, ...) then halves again.
  float s[kLanes];
  std::memcpy(s, &v, sizeof(s));
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int i = 0; i < width; ++i) s[i] = s[i] + s[i + width];
  }
  return s[0];
}

// Rows [row_begin, row_end) for every token. Full 4 x 4 tiles take the register-blocked loop;
// the edges run one pair at a time with the same per-pair arithmetic.
PIER_FLOAT_CLONES
void Rows(const FloatMatrix& w, const float* x, int64_t n_tokens, float* y, int64_t ldy,
          int64_t row_begin, int64_t row_end) {
  const int64_t n = w.n_cols;
  // Blocks of tokens small enough to stay in L1 while this thread's rows stream past them.
  const int64_t block = std::max<int64_t>(kTokens, (32 * 1024 / (n * 4)) / kTokens * kTokens);
  for (int64_t b0 = 0; b0 < n_tokens; b0 += block) {
    const int64_t b1 = std::min(n_tokens, b0 + block);
    const int64_t full_end = b0 + (b1 - b0) / kTokens * kTokens;  // whole 4-token tiles
    int64_t r0 = row_begin;
    for (; r0 + kRows <= row_end; r0 += kRows) {
      const float* wr[kRows];
      for (int i = 0; i < kRows; ++i) wr[i] = w.data + (r0 + i) * n;
      for (int64_t t0 = b0; t0 < full_end; t0 += kTokens) {
        Lanes16 acc[kRows][kTokens] = {};
        const float* xt[kTokens];
        for (int j = 0; j < kTokens; ++j) xt[j] = x + (t0 + j) * n;
        for (int64_t k = 0; k < n; k += kLanes) {
          Lanes16 wv[kRows];
          for (int i = 0; i < kRows; ++i) wv[i] = Load16(wr[i] + k);
          for (int j = 0; j < kTokens; ++j) {
            const Lanes16 xv = Load16(xt[j] + k);
            for (int i = 0; i < kRows; ++i) acc[i][j] += wv[i] * xv;
          }
        }
        for (int j = 0; j < kTokens; ++j) {
          Sum16x4(acc[0][j], acc[1][j], acc[2][j], acc[3][j], y + (t0 + j) * ldy + r0);
        }
      }
    }
    // Edges one (row, token) pair at a time, with the same per-pair arithmetic: the rows past
    // the last whole tile for every token of the block, and the tokens past the last whole
    // tile for the tiled rows.
    const auto one = [&](int64_t r, int64_t t) {
      Lanes16 acc = {};
      const float* wr = w.data + r * n;
      const float* xt = x + t * n;
      for (int64_t k = 0; k < n; k += kLanes) acc += Load16(wr + k) * Load16(xt + k);
      y[t * ldy + r] = Sum16(acc);
    };
    for (int64_t r = r0; r < row_end; ++r) {
      for (int64_t t = b0; t < b1; ++t) one(r, t);
    }
    for (int64_t r = row_begin; r < r0; ++r) {
      for (int64_t t = full_end; t < b1; ++t) one(r, t);
    }
  }
}

}  // namespace

Status FloatMatMul(const FloatMatrix& w, const float* x, int64_t n_tokens, float* y, int64_t ldy,
                   ThreadPool& pool) {
  if (w.n_rows < 0 || w.n_cols <= 0 || w.n_cols % kLanes != 0 || n_tokens < 0 || ldy < w.n_rows) {
    return InvalidArgumentError(
        "FloatMatMul: a " + std::to_string(w.n_rows) + " x " + std::to_string(w.n_cols) +
        " matrix (columns a multiple of 16) with ldy " + std::to_string(ldy));
  }
  if (n_tokens == 0 || w.n_rows == 0) return Status::Ok();
  // Chunks of whole 4-row tiles, enough work each to pay for the hand-off.
  const int64_t tiles = (w.n_rows + kRows - 1) / kRows;
  const int64_t min_tiles =
      std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(1, n_tokens * w.n_cols));
  pool.ParallelFor(tiles, min_tiles, [&](int64_t begin, int64_t end) {
    Rows(w, x, n_tokens, y, ldy, begin * kRows, std::min(w.n_rows, end * kRows));
  });
  return Status::Ok();
}

}  // namespace pier::kernels
