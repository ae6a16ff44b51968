// Paged attention and K/V writes on the GPU (see attention.h; the order of every operation is
// attention_math.h's).
//
// Split pass: one warp per (split of a query, head): blockIdx.x numbers the launch's splits
// query by query (attn::IndexSplits), so a query gets exactly its own. The query goes to
// shared memory; lane j
// scores positions j, j + 32, ... of the split (a whole dot product each, so no shuffles per
// position), the split's max is a warp max, lane j sums its positions' weights in order and
// the lanes meet in the xor tree; then lane j owns dimensions j, j + 32, ... and runs their
// fma chains over the split's positions in order. Merge pass: one thread per dimension.
#include "kernels/cuda/attention.h"
#include "kernels/cuda/warp_quantize.cuh"

namespace pier::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float MaxOf(float a, float b) { return a > b ? a : b; }

__global__ void __launch_bounds__(32) AttentionSplitKernel(PagedAttentionArgs a) {
  __shared__ float q_shared[attn::kMaxHeadDim];
  __shared__ float weights[attn::kSplit];
  const int64_t global_split = blockIdx.x, head = blockIdx.y;
  const int64_t query = a.split_query[global_split];
  if (query < 0) return;  // a slot past the launch's splits (graphs launch a fixed grid)
  const int64_t split = global_split - a.split_first[query];
  const int64_t position = a.positions[query];
  const int64_t first = split * attn::kSplit;
  if (split < 0 || first > position) return;  // an index that disagrees with the positions
  const attn::KvGeometry& g = a.geometry;
  const int64_t hd = g.head_dim;
  const int lane = static_cast<int>(threadIdx.x);
  const int64_t kv_head = head / (a.n_head / g.n_kv_head);
  const int32_t* table = a.block_tables + a.table_offsets[query];
  const float* q = a.q + (query * a.n_head + head) * hd;
  for (int64_t d = lane; d < hd; d += 32) q_shared[d] = q[d];
  __syncwarp();

  const int64_t end = first + attn::kSplit < position + 1 ? first + attn::kSplit : position + 1;
  const int n = static_cast<int>(end - first);
  const float scale = attn::InverseSqrtHeadDim(hd);
  float max = -INFINITY;
  for (int i = lane; i < n; i += 32) {
    const float score = attn::Score(
        q_shared, attn::KvRow(a.kv_base, g, table, first + i, kv_head, false), hd, scale);
    weights[i] = score;
    max = MaxOf(score, max);
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    max = MaxOf(__shfl_xor_sync(kFullMask, max, offset), max);
  }
  float sum = 0.0f;
  for (int i = lane; i < n; i += 32) {
    const float e = rowmath::Exp(weights[i] - max);
    weights[i] = e;
    sum = sum + e;
  }
  for (int offset = 16; offset > 0; offset >>= 1)
    sum = sum + __shfl_xor_sync(kFullMask, sum, offset);
  __syncwarp();

  float* out = a.scratch + (global_split * a.n_head + head) * (hd + 2);
  for (int64_t d = lane; d < hd; d += 32) {
    float o = 0.0f;
    for (int i = 0; i < n; ++i) {
      const uint16_t* v = attn::KvRow(a.kv_base, g, table, first + i, kv_head, true);
      o = quant::FmaRn(weights[i], quant::HalfToFloat(v[d]), o);
    }
    out[d] = o;
  }
  if (lane == 0) {
    out[hd] = max;
    out[hd + 1] = sum;
  }
}

__global__ void AttentionMergeKernel(PagedAttentionArgs a) {
  const int64_t head = blockIdx.x, query = blockIdx.y;
  const int64_t hd = a.geometry.head_dim;
  const int64_t d = threadIdx.x;
  if (d >= hd) return;  // never with out_xq (head_dim a multiple of 32): whole warps stay
  const int64_t position = a.positions[query];
  float value = __int_as_float(0x7fc00000);  // no splits (a padding row): nothing attended
  if (position >= 0) {
    const int64_t n_splits = attn::SplitsFor(position);
    const int64_t stride = a.n_head * (hd + 2);  // from one global split to the next
    const float* base = a.scratch + (a.split_first[query] * a.n_head + head) * (hd + 2);
    float big = -INFINITY;
    for (int64_t s = 0; s < n_splits; ++s) big = MaxOf(base[s * stride + hd], big);
    float sum = 0.0f, o = 0.0f;
    for (int64_t s = 0; s < n_splits; ++s) {
      const float* split = base + s * stride;
      const float w = rowmath::Exp(split[hd] - big);
      sum = quant::FmaRn(split[hd + 1], w, sum);
      o = quant::FmaRn(split[d], w, o);
    }
    value = o * (1.0f / sum);
  }
  a.out[(query * a.n_head + head) * hd + d] = value;
  if (a.out_xq != nullptr) {
    // The row's block (head * hd + d) / 32, from the values just written: the bytes the
    // separate quantization would write.
    const int64_t n_cols = a.n_head * hd;
    WarpQuantizeBlock(value, static_cast<int>(d & 31),
                      a.out_xq + query * quant::ActivationRowBytes(n_cols), n_cols,
                      (head * hd + d) / quant::kBlock);
  }
}

