// The GPU's paged attention and K/V writes against the host golden of attention_math.h
// (which cuda_attention_math_test checks against float64 and the CPU kernel): bit for bit at
// context lengths around the block and split edges, with shuffled block tables; a query's
// result the same alone, in a batch, and as part of a prefill chunk; K/V written by one
// prefill launch the same bytes as written one decode token at a time. Skips with the
// reason when no GPU is usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/attention_math.h"
#include "kernels/cuda/quant_dot.h"
#include "tests/kernels/cuda_test_device.h"
#include "tests/kernels/random_gguf.h"
#include "tests/kernels/random_kv.h"

namespace pier::cuda {
namespace {

using testing::RandomKvCache;
using testing::RandomQueries;
using testing::SameBits;

const std::vector<int64_t> kLengths = {1, 15, 16, 17, 511, 512, 513, 4097};

class CudaAttentionTest : public CudaBuffersTest {
 protected:
  static PierCudaKvGeometry ToC(const attn::KvGeometry& g) {
    return {g.bytes_per_block, g.key_offset, g.value_offset, g.n_kv_head, g.head_dim};
  }

  // Runs attention for the given (sequence, position) queries in one launch.
  // With `xq`, the merge also quantizes the rows (args.out_xq), downloaded into it.
  std::vector<float> Attend(const RandomKvCache& kv, const uint8_t* d_kv, const int32_t* d_tables,
                            int64_t n_head, const std::vector<float>& q,
                            const std::vector<int32_t>& sequences,
                            const std::vector<int32_t>& positions,
                            std::vector<uint8_t>* xq = nullptr) {
    const int64_t n = static_cast<int64_t>(positions.size()), hd = kv.head_dim;
    std::vector<int32_t> offsets;
    for (size_t i = 0; i < sequences.size(); ++i) {
      offsets.push_back(kv.table_offsets[sequences[i]]);
    }
    std::vector<int32_t> split_first(positions.size());
    std::vector<int32_t> split_query(
        static_cast<size_t>(attn::IndexSplits(positions.data(), n, split_first.data(), nullptr)));
    const int64_t total =
        attn::IndexSplits(positions.data(), n, split_first.data(), split_query.data());
    float* out = Put(std::vector<float>(n * n_head * hd));
    PierCudaAttentionArgs args{};
    args.q = Put(q);
    args.out = out;
    args.n_queries = n;
    args.n_head = n_head;
    args.positions = Put(positions);
    args.table_offsets = Put(offsets);
    args.block_tables = d_tables;
    args.kv_base = d_kv;
    args.geometry = ToC(kv.geometry);
    args.split_first = Put(split_first);
    args.split_query = Put(split_query);
    args.total_splits = total;
    args.scratch = Put(std::vector<float>(attn::ScratchFloats(total, n_head, hd)));
    const int64_t xq_bytes = n * quant::ActivationRowBytes(n_head * hd);
    if (xq != nullptr) args.out_xq = Put(std::vector<uint8_t>(xq_bytes));
    const Status s = device_->PagedAttention(args, stream());
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (xq != nullptr) *xq = Get(static_cast<uint8_t*>(args.out_xq), xq_bytes);
    return Get(out, n * n_head * hd);
  }

