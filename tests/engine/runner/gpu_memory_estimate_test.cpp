// Admission on a GPU, checked without one: EstimateMemory for a model placed on a GPU sizes the
// CUDA runner's weight block (every tensor as the file stores it, never widened), its step and
// decode-graph workspaces and the f16 K/V, and refuses what the GPU does not run before
// anything is reserved. (cuda_runner_test checks on a GPU that the runner stays within it.)
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/runner/cuda/cuda_runner.h"
#include "engine/runner/cuda/cuda_runner_internal.h"
#include "engine/runner/local_model.h"
#include "kernels/cuda/attention_math.h"
#include "model/gguf_file.h"
#include "tests/engine/random_llama.h"

namespace pier::engine {
namespace {

using testing::BuildRandomLlama;
using testing::RandomLlamaSpec;

// The small model, trained for a context long enough for the KV sizes below.
RandomLlamaSpec SmallSpec() {
  RandomLlamaSpec spec = testing::SmallRandomLlamaSpec();
  spec.context_length = 4096;
  return spec;
}

class GpuMemoryEstimateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    image_ = BuildRandomLlama(SmallSpec(), 3);
    auto file = model::GgufFile::FromMemory(image_.data(), image_.size(), "small.gguf");
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    file_ = std::move(*file);
  }

  LocalModelOptions Options(DeviceKind device) const {
    LocalModelOptions o;
    o.kv_tokens = 2048;
    o.max_step_tokens = 256;
    o.device = device;
    return o;
  }

  std::vector<uint8_t> image_;
  std::unique_ptr<model::GgufFile> file_;
};

TEST_F(GpuMemoryEstimateTest, WeightsAreTheFilesTensorsInOneBlockNotTheCpusPackedCopies) {
  auto gpu = EstimateMemory(*file_, Options(DeviceKind::kCuda));
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  auto cpu = EstimateMemory(*file_, Options(DeviceKind::kCpu));
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  EXPECT_EQ(gpu->mapped_weight_bytes + gpu->packed_weight_bytes + gpu->small_weight_bytes, 0u);
  // Every tensor the runner uploads (norms widened to f32, 256-byte aligned): at least the
  // file's quantized bytes, and no more than them plus each tensor's alignment and the pool's
  // rounding (a few MiB at most).
  uint64_t file_bytes = 0;
  for (const model::GgufTensorInfo& t : file_->tensors()) file_bytes += t.size_bytes;
  EXPECT_GE(gpu->gpu_weight_bytes, file_bytes);
  EXPECT_LE(gpu->gpu_weight_bytes,
            file_bytes + file_->tensors().size() * 256 + (uint64_t{4} << 20));
  EXPECT_EQ(gpu->weight_bytes(), gpu->gpu_weight_bytes);
  // K/V are the same f16 blocks on either device.
  EXPECT_EQ(gpu->kv_bytes, cpu->kv_bytes);
  EXPECT_EQ(gpu->kv_tokens, cpu->kv_tokens);
  EXPECT_GT(gpu->graph_workspace_bytes, 0u);
  EXPECT_GT(gpu->workspace_bytes, gpu->graph_workspace_bytes);
  EXPECT_EQ(gpu->total_bytes(), gpu->weight_bytes() + gpu->kv_bytes + gpu->workspace_bytes);
  EXPECT_NE(gpu->Breakdown().find("on the GPU"), std::string::npos) << gpu->Breakdown();
  EXPECT_NE(gpu->Breakdown().find("decode graphs"), std::string::npos) << gpu->Breakdown();
}

TEST_F(GpuMemoryEstimateTest, TheStepWorkspaceBoundsEveryStepOfAtMostThatManyTokens) {
  const LocalModelOptions o = Options(DeviceKind::kCuda);
  auto e = EstimateMemory(*file_, o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto dims = cuda_runner::ReadModelDims(*file_);
  ASSERT_TRUE(dims.ok()) << dims.status().ToString();
  // Steps the runner can be asked for: n sequences sharing t tokens, every query at the end of
  // the context (the most splits), tables as long as the context allows.
  const int64_t blocks = o.kv_tokens / 16;
  const int64_t splits = cuda::attn::SplitsFor(o.kv_tokens - 1);
  for (int64_t t : {1, 7, 64, 255, 256}) {
    for (int64_t n : {int64_t{1}, t}) {
      const cuda_runner::StepLayout step =
          cuda_runner::LayOutStep(*dims, t, std::min<int64_t>(t, 1), n * blocks, t * splits);
      EXPECT_LE(step.bytes, e->workspace_step_bytes) << t << " tokens in " << n << " sequences";
    }
  }
  // A larger step or a longer context needs more.
  LocalModelOptions longer = o;
  longer.kv_tokens = 4096;
  LocalModelOptions wider = o;
  wider.max_step_tokens = 512;
  EXPECT_GT(EstimateMemory(*file_, longer)->workspace_step_bytes, e->workspace_step_bytes);
  EXPECT_GT(EstimateMemory(*file_, wider)->workspace_step_bytes, e->workspace_step_bytes);
}

TEST_F(GpuMemoryEstimateTest, WhatTheGpuDoesNotRunIsRefusedBeforeAnythingIsReserved) {
  LocalModelOptions f32_kv = Options(DeviceKind::kCuda);
  f32_kv.kv_dtype = KvDtype::kF32;
  auto refused = EstimateMemory(*file_, f32_kv);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(refused.status().message().find("f16"), std::string::npos)
      << refused.status().ToString();
  EXPECT_TRUE(EstimateMemory(*file_,
                             [&] {
                               auto cpu = f32_kv;
                               cpu.device = DeviceKind::kCpu;
                               return cpu;
                             }())
                  .ok())
      << "the CPU holds f32 K/V";

  LocalModelOptions requantized = Options(DeviceKind::kCuda);
  requantized.weights_dtype = DType::kQ8_0;
  refused = EstimateMemory(*file_, requantized);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(refused.status().message().find("--weights-dtype"), std::string::npos);

  // A head size the GPU attention does not take (512 > 256).
  RandomLlamaSpec wide_heads = SmallSpec();
  wide_heads.n_embd = 512;
  wide_heads.n_head = 1;
  wide_heads.n_kv_head = 1;
  const std::vector<uint8_t> wide_image = BuildRandomLlama(wide_heads, 1);
  ASSERT_FALSE(wide_image.empty());
  auto file = model::GgufFile::FromMemory(wide_image.data(), wide_image.size(), "wide.gguf");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  refused = EstimateMemory(**file, Options(DeviceKind::kCuda));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnsupported) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("head size"), std::string::npos);
  EXPECT_TRUE(EstimateMemory(**file, Options(DeviceKind::kCpu)).ok());
}

}  // namespace
}  // namespace pier::engine
