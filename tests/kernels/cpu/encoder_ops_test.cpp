// The encoder's row operations against plain double-precision references.
#include "kernels/cpu/encoder_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/thread_pool.h"
#include "kernels/cpu/float_matmul.h"

namespace pier::kernels {
namespace {

TEST(EncoderOps, GeluMatchesErfDefinition) {
  std::vector<float> x;
  for (float v = -8.0f; v <= 8.0f; v += 0.01f) x.push_back(v);
  std::vector<float> y = x;
  Gelu(y.data(), static_cast<int64_t>(y.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double want = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    EXPECT_NEAR(y[i], want, 4e-7 * std::max(1.0, std::fabs(v))) << "x = " << v;
  }
}

TEST(EncoderOps, LayerNormMatchesDoubleReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.5f, 3.0f);
  const int64_t n = 384;
  std::vector<float> x(n), w(n), b(n), y(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = normal(rng);
    w[i] = normal(rng);
    b[i] = normal(rng);
  }
  LayerNorm(x.data(), w.data(), b.data(), n, 1e-12f, y.data());
  double mean = 0, var = 0;
  for (float v : x) mean += v;
  mean /= n;
  for (float v : x) var += (v - mean) * (v - mean);
  var /= n;
  for (int64_t i = 0; i < n; ++i) {
    const double want = (x[i] - mean) / std::sqrt(var + 1e-12) * w[i] + b[i];
    EXPECT_NEAR(y[i], want, 1e-5 * std::max(1.0, std::fabs(want)));
  }
}

TEST(EncoderOps, AttendHeadIsSoftmaxWeightedValues) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n = 5, hd = 4, stride = 8;  // two heads side by side; attend the first
  std::vector<float> q(n * stride), k(n * stride), v(n * stride), out(n * stride, -1.0f);
  for (auto* m : {&q, &k, &v}) {
    for (float& f : *m) f = normal(rng);
  }
  std::vector<float> scratch(AttendScratchFloats(n, hd));
  AttendHead(q.data(), k.data(), v.data(), n, hd, stride, 0.5f, scratch.data(), scratch.data() + 16,
             out.data());
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> p(n);
    double total = 0;
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < hd; ++d) dot += double(q[i * stride + d]) * k[j * stride + d];
      p[j] = std::exp(dot * 0.5);
      total += p[j];
    }
    for (int64_t d = 0; d < hd; ++d) {
      double want = 0;
      for (int64_t j = 0; j < n; ++j) want += p[j] / total * v[j * stride + d];
      EXPECT_NEAR(out[i * stride + d], want, 1e-5);
    }
    EXPECT_EQ(out[i * stride + hd], -1.0f) << "the other head's columns are left alone";
  }
}

}  // namespace
}  // namespace pier::kernels

namespace pier::kernels {
namespace {

// FloatMatMul against a double reference, and each token's row bitwise the same whatever the
// batch size (full 4 x 4 tiles and the edges reduce in the same order).
TEST(FloatMatMul, MatchesDoubleAndIsBatchInvariant) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t rows = 38, cols = 96, tokens = 11;  // rows and tokens not multiples of 4
  std::vector<float> w(rows * cols), x(tokens * cols);
  for (float& v : w) v = normal(rng);
  for (float& v : x) v = normal(rng);
  ThreadPool pool(2);
  const FloatMatrix m{.data = w.data(), .n_rows = rows, .n_cols = cols};
  std::vector<float> all(tokens * rows);
  ASSERT_TRUE(FloatMatMul(m, x.data(), tokens, all.data(), rows, pool).ok());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      double want = 0;
      for (int64_t k = 0; k < cols; ++k) want += double(w[r * cols + k]) * x[t * cols + k];
      EXPECT_NEAR(all[t * rows + r], want, 1e-4);
    }
  }
  for (int64_t n = 1; n <= tokens; ++n) {
    std::vector<float> some(n * rows);
    ASSERT_TRUE(FloatMatMul(m, x.data(), n, some.data(), rows, pool).ok());
    EXPECT_EQ(std::memcmp(some.data(), all.data(), some.size() * sizeof(float)), 0)
        << "the first " << n << " tokens differ from the same tokens in a batch of " << tokens;
  }
  std::vector<float> y(rows);
  EXPECT_EQ(FloatMatMul({.data = w.data(), .n_rows = rows, .n_cols = 90}, x.data(), 1, y.data(),
                        rows, pool)
                .code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pier::kernels
