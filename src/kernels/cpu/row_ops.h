// Small per-token CPU operations of the transformer forward pass (RMSNorm, RoPE,
// SwiGLU, dot products), written so that every result depends only on the
// token's own row: each reduction runs in one fixed order (eight interleaved
// float lanes summed pairwise, as the quantized MatMul does), by one thread.
// Callers parallelize over rows, never inside a reduction.
//
// Thread-safety: pure functions over caller buffers.
#pragma once

#include <cstdint>

namespace pier::kernels::ops {

// sum_i a[i] * b[i]: lane l accumulates i = l mod 8; lanes summed in a fixed tree.
float Dot(const float* a, const float* b, int64_t n);

// y = x / sqrt(mean(x^2) + eps) * weight, for one row of n.  x, y, weight: [n]; y may be x.
void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* y);

// y[i] += a * x[i] for i < n.
void Axpy(float a, const float* x, int64_t n, float* y);

// gate[i] = silu(gate[i]) * up[i] = gate * sigmoid(gate) * up, for i < n, with the sigmoid
// from attention's Exp (within a few ulp of the true value); an element's bits do not
// depend on n or on its index.
void SiluMul(float* gate, const float* up, int64_t n);

// gate[i] = gelu(gate[i]) * up[i] with GELU's tanh approximation (Gemma's gelu_pytorch_tanh):
// gelu(g) = g * sigmoid(2u), u = sqrt(2/pi) * (g + 0.044715 g^3), which is
// 0.5 g (1 + tanh(u)); the sigmoid is SiluMul's. Same bit promise as SiluMul.
void GeluMul(float* gate, const float* up, int64_t n);

// y[i] = cap * tanh(y[i] / cap) for i < n (Gemma 2's logit soft-capping), with tanh made of
// attention's Exp: attention_lanes.h's Softcap, which the attention kernels use for scores.
void Softcap(float cap, int64_t n, float* y);

// y[i] *= a for i < n.
void Scale(float a, int64_t n, float* y);

// y[i] += x[i] for i < n.
void Add(const float* x, int64_t n, float* y);

// How RoPE pairs the dimensions of a head.
enum class RopeStyle : uint8_t {
  kNormal,  // adjacent pairs (x[2i], x[2i+1]) (llama GGUFs, whose Q/K rows are permuted)
  kNeox,    // halves (x[i], x[i + n_rot/2]) (qwen2, Hugging Face's rotate_half)
};

// Rotates the first n_rot dimensions of each of n_heads heads of one token.
//   x: [n_heads, head_dim]; cos_sin: [n_rot/2][2] (cos, sin) of this token's angles.
void Rope(RopeStyle style, float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot,
          const float* cos_sin);

}  // namespace pier::kernels::ops
