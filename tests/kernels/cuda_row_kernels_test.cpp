// The GPU's per-token operations (kernels/cuda/row_kernels.h) against the host goldens of
// row_math.h (which cuda_row_math_test proves equal to the CPU runner's operations), bit for
// bit, at several token counts. Skips with the reason when no GPU is usable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/row_math.h"
#include "tests/kernels/cuda_test_device.h"
#include "tests/kernels/random_gguf.h"

namespace pier::cuda {
namespace {

using testing::kAllQuantTypes;
using testing::QuantTypeName;
using testing::SameBits;

constexpr int64_t kTokenCounts[] = {1, 3, 8, 33};

std::vector<float> Normal(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> value(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = value(rng);
  return v;
}

class CudaRowKernelsTest : public CudaBuffersTest {
 protected:
  static void ExpectSameFloats(const std::vector<float>& got, const std::vector<float>& want,
                               const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(SameBits(got[i], want[i]))
          << what << ": element " << i << ": gpu " << got[i] << " golden " << want[i];
    }
  }
};

TEST_F(CudaRowKernelsTest, AddRmsNormMatchesTheGolden) {
  for (int64_t n : {96, 576, 4096}) {  // 96: rows with padding
    for (int64_t n_tokens : kTokenCounts) {
      SCOPED_TRACE(std::to_string(n_tokens) + " tokens of " + std::to_string(n));
      const std::vector<float> x0 = Normal(n_tokens * n, 1, 3.0f), add = Normal(n_tokens * n, 2);
      const std::vector<float> weight = Normal(n, 3);
      const size_t xq_bytes = quant::ActivationRowBytes(n) * n_tokens;
      std::vector<float> gx = x0, gy(n_tokens * n);
      std::vector<uint8_t> gq(xq_bytes);
      rowmath::AddRmsNormGolden(gx.data(), add.data(), weight.data(), n_tokens, n, 1e-5f, gy.data(),
                                gq.data());

      float* dx = Put(x0);
      float* dy = Blank<float>(n_tokens * n);
      uint8_t* dq = Blank<uint8_t>(xq_bytes);
      const Status s =
          device_->AddRmsNorm(dx, Put(add), Put(weight), n_tokens, n, 1e-5f, dy, dq, stream());
      ASSERT_TRUE(s.ok()) << s.ToString();
      ExpectSameFloats(Get(dx, gx.size()), gx, "residual");
      ExpectSameFloats(Get(dy, gy.size()), gy, "normalized");
      EXPECT_EQ(Get(dq, xq_bytes), gq) << "activation blocks";

      // Without the add and with only one output.
      std::vector<float> gx2 = x0, gy2(n_tokens * n);
      rowmath::AddRmsNormGolden(gx2.data(), nullptr, weight.data(), n_tokens, n, 1e-6f, gy2.data(),
                                nullptr);
      float* dx2 = Put(x0);
      float* dy2 = Blank<float>(n_tokens * n);
      ASSERT_TRUE(
          device_->AddRmsNorm(dx2, nullptr, Put(weight), n_tokens, n, 1e-6f, dy2, nullptr, stream())
              .ok());
      ExpectSameFloats(Get(dy2, gy2.size()), gy2, "normalized, no add");
      ExpectSameFloats(Get(dx2, x0.size()), x0, "x unchanged without add");
    }
  }
}

TEST_F(CudaRowKernelsTest, SiluMulMatchesTheGolden) {
  const int64_t n = 1536;
  for (int64_t n_tokens : kTokenCounts) {
    SCOPED_TRACE(n_tokens);
    const std::vector<float> gate = Normal(n_tokens * n, 4, 4.0f), up = Normal(n_tokens * n, 5);
    const size_t xq_bytes = quant::ActivationRowBytes(n) * n_tokens;
    std::vector<float> gh(n_tokens * n);
    std::vector<uint8_t> gq(xq_bytes);
    rowmath::SiluMulGolden(gate.data(), up.data(), n_tokens, n, gh.data(), gq.data());
    float* dh = Blank<float>(n_tokens * n);
    uint8_t* dq = Blank<uint8_t>(xq_bytes);
    ASSERT_TRUE(device_->SiluMul(Put(gate), Put(up), n_tokens, n, dh, dq, stream()).ok());
    ExpectSameFloats(Get(dh, gh.size()), gh, "h");
    EXPECT_EQ(Get(dq, xq_bytes), gq);
  }
}

TEST_F(CudaRowKernelsTest, RopeMatchesTheGoldenInBothStyles) {
  const int64_t n_heads = 9, head_dim = 64, n_rot = 64;
  for (int64_t n_tokens : kTokenCounts) {
    std::vector<float> cos_sin(n_tokens * n_rot);
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t i = 0; i < n_rot / 2; ++i) {
        const double angle = (t + 3) * std::pow(100000.0, -2.0 * i / n_rot);
        cos_sin[(t * n_rot / 2 + i) * 2] = static_cast<float>(std::cos(angle));
        cos_sin[(t * n_rot / 2 + i) * 2 + 1] = static_cast<float>(std::sin(angle));
      }
    }
    const std::vector<float> x0 = Normal(n_tokens * n_heads * head_dim, 6);
    for (bool neox : {false, true}) {
      std::vector<float> golden = x0;
      rowmath::RopeGolden(golden.data(), n_tokens, n_heads, head_dim, n_rot, neox, cos_sin.data());
      float* dx = Put(x0);
      ASSERT_TRUE(
          device_->Rope(dx, n_tokens, n_heads, head_dim, n_rot, neox, Put(cos_sin), stream()).ok());
      ExpectSameFloats(Get(dx, x0.size()), golden, neox ? "neox" : "normal");
    }
  }
}

