// The GPU attention's arithmetic (kernels/cuda/attention_math.h) run on the CPU: its f16
// conversion against the CPU's, and its split-and-merge attention against a float64 softmax
// and against the CPU's PagedAttention on the same paged cache, within float rounding (the
// two orders differ by design: the GPU's splits at fixed positions). Needs no GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "common/thread_pool.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cuda/attention_math.h"
#include "tensor/float16.h"
#include "tests/kernels/random_gguf.h"
#include "tests/kernels/random_kv.h"

namespace pier::cuda {
namespace {

using testing::RandomKvCache;
using testing::RandomQueries;
using testing::SameBits;

TEST(CudaAttentionMathTest, FloatToHalfIsTheCpusConversion) {
  std::mt19937 rng(1);
  std::vector<uint32_t> patterns = {0u,          0x80000000u, 0x7f800000u, 0xff800000u,
                                    0x7fc00000u, 0x477fe000u, 0x477ff000u, 0x47800000u,
                                    0x38800000u, 0x387fffffu, 0x33000000u, 0x33000001u};
  for (int i = 0; i < 2000000; ++i) patterns.push_back(static_cast<uint32_t>(rng()));
  for (uint32_t bits : patterns) {
    float f;
    std::memcpy(&f, &bits, 4);
    ASSERT_EQ(attn::FloatToHalf(f), Fp32ToFp16(f)) << std::hex << bits;
  }
}

// float64 attention of one query over positions 0..position, from the same f16 values.
std::vector<double> Reference(const float* q, int64_t position, const RandomKvCache& kv,
                              const int32_t* table, int64_t kv_head) {
  const int64_t hd = kv.head_dim;
  std::vector<double> scores(position + 1);
  double max = -INFINITY;
  for (int64_t p = 0; p <= position; ++p) {
    const uint16_t* k = attn::KvRow(kv.bytes.data(), kv.geometry, table, p, kv_head, false);
    double s = 0;
    for (int64_t d = 0; d < hd; ++d) s += static_cast<double>(q[d]) * Fp16ToFp32(k[d]);
    scores[p] = s / std::sqrt(static_cast<double>(hd));
    max = std::max(max, scores[p]);
  }
  std::vector<double> out(hd, 0.0);
  double sum = 0;
  for (int64_t p = 0; p <= position; ++p) {
    const double w = std::exp(scores[p] - max);
    sum += w;
    const uint16_t* v = attn::KvRow(kv.bytes.data(), kv.geometry, table, p, kv_head, true);
    for (int64_t d = 0; d < hd; ++d) out[d] += w * Fp16ToFp32(v[d]);
  }
  for (double& o : out) o /= sum;
  return out;
}

TEST(CudaAttentionMathTest, SplitAttentionIsWithinRoundingOfFloat64AndTheCpu) {
  const std::vector<int64_t> lengths = {1, 15, 16, 17, 255, 256, 257, 511, 512, 513, 4097};
  const int64_t n_layer = 2, layer = 1, n_kv_head = 3, n_head = 9, hd = 64;
  RandomKvCache kv(n_layer, layer, n_kv_head, hd, lengths, 2);
  kernels::KvLayout layout{n_layer, 16, n_kv_head, hd, kernels::KvDtype::kF16};
  struct Store {
    RandomKvCache* cache;
  } store{&kv};
  const kernels::PagedKvView view(layout, &store, [](const void* s, int32_t block) {
    auto* c = static_cast<const Store*>(s)->cache;
    return reinterpret_cast<std::byte*>(c->bytes.data() + block * c->geometry.bytes_per_block);
  });
  ThreadPool pool(1);
  double worst_reference = 0, worst_cpu = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int64_t position = lengths[i] - 1;  // the sequence's last token, as in decode
    const std::vector<float> q = RandomQueries(n_head * hd, 10 + static_cast<uint32_t>(i));
    // The CPU kernel, this one query.
    std::vector<float> cpu(n_head * hd);
    const kernels::AttentionSpan span{kv.table(i), position, 1, 0};
    std::vector<float> scratch(
        kernels::PagedAttentionScratchFloats(layout, n_head, lengths[i], 1, 1));
    kernels::PagedAttention(view, layer, {&span, 1}, n_head, q.data(), cpu.data(), lengths[i],
                            scratch.data(), 1, 1, pool);
    for (int64_t h = 0; h < n_head; ++h) {
      std::vector<float> out(hd);
      const int64_t kv_head = h / (n_head / n_kv_head);
      attn::AttendGolden(q.data() + h * hd, position, kv.table(i), kv.bytes.data(), kv.geometry,
                         kv_head, out.data());
      const std::vector<double> ref =
          Reference(q.data() + h * hd, position, kv, kv.table(i), kv_head);
      for (int64_t d = 0; d < hd; ++d) {
        // Outputs are weighted means of values of magnitude ~1 (a few ~8).
        EXPECT_NEAR(out[d], ref[d], 2e-5) << "length " << lengths[i] << " head " << h;
        EXPECT_NEAR(out[d], cpu[h * hd + d], 2e-5) << "length " << lengths[i] << " head " << h;
        worst_reference = std::max(worst_reference, std::fabs(out[d] - ref[d]));
        worst_cpu = std::max(worst_cpu, std::fabs(static_cast<double>(out[d]) - cpu[h * hd + d]));
      }
    }
  }
  RecordProperty("worst_vs_float64", std::to_string(worst_reference));
  RecordProperty("worst_vs_cpu", std::to_string(worst_cpu));
  std::printf("largest difference: %.3g from float64, %.3g from the CPU kernel\n", worst_reference,
              worst_cpu);
}

// A query's golden depends on its position and K/V only: the same query against a copy of
// its context laid out in other blocks gives the same bits.
TEST(CudaAttentionMathTest, ResultDependsOnlyOnTheValuesNotOnTheBlocks) {
  const std::vector<int64_t> lengths = {600, 600};
  RandomKvCache kv(1, 0, 2, 128, lengths, 3);
  // Copy sequence 0's blocks onto sequence 1's.
  for (int64_t b = 0; b < (600 + 15) / 16; ++b) {
    std::memcpy(kv.bytes.data() + kv.table(1)[b] * kv.geometry.bytes_per_block,
                kv.bytes.data() + kv.table(0)[b] * kv.geometry.bytes_per_block,
                kv.geometry.bytes_per_block);
  }
  const std::vector<float> q = RandomQueries(128, 4);
  std::vector<float> a(128), b(128);
  attn::AttendGolden(q.data(), 599, kv.table(0), kv.bytes.data(), kv.geometry, 1, a.data());
  attn::AttendGolden(q.data(), 599, kv.table(1), kv.bytes.data(), kv.geometry, 1, b.data());
  for (int d = 0; d < 128; ++d) ASSERT_TRUE(SameBits(a[d], b[d])) << d;
}

// Each query gets exactly its own splits, numbered query by query.
TEST(CudaAttentionMathTest, SplitIndexGivesEachQueryItsOwnSplits) {
  const std::vector<int32_t> positions = {0, 255, 256, 4096, -1, 511};
  std::vector<int32_t> first(positions.size());
  const int64_t total = attn::IndexSplits(positions.data(), 6, first.data(), nullptr);
  EXPECT_EQ(total, 1 + 1 + 2 + 17 + 0 + 2);
  std::vector<int32_t> query(static_cast<size_t>(total), -7);
  EXPECT_EQ(attn::IndexSplits(positions.data(), 6, first.data(), query.data()), total);
  EXPECT_EQ(first, (std::vector<int32_t>{0, 1, 2, 4, 21, 21}));
  for (int64_t g = 0; g < total; ++g) {
    const int32_t q = query[g];
    ASSERT_GE(q, 0);
    EXPECT_GE(g, first[q]);
    EXPECT_LT(g - first[q], attn::SplitsFor(positions[q])) << "split " << g;
  }
}

}  // namespace
}  // namespace pier::cuda