  void CheckShape(int64_t n_head, int64_t n_kv_head, int64_t hd, uint32_t seed) {
    SCOPED_TRACE(std::to_string(n_head) + " heads, " + std::to_string(n_kv_head) +
                 " K/V heads of " + std::to_string(hd));
    RandomKvCache kv(2, 1, n_kv_head, hd, kLengths, seed);
    const uint8_t* d_kv = Put(kv.bytes);
    const int32_t* d_tables = Put(kv.tables);
    // One decode query per sequence (its last position), and a prefill chunk of the longest
    // sequence across a split edge (positions 250..262).
    std::vector<int32_t> sequences, positions;
    for (size_t i = 0; i < kLengths.size(); ++i) {
      sequences.push_back(static_cast<int32_t>(i));
      positions.push_back(static_cast<int32_t>(kLengths[i] - 1));
    }
    for (int32_t p = 250; p <= 262; ++p) {
      sequences.push_back(static_cast<int32_t>(kLengths.size() - 1));
      positions.push_back(p);
    }
    const int64_t n = static_cast<int64_t>(positions.size()), row = n_head * hd;
    const std::vector<float> q = RandomQueries(n * row, seed + 1);
    std::vector<uint8_t> xq;
    const std::vector<float> batch =
        Attend(kv, d_kv, d_tables, n_head, q, sequences, positions, &xq);
    // The merge's own quantization: the bytes the separate quantization makes of its rows.
    std::vector<uint8_t> xq_golden(xq.size());
    quant::QuantizeActivationsGolden(batch.data(), n, row, xq_golden.data());
    ASSERT_EQ(xq.size(), xq_golden.size());
    const auto differ = std::mismatch(xq.begin(), xq.end(), xq_golden.begin());
    ASSERT_TRUE(differ.first == xq.end())
        << "the merge's quantized rows differ from quantizing its output, first at byte "
        << (differ.first - xq.begin());
    const std::vector<float> unquantized =
        Attend(kv, d_kv, d_tables, n_head, q, sequences, positions);
    ASSERT_EQ(std::memcmp(unquantized.data(), batch.data(), batch.size() * sizeof(float)), 0)
        << "quantizing in the merge changed its output";
    for (int64_t i = 0; i < n; ++i) {
      // Golden.
      for (int64_t h = 0; h < n_head; ++h) {
        std::vector<float> want(hd);
        attn::AttendGolden(q.data() + i * row + h * hd, positions[i], kv.table(sequences[i]),
                           kv.bytes.data(), kv.geometry, h / (n_head / n_kv_head), want.data());
        for (int64_t d = 0; d < hd; ++d) {
          ASSERT_TRUE(SameBits(batch[i * row + h * hd + d], want[d]))
              << "query " << i << " (position " << positions[i] << ") head " << h << " dim " << d
              << ": gpu " << batch[i * row + h * hd + d] << " golden " << want[d];
        }
      }
      // Alone.
      const std::vector<float> alone =
          Attend(kv, d_kv, d_tables, n_head,
                 std::vector<float>(q.begin() + i * row, q.begin() + (i + 1) * row), {sequences[i]},
                 {positions[i]});
      ASSERT_EQ(std::memcmp(alone.data(), batch.data() + i * row, row * sizeof(float)), 0)
          << "query " << i << " alone differs from the batch";
    }
  }
};

TEST_F(CudaAttentionTest, DefaultModelShapeMatchesTheGoldenAloneAndInABatch) {
  CheckShape(9, 3, 64, 1);  // SmolLM2-135M: 9 heads, 3 K/V heads of 64
}

TEST_F(CudaAttentionTest, SevenBShapeMatchesTheGoldenAloneAndInABatch) {
  CheckShape(32, 32, 128, 2);  // Llama 2 7B
}

TEST_F(CudaAttentionTest, PrefillAndDecodeWritesGiveTheSameCache) {
  const int64_t n_kv_head = 3, hd = 64, n_tokens = 40;
  RandomKvCache kv(2, 1, n_kv_head, hd, {n_tokens}, 5);
  const std::vector<float> k = RandomQueries(n_tokens * n_kv_head * hd, 6);
  const std::vector<float> v = RandomQueries(n_tokens * n_kv_head * hd, 7);
  std::vector<int32_t> positions(n_tokens), offsets(n_tokens, 0);
  for (int32_t i = 0; i < n_tokens; ++i) positions[i] = i;
  // Expected: the random cache with every written row replaced by the f16 of k and v.
  std::vector<uint8_t> expected = kv.bytes;
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t e = 0; e < n_kv_head * hd; ++e) {
      const int64_t offset = kv.table(0)[t / 16] * kv.geometry.bytes_per_block +
                             attn::RowOffset(kv.geometry, t % 16, e / hd) + 2 * (e % hd);
      const uint16_t hk = attn::FloatToHalf(k[t * n_kv_head * hd + e]);
      const uint16_t hv = attn::FloatToHalf(v[t * n_kv_head * hd + e]);
      std::memcpy(&expected[offset + kv.geometry.key_offset], &hk, 2);
      std::memcpy(&expected[offset + kv.geometry.value_offset], &hv, 2);
    }
  }
  const PierCudaKvGeometry g = ToC(kv.geometry);
  uint8_t* prefill = Put(kv.bytes);
  uint8_t* decode = Put(kv.bytes);
  const int32_t* d_tables = Put(kv.tables);
  const float* dk = Put(k);
  const float* dv = Put(v);
  const int32_t* d_positions = Put(positions);
  const int32_t* d_offsets = Put(offsets);
  ASSERT_TRUE(
      device_->KvWrite(dk, dv, n_tokens, d_positions, d_offsets, d_tables, prefill, g, stream())
          .ok());
  const int64_t row = n_kv_head * hd;
  for (int64_t t = 0; t < n_tokens; ++t) {
    ASSERT_TRUE(device_
                    ->KvWrite(dk + t * row, dv + t * row, 1, d_positions + t, d_offsets + t,
                              d_tables, decode, g, stream())
                    .ok());
  }
  EXPECT_EQ(Get(prefill, kv.bytes.size()), expected);
  EXPECT_EQ(Get(decode, kv.bytes.size()), expected);
}