__global__ void KvWriteKernel(const float* __restrict__ k, const float* __restrict__ v,
                              int64_t n_tokens, const int32_t* __restrict__ positions,
                              const int32_t* __restrict__ table_offsets,
                              const int32_t* __restrict__ block_tables, uint8_t* kv_base,
                              attn::KvGeometry g) {
  const int64_t row = g.n_kv_head * g.head_dim;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n_tokens * row) return;
  const int64_t t = e / row, within = e % row;
  const int64_t kv_head = within / g.head_dim, d = within % g.head_dim;
  const int64_t p = positions[t];
  if (p < 0) return;  // a padding row: nothing to keep
  const int32_t* table = block_tables + table_offsets[t];
  const int64_t offset =
      static_cast<int64_t>(table[p / attn::kBlockPositions]) * g.bytes_per_block +
      attn::RowOffset(g, p % attn::kBlockPositions, kv_head) + 2 * d;
  *reinterpret_cast<uint16_t*>(kv_base + offset + g.key_offset) = attn::FloatToHalf(k[e]);
  *reinterpret_cast<uint16_t*>(kv_base + offset + g.value_offset) = attn::FloatToHalf(v[e]);
}

// One thread per (token, pair of elements) of the q heads, then the K/V heads: a q pair is
// rotated in place; a K/V pair's k is rotated in registers and written with its v.
__global__ void RopeKvWriteKernel(float* __restrict__ q, const float* __restrict__ k,
                                  const float* __restrict__ v, int64_t n_tokens, int64_t n_head,
                                  int64_t n_rot, const float* __restrict__ cos_sin,
                                  const int32_t* __restrict__ positions,
                                  const int32_t* __restrict__ table_offsets,
                                  const int32_t* __restrict__ block_tables, uint8_t* kv_base,
                                  attn::KvGeometry g) {
  const int64_t hd = g.head_dim, pairs = hd / 2, half_rot = n_rot / 2;
  const int64_t heads = n_head + g.n_kv_head;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n_tokens * heads * pairs) return;
  const int64_t t = e / (heads * pairs);
  const int64_t head = (e / pairs) % heads, i = e % pairs;
  const float* cs = cos_sin + (t * half_rot + i) * 2;
  if (head < n_head) {
    float* x = q + (t * n_head + head) * hd + 2 * i;
    if (i < half_rot) rowmath::RopePair(x, x + 1, cs[0], cs[1]);
    return;
  }
  const int64_t kv_head = head - n_head;
  const int64_t at = (t * g.n_kv_head + kv_head) * hd + 2 * i;
  float k0 = k[at], k1 = k[at + 1];
  if (i < half_rot) rowmath::RopePair(&k0, &k1, cs[0], cs[1]);
  const int64_t p = positions[t];
  if (p < 0) return;  // a padding row: nothing to keep
  const int32_t* table = block_tables + table_offsets[t];
  const int64_t offset =
      static_cast<int64_t>(table[p / attn::kBlockPositions]) * g.bytes_per_block +
      attn::RowOffset(g, p % attn::kBlockPositions, kv_head) + 4 * i;
  auto* keys = reinterpret_cast<uint16_t*>(kv_base + offset + g.key_offset);
  auto* values = reinterpret_cast<uint16_t*>(kv_base + offset + g.value_offset);
  keys[0] = attn::FloatToHalf(k0);
  keys[1] = attn::FloatToHalf(k1);
  values[0] = attn::FloatToHalf(v[at]);
  values[1] = attn::FloatToHalf(v[at + 1]);
}