TEST_F(CudaRowKernelsTest, EmbeddingRowsMatchTheReferenceAndBadIdsGiveNaN) {
  const int64_t n_vocab = 50, n_cols = 512;
  const std::vector<int32_t> ids = {0, 49, 7, 7, 23, -1, 50};
  for (quant::QuantType type : kAllQuantTypes) {
    SCOPED_TRACE(QuantTypeName(type));
    const std::vector<uint8_t> table = testing::RandomGgufMatrix(type, n_vocab, n_cols, 9);
    float* out = Blank<float>(ids.size() * n_cols);
    ASSERT_TRUE(device_
                    ->EmbeddingRows(static_cast<int32_t>(type), Put(table), n_vocab, n_cols,
                                    Put(ids), static_cast<int64_t>(ids.size()), out, stream())
                    .ok());
    const std::vector<float> got = Get(out, ids.size() * n_cols);
    for (size_t t = 0; t < ids.size(); ++t) {
      for (int64_t k = 0; k < n_cols; ++k) {
        const float v = got[t * n_cols + k];
        if (ids[t] < 0 || ids[t] >= n_vocab) {
          ASSERT_TRUE(std::isnan(v)) << "bad id " << ids[t];
          continue;
        }
        const float want =
            rowmath::EmbeddingElement(static_cast<int32_t>(type),
                                      table.data() + ids[t] * quant::GgufRowBytes(type, n_cols), k);
        ASSERT_TRUE(SameBits(v, want)) << "token " << t << " element " << k;
      }
    }
  }
}

TEST_F(CudaRowKernelsTest, ArgmaxTakesTheLowestIndexAmongTheLargest) {
  const int64_t n_vocab = 49152, ld = n_vocab + 7;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> logits(6 * ld, 0.0f);
  std::mt19937 rng(10);
  std::normal_distribution<float> value(0.0f, 3.0f);
  for (float& v : logits) v = value(rng);
  logits[0 * ld + 40000] = 100.0f;  // one clear winner
  logits[1 * ld + 3] = 50.0f;       // a tie: 3 wins over 30000
  logits[1 * ld + 30000] = 50.0f;
  for (int64_t k = 0; k < n_vocab; ++k) logits[2 * ld + k] = -inf;  // all -inf: index 0
  logits[3 * ld + 17] = NAN;                                        // a NaN: -1
  for (int64_t k = 0; k < n_vocab; ++k) logits[4 * ld + k] = 1.0f;  // all equal: 0
  logits[5 * ld + n_vocab - 1] = inf;                               // +inf at the end
  logits[5 * ld + n_vocab] = 2 * inf;                               // in the padding: never read
  int32_t* out = Blank<int32_t>(6);
  ASSERT_TRUE(device_->Argmax(Put(logits), 6, n_vocab, ld, out, stream()).ok());
  const std::vector<int32_t> got = Get(out, 6);
  for (int t = 0; t < 6; ++t) {
    EXPECT_EQ(got[t], rowmath::ArgmaxGolden(logits.data() + t * ld, n_vocab)) << "row " << t;
  }
  EXPECT_EQ(got[0], 40000);
  EXPECT_EQ(got[1], 3);
  EXPECT_EQ(got[2], 0);
  EXPECT_EQ(got[3], -1);
  EXPECT_EQ(got[4], 0);
  EXPECT_EQ(got[5], n_vocab - 1);
}

// Vocabularies smaller than the kernel's 256 threads leave threads without an element: they
// must lose every tie, also against an all -inf row.
TEST_F(CudaRowKernelsTest, ArgmaxOfSmallRowsIncludingAllMinusInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t n_vocab : {1, 100, 255, 256, 257}) {
    std::vector<float> logits(3 * n_vocab, -inf);  // row 0: all -inf
    for (int64_t k = 0; k < n_vocab; ++k) logits[n_vocab + k] = static_cast<float>(k % 7);
    for (int64_t k = 0; k < n_vocab; ++k) logits[2 * n_vocab + k] = -static_cast<float>(k);
    int32_t* out = Blank<int32_t>(3);
    ASSERT_TRUE(device_->Argmax(Put(logits), 3, n_vocab, n_vocab, out, stream()).ok());
    const std::vector<int32_t> got = Get(out, 3);
    for (int t = 0; t < 3; ++t) {
      EXPECT_EQ(got[t], rowmath::ArgmaxGolden(logits.data() + t * n_vocab, n_vocab))
          << n_vocab << " entries, row " << t;
    }
    EXPECT_EQ(got[0], 0) << n_vocab;
  }
}

TEST_F(CudaRowKernelsTest, BadShapesAreRefusedWithTheReason) {
  float* buf = Blank<float>(4096);
  Status s = device_->AddRmsNorm(buf, nullptr, buf, 2, 48, 1e-5f, buf, nullptr, stream());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.ToString().find("multiple of 32"), std::string::npos) << s.ToString();
  s = device_->Rope(buf, 1, 2, 64, 65, false, buf, stream());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  s = device_->EmbeddingRows(10 /* Q2_K */, buf, 4, 256, reinterpret_cast<int32_t*>(buf), 1, buf,
                             stream());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  s = device_->Argmax(buf, 1, 100, 50, reinterpret_cast<int32_t*>(buf), stream());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(device_->Synchronize(stream()).ok());
}

}  // namespace
}  // namespace pier::cuda