// RoPE of q and k and the K/V write in one launch against the three launches it replaces:
// the same q, the same cache bytes, k left as it was; with full and partial rotation and a
// padding row (position -1) that writes nothing.
TEST_F(CudaAttentionTest, RopeWithTheKvWriteIsTheSeparateLaunchesBitForBit) {
  for (const int64_t n_rot : {int64_t{64}, int64_t{32}}) {
    SCOPED_TRACE(std::to_string(n_rot) + " of 64 rotated");
    const int64_t n_head = 9, n_kv_head = 3, hd = 64, n_tokens = 21;
    RandomKvCache kv(2, 1, n_kv_head, hd, {n_tokens}, 11);
    const std::vector<float> q = RandomQueries(n_tokens * n_head * hd, 12);
    const std::vector<float> k = RandomQueries(n_tokens * n_kv_head * hd, 13);
    const std::vector<float> v = RandomQueries(n_tokens * n_kv_head * hd, 14);
    std::vector<float> cos_sin(n_tokens * (n_rot / 2) * 2);
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t i = 0; i < n_rot / 2; ++i) {
        const double angle = static_cast<double>(t) * std::pow(10000.0, -2.0 * i / n_rot);
        cos_sin[(t * (n_rot / 2) + i) * 2] = static_cast<float>(std::cos(angle));
        cos_sin[(t * (n_rot / 2) + i) * 2 + 1] = static_cast<float>(std::sin(angle));
      }
    }
    std::vector<int32_t> positions(n_tokens), offsets(n_tokens, 0);
    for (int32_t i = 0; i < n_tokens; ++i) positions[i] = i;
    positions[7] = -1;  // a padding row
    const PierCudaKvGeometry g = ToC(kv.geometry);
    const int32_t* d_tables = Put(kv.tables);
    const int32_t* d_positions = Put(positions);
    const int32_t* d_offsets = Put(offsets);
    const float* d_cos_sin = Put(cos_sin);
    // Separate: RoPE on q, RoPE on k, then the write.
    float* q_a = Put(q);
    float* k_a = Put(k);
    const float* v_d = Put(v);
    uint8_t* cache_a = Put(kv.bytes);
    ASSERT_TRUE(device_->Rope(q_a, n_tokens, n_head, hd, n_rot, false, d_cos_sin, stream()).ok());
    ASSERT_TRUE(
        device_->Rope(k_a, n_tokens, n_kv_head, hd, n_rot, false, d_cos_sin, stream()).ok());
    ASSERT_TRUE(
        device_->KvWrite(k_a, v_d, n_tokens, d_positions, d_offsets, d_tables, cache_a, g, stream())
            .ok());
    // Fused.
    float* q_b = Put(q);
    const float* k_b = Put(k);
    uint8_t* cache_b = Put(kv.bytes);
    const Status fused =
        device_->RopeKvWrite(q_b, k_b, v_d, n_tokens, n_head, n_rot, d_cos_sin, d_positions,
                             d_offsets, d_tables, cache_b, g, stream());
    ASSERT_TRUE(fused.ok()) << fused.ToString();
    const std::vector<float> got_q = Get(q_b, q.size()), want_q = Get(q_a, q.size());
    ASSERT_EQ(std::memcmp(got_q.data(), want_q.data(), q.size() * sizeof(float)), 0);
    EXPECT_EQ(Get(cache_b, kv.bytes.size()), Get(cache_a, kv.bytes.size()));
    const std::vector<float> k_after = Get(k_b, k.size());
    EXPECT_EQ(std::memcmp(k_after.data(), k.data(), k.size() * sizeof(float)), 0)
        << "k itself is left as it was";
  }
}

TEST_F(CudaAttentionTest, BadArgumentsAreRefusedWithTheReason) {
  RandomKvCache kv(1, 0, 2, 64, {16}, 8);
  PierCudaAttentionArgs args{};
  args.n_queries = 1;
  args.n_head = 3;  // not a multiple of 2 K/V heads
  args.geometry = ToC(kv.geometry);
  args.total_splits = 1;
  float* buf = Put(std::vector<float>(4096));
  args.q = buf;
  args.out = buf;
  args.scratch = buf;
  args.positions = args.table_offsets = args.block_tables = reinterpret_cast<int32_t*>(buf);
  args.split_first = args.split_query = reinterpret_cast<int32_t*>(buf);
  args.kv_base = buf;
  Status s = device_->PagedAttention(args, stream());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.ToString().find("multiple of the K/V heads"), std::string::npos) << s.ToString();
  args.n_head = 2;
  args.geometry.head_dim = 512;  // beyond 256
  s = device_->PagedAttention(args, stream());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(device_->Synchronize(stream()).ok());
}

}  // namespace
}  // namespace pier::cuda
