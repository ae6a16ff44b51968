// The GPU's quantized matrix product and activation quantization against the host golden of
// kernels/cuda/quant_dot.h (which the unit test cuda_quant_dot_test proves equal to the CPU
// MatMul): bit for bit, for every type, on the default model's and 7B-shaped matrices, and
// the same bits for a token at every batch size. Skips with the reason when no GPU is usable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/quant_dot.h"
#include "kernels/cuda/quant_pack.h"
#include "tests/kernels/cuda_test_device.h"
#include "tests/kernels/random_gguf.h"

namespace pier::cuda {
namespace {

using quant::QuantType;
using testing::kAllQuantTypes;
using testing::QuantTypeName;
using testing::RandomActivations;
using testing::RandomGgufMatrix;
using testing::SameBits;

// 65 and 100: past the tensor-core product's 64 tokens per block of threads.
constexpr int64_t kTokenCounts[] = {1, 2, 3, 7, 8, 9, 16, 33, 64, 65, 100};
constexpr int64_t kMaxTokens = 100;

// A device buffer freed with the test's device.
struct DeviceBuffer {
  CudaDevice* device = nullptr;
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer(CudaDevice* d, size_t n) : device(d), bytes(n) {
    Result<void*> p = device->AllocateRaw(n, 256);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    if (p.ok()) ptr = *p;
  }
  ~DeviceBuffer() {
    if (ptr != nullptr) device->FreeRaw(ptr, bytes);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

class CudaQuantMatMulTest : public CudaTest {
 protected:
  template <typename T>
  void Upload(DeviceBuffer& dst, const std::vector<T>& src) {
    ASSERT_TRUE(device_
                    ->CopyHostToDevice(dst.ptr, src.data(), src.size() * sizeof(T),
                                       device_->DefaultStream())
                    .ok());
  }
  template <typename T>
  std::vector<T> Download(const DeviceBuffer& src, size_t count) {
    std::vector<T> out(count);
    EXPECT_TRUE(
        device_->CopyDeviceToHost(out.data(), src.ptr, count * sizeof(T), device_->DefaultStream())
            .ok());
    const Status sync = device_->Synchronize(device_->DefaultStream());
    EXPECT_TRUE(sync.ok()) << sync.ToString();
    return out;
  }

  // Checks one matrix: activations quantized on the GPU equal the golden's; the product of
  // every token count equals the golden bit for bit (so each token's row is the same at every
  // batch size, in all ldy-padded outputs).
  void CheckShape(QuantType type, int64_t n_rows, int64_t n_cols, uint32_t seed) {
    SCOPED_TRACE(std::string(QuantTypeName(type)) + " " + std::to_string(n_rows) + " x " +
                 std::to_string(n_cols));
    const std::vector<uint8_t> w = RandomGgufMatrix(type, n_rows, n_cols, seed);
    const std::vector<float> x = RandomActivations(kMaxTokens, n_cols, seed + 1);
    const int64_t x_bytes = quant::ActivationRowBytes(n_cols);
    std::vector<uint8_t> xq_golden(x_bytes * kMaxTokens);
    quant::QuantizeActivationsGolden(x.data(), kMaxTokens, n_cols, xq_golden.data());
    const int64_t ldy = n_rows + 5;
    std::vector<float> golden(kMaxTokens * ldy, 0.0f);
    quant::QuantMatMulGolden(type, w.data(), n_rows, n_cols, xq_golden.data(), kMaxTokens,
                             golden.data(), ldy);

    DeviceBuffer dw(device_.get(), w.size()), dx(device_.get(), x.size() * sizeof(float)),
        dxq(device_.get(), xq_golden.size()), dy(device_.get(), golden.size() * sizeof(float));
    ASSERT_TRUE(dw.ptr && dx.ptr && dxq.ptr && dy.ptr);
    Upload(dw, w);
    Upload(dx, x);
    const Stream stream = device_->DefaultStream();
    const Status quantized = device_->QuantizeActivations(static_cast<const float*>(dx.ptr),
                                                          kMaxTokens, n_cols, dxq.ptr, stream);
    ASSERT_TRUE(quantized.ok()) << quantized.ToString();
    const std::vector<uint8_t> xq = Download<uint8_t>(dxq, xq_golden.size());
    ASSERT_EQ(std::memcmp(xq.data(), xq_golden.data(), xq.size()), 0)
        << "activation quantization differs from the golden";

    // Runs one product at every token count into dy (NaN until written) and checks every
    // token's rows against the golden bit for bit, the padding between rows and the tokens past
    // the batch untouched.
    auto expect_golden = [&](const char* product, auto&& run) {
      for (int64_t n_tokens : kTokenCounts) {
        SCOPED_TRACE(std::string(product) + ", " + std::to_string(n_tokens) + " tokens");
        ASSERT_TRUE(device_->Memset(dy.ptr, 0xff, dy.bytes, stream).ok());
        const Status status = run(n_tokens);
        ASSERT_TRUE(status.ok()) << status.ToString();
        const std::vector<float> y = Download<float>(dy, golden.size());
        int64_t mismatches = 0;
        for (int64_t t = 0; t < n_tokens; ++t) {
          for (int64_t r = 0; r < n_rows; ++r) {
            const float got = y[t * ldy + r], want = golden[t * ldy + r];
            if (!SameBits(got, want) && ++mismatches <= 3) {
              ADD_FAILURE() << "token " << t << " row " << r << ": gpu " << got << " golden "
                            << want;
            }
          }
          for (int64_t r = n_rows; r < ldy; ++r) ASSERT_TRUE(std::isnan(y[t * ldy + r]));
        }
        ASSERT_EQ(mismatches, 0);
        if (n_tokens < kMaxTokens) {
          ASSERT_TRUE(std::isnan(y[n_tokens * ldy])) << "wrote past the batch";
        }
      }
    };
    auto* out = static_cast<float*>(dy.ptr);
    const auto t = static_cast<int32_t>(type);
    expect_golden("GGUF layout", [&](int64_t n) {
      return device_->QuantMatMul(t, dw.ptr, n_rows, n_cols, dxq.ptr, n, out, ldy, stream);
    });
    // The same rows as three matrices of one launch (Q, K and V): each lands where its rows'
    // results belong, bitwise the golden.
    expect_golden("three slices", [&](int64_t n) {
      const int64_t a = n_rows / 3, b = 2 * n_rows / 3;
      const int64_t row_bytes = quant::GgufRowBytes(type, n_cols);
      const auto* base = static_cast<const uint8_t*>(dw.ptr);
      const PierCudaMatrixSlice slices[3] = {{base, a, out, ldy},
                                             {base + a * row_bytes, b - a, out + a, ldy},
                                             {base + b * row_bytes, n_rows - b, out + b, ldy}};
      return device_->QuantMatMulSlices(t, slices, 3, n_cols, dxq.ptr, n, stream);
    });
    // Slices out of order, each into a buffer of its own with its own row stride, one empty:
    // the kernel must take each slice's weights, results and stride.
    {
      const int64_t a = n_rows / 3, b = 2 * n_rows / 3;
      const int64_t row_bytes = quant::GgufRowBytes(type, n_cols);
      const auto* base = static_cast<const uint8_t*>(dw.ptr);
      const int64_t first[3] = {b, 0, a}, count[3] = {n_rows - b, a, b - a};
      std::vector<std::unique_ptr<DeviceBuffer>> outs;
      PierCudaMatrixSlice slices[4];
      for (int i = 0; i < 3; ++i) {
        const int64_t ld = count[i] + 1 + i;
        outs.push_back(
            std::make_unique<DeviceBuffer>(device_.get(), kMaxTokens * ld * sizeof(float)));
        ASSERT_NE(outs.back()->ptr, nullptr);
        ASSERT_TRUE(device_->Memset(outs.back()->ptr, 0xff, outs.back()->bytes, stream).ok());
        slices[i] = {base + first[i] * row_bytes, count[i], static_cast<float*>(outs.back()->ptr),
                     ld};
      }
      slices[3] = {nullptr, 0, nullptr, 0};  // empty
      const Status status =
          device_->QuantMatMulSlices(t, slices, 4, n_cols, dxq.ptr, kMaxTokens, stream);
      ASSERT_TRUE(status.ok()) << status.ToString();
      for (int i = 0; i < 3; ++i) {
        const int64_t ld = count[i] + 1 + i;
        const std::vector<float> y = Download<float>(*outs[i], kMaxTokens * ld);
        for (int64_t tok = 0; tok < kMaxTokens; ++tok) {
          for (int64_t r = 0; r < count[i]; ++r) {
            ASSERT_TRUE(SameBits(y[tok * ld + r], golden[tok * ldy + first[i] + r]))
                << "slice " << i << " token " << tok << " row " << r;
          }
          ASSERT_TRUE(std::isnan(y[tok * ld + count[i]])) << "slice " << i << " wrote past ldy";
        }
      }
    }
    if (type != QuantType::kQ6_K) {  // the tensor-core product
      expect_golden("tensor cores", [&](int64_t n) {
        return device_->MmaMatMul(t, dw.ptr, n_rows, n_cols, dxq.ptr, n, out, ldy, stream);
      });
    }
    if (!quant::HasPackedLayout32(type)) return;
    std::vector<uint8_t> packed(quant::PackedBytes(type, n_rows, n_cols));
    quant::PackRows32(type, w.data(), 0, n_rows, n_rows, n_cols, packed.data());
    DeviceBuffer dp(device_.get(), packed.size());
    ASSERT_NE(dp.ptr, nullptr);
    Upload(dp, packed);
    expect_golden("packed layout", [&](int64_t n) {
      return device_->PackedMatMul(t, dp.ptr, n_rows, n_cols, dxq.ptr, n, out, ldy, stream);
    });
  }
};

// A few rows of one or two GGUF blocks: what scripts/gpu-check runs under compute-sanitizer.
TEST_F(CudaQuantMatMulTest, SmallShapesMatchTheGolden) {
  for (QuantType type : kAllQuantTypes) {
    CheckShape(type, 5, quant::GgufBlockElements(type) == 32 ? 64 : 256, 6);
    // 96 columns: 3 blocks, so an activation row has 8 bytes of padding to 16.
    if (quant::GgufBlockElements(type) == 32) CheckShape(type, 5, 96, 7);
  }
}

// The default model's matrices (SmolLM2-135M: 576 wide, 1536 in the MLP). The k-quants need
// whole 256-blocks, so their rows are 1536 long (ffn_down).
TEST_F(CudaQuantMatMulTest, DefaultModelShapesMatchTheGoldenAtEveryBatchSize) {
  for (QuantType type : kAllQuantTypes) {
    if (quant::GgufBlockElements(type) == 32) {
      CheckShape(type, 576, 576, 1);
      CheckShape(type, 1536, 576, 2);
    }
    CheckShape(type, 576, 1536, 3);
  }
}

// 7B-shaped rows (4096 and 11008 long); fewer rows than a 7B model, the same reductions.
TEST_F(CudaQuantMatMulTest, SevenBShapesMatchTheGoldenAtEveryBatchSize) {
  for (QuantType type : kAllQuantTypes) {
    CheckShape(type, 131, 4096, 4);
    CheckShape(type, 67, 11008, 5);
  }
}

TEST_F(CudaQuantMatMulTest, UnknownTypeAndBadShapesAreRefused) {
  DeviceBuffer buf(device_.get(), 1 << 16);
  ASSERT_NE(buf.ptr, nullptr);
  auto* y = static_cast<float*>(buf.ptr);
  const Stream stream = device_->DefaultStream();
  Status s = device_->QuantMatMul(1 /* F16 */, buf.ptr, 4, 64, buf.ptr, 1, y, 4, stream);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.ToString().find("no GPU product"), std::string::npos) << s.ToString();
  // Q4_K needs whole 256-blocks.
  s = device_->QuantMatMul(static_cast<int32_t>(QuantType::kQ4_K), buf.ptr, 4, 96, buf.ptr, 1, y, 4,
                           stream);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  // ldy smaller than the rows.
  s = device_->QuantMatMul(static_cast<int32_t>(QuantType::kQ8_0), buf.ptr, 8, 64, buf.ptr, 1, y, 4,
                           stream);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  // Misaligned activations.
  s = device_->QuantMatMul(static_cast<int32_t>(QuantType::kQ8_0), buf.ptr, 4, 64,
                           static_cast<char*>(buf.ptr) + 4, 1, y, 4, stream);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  // One launch takes 1 to 4 matrices, each checked as one alone.
  const PierCudaMatrixSlice five[5] = {{buf.ptr, 1, y, 1},
                                       {buf.ptr, 1, y, 1},
                                       {buf.ptr, 1, y, 1},
                                       {buf.ptr, 1, y, 1},
                                       {buf.ptr, 1, y, 1}};
  s = device_->QuantMatMulSlices(static_cast<int32_t>(QuantType::kQ8_0), five, 5, 64, buf.ptr, 1,
                                 stream);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.ToString().find("1 to 4"), std::string::npos) << s.ToString();
  const PierCudaMatrixSlice short_ldy[2] = {{buf.ptr, 4, y, 4}, {buf.ptr, 8, y, 4}};
  s = device_->QuantMatMulSlices(static_cast<int32_t>(QuantType::kQ8_0), short_ldy, 2, 64, buf.ptr,
                                 1, stream);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  s = device_->QuantizeActivations(y, 2, 48, buf.ptr, stream);  // not whole blocks of 32
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  // Nothing to do is not an error.
  EXPECT_TRUE(device_->QuantizeActivations(nullptr, 0, 64, nullptr, stream).ok());
  EXPECT_TRUE(device_->Synchronize(stream).ok()) << "a refused launch left an error behind";
}

}  // namespace
}  // namespace pier::cuda