bool GeometryOk(const attn::KvGeometry& g) {
  return g.n_kv_head > 0 && g.head_dim > 0 && g.head_dim <= attn::kMaxHeadDim &&
         g.bytes_per_block > 0 && g.key_offset >= 0 && g.value_offset >= 0 &&
         g.key_offset % 2 == 0 && g.value_offset % 2 == 0 && g.bytes_per_block % 2 == 0;
}

}  // namespace

cudaError_t LaunchPagedAttention(const PagedAttentionArgs& a, cudaStream_t stream) {
  if (a.n_queries == 0) return cudaSuccess;
  if (a.n_queries < 0 || a.n_queries > 65535 || !GeometryOk(a.geometry) || a.n_head <= 0 ||
      a.n_head > 65535 || a.n_head % a.geometry.n_kv_head != 0 || a.total_splits < 0 ||
      a.total_splits > 0x7fffffff || a.q == nullptr || a.out == nullptr || a.positions == nullptr ||
      a.table_offsets == nullptr || a.block_tables == nullptr || a.kv_base == nullptr ||
      a.split_first == nullptr ||
      (a.total_splits > 0 && (a.split_query == nullptr || a.scratch == nullptr)) ||
      (a.out_xq != nullptr && (a.geometry.head_dim % quant::kBlock != 0 ||
                               reinterpret_cast<uintptr_t>(a.out_xq) % 16 != 0))) {
    return cudaErrorInvalidValue;
  }
  if (a.total_splits > 0) {
    const dim3 split_grid(static_cast<unsigned>(a.total_splits), static_cast<unsigned>(a.n_head));
    AttentionSplitKernel<<<split_grid, 32, 0, stream>>>(a);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  const dim3 merge_grid(static_cast<unsigned>(a.n_head), static_cast<unsigned>(a.n_queries));
  AttentionMergeKernel<<<merge_grid, static_cast<unsigned>((a.geometry.head_dim + 31) / 32 * 32), 0,
                         stream>>>(a);
  return cudaGetLastError();
}

cudaError_t LaunchKvWrite(const float* k, const float* v, int64_t n_tokens,
                          const int32_t* positions, const int32_t* table_offsets,
                          const int32_t* block_tables, uint8_t* kv_base,
                          const attn::KvGeometry& geometry, cudaStream_t stream) {
  if (n_tokens == 0) return cudaSuccess;
  const int64_t elements = n_tokens * geometry.n_kv_head * geometry.head_dim;
  if (n_tokens < 0 || !GeometryOk(geometry) || k == nullptr || v == nullptr ||
      positions == nullptr || table_offsets == nullptr || block_tables == nullptr ||
      kv_base == nullptr || (elements + 255) / 256 > 0x7fffffff) {
    return cudaErrorInvalidValue;
  }
  KvWriteKernel<<<static_cast<unsigned>((elements + 255) / 256), 256, 0, stream>>>(
      k, v, n_tokens, positions, table_offsets, block_tables, kv_base, geometry);
  return cudaGetLastError();
}

cudaError_t LaunchRopeKvWrite(float* q, const float* k, const float* v, int64_t n_tokens,
                              int64_t n_head, int64_t n_rot, const float* cos_sin,
                              const int32_t* positions, const int32_t* table_offsets,
                              const int32_t* block_tables, uint8_t* kv_base,
                              const attn::KvGeometry& geometry, cudaStream_t stream) {
  if (n_tokens == 0) return cudaSuccess;
  const int64_t threads = n_tokens * (n_head + geometry.n_kv_head) * (geometry.head_dim / 2);
  if (n_tokens < 0 || !GeometryOk(geometry) || geometry.head_dim % 2 != 0 || n_head <= 0 ||
      n_head % geometry.n_kv_head != 0 || n_rot <= 0 || n_rot % 2 != 0 ||
      n_rot > geometry.head_dim || q == nullptr || k == nullptr || v == nullptr ||
      cos_sin == nullptr || positions == nullptr || table_offsets == nullptr ||
      block_tables == nullptr || kv_base == nullptr || (threads + 255) / 256 > 0x7fffffff) {
    return cudaErrorInvalidValue;
  }
  RopeKvWriteKernel<<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(
      q, k, v, n_tokens, n_head, n_rot, cos_sin, positions, table_offsets, block_tables, kv_base,
      geometry);
  return cudaGetLastError();
}

}  // namespace pier::cuda
