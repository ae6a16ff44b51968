// The random-weight Llama images the GPU checks build (random_llama.h): they open as GGUF with
// the spec's shape, and the CPU runner computes finite, varied logits from them through all
// layers (the scales keep activations sane), so a GPU-versus-CPU comparison on them means
// something. Needs no GPU.
#include "tests/engine/random_llama.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "common/thread_pool.h"
#include "device/cpu/cpu_device.h"
#include "engine/kv/kv_store.h"
#include "engine/runner/cpu/cpu_runner.h"
#include "memory/memory_governor.h"
#include "model/gguf_file.h"
#include "model/model_info.h"

namespace pier::engine {
namespace {

using testing::BuildRandomLlama;
using testing::RandomLlamaSpec;

RandomLlamaSpec SmallSpec() { return testing::SmallRandomLlamaSpec(); }

TEST(RandomLlamaTest, ImageHasTheSpecsShapeAndIsReproducible) {
  const RandomLlamaSpec spec = SmallSpec();
  const std::vector<uint8_t> image = BuildRandomLlama(spec, 1);
  EXPECT_EQ(image, BuildRandomLlama(spec, 1));
  EXPECT_NE(image, BuildRandomLlama(spec, 2));
  auto file = model::GgufFile::FromMemory(image.data(), image.size(), "random.gguf");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto info = model::ReadModelInfo(**file);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->architecture, "llama");
  EXPECT_EQ(info->embedding_length, spec.n_embd);
  EXPECT_EQ(info->block_count, spec.n_layer);
  EXPECT_EQ(info->head_count_kv, spec.n_kv_head);
  EXPECT_EQ(info->vocab_size, spec.n_vocab);
  EXPECT_EQ((*file)->FindTensor("blk.5.ffn_down.weight")->type, DType::kQ4_1);
  EXPECT_EQ((*file)->FindTensor("output.weight"), nullptr) << "the output head is tied";
  // Widths that are not whole blocks give no image.
  RandomLlamaSpec bad = spec;
  bad.n_ff = 250;
  EXPECT_TRUE(BuildRandomLlama(bad, 1).empty());
}

TEST(RandomLlamaTest, CpuRunnerGivesFiniteVariedLogits) {
  const RandomLlamaSpec spec = SmallSpec();
  const std::vector<uint8_t> image = BuildRandomLlama(spec, 3);
  auto file = model::GgufFile::FromMemory(image.data(), image.size(), "random.gguf");
  ASSERT_TRUE(file.ok());
  auto device = CpuDevice::Create();
  ASSERT_TRUE(device.ok());
  auto governor = MemoryGovernor::Create(device->get());
  ASSERT_TRUE(governor.ok());
  const OwnerId owner = *(*governor)->AddOwner({.name = "random"});
  KvLayout layout{spec.n_layer, 16, spec.n_kv_head, spec.n_embd / spec.n_head, KvDtype::kF16};
  auto kv = PooledKvStore::Create(layout, 8, **governor, owner);
  ASSERT_TRUE(kv.ok());
  ThreadPool pool(2);
  auto runner = CreateCpuModelRunner(
      **file, CpuRunnerOptions{governor->get(), owner, owner, kv->get(), &pool, std::nullopt});
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();
  Batch batch;
  SequenceSpan seq;
  for (int i = 0; i < 40; ++i) seq.tokens.push_back((i * 37 + 11) % spec.n_vocab);
  seq.block_table = {0, 1, 2};
  seq.logits = LogitsWanted::kAll;
  batch.sequences.push_back(seq);
  auto out = (*runner)->Step(batch);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->rows.size(), 40u);
  std::set<int> argmaxes;
  for (size_t r = 0; r < out->rows.size(); ++r) {
    const std::span<const float> row = out->Row(r);
    double sum_sq = 0;
    int best = 0;
    for (size_t i = 0; i < row.size(); ++i) {
      ASSERT_TRUE(std::isfinite(row[i])) << "row " << r << " logit " << i;
      sum_sq += static_cast<double>(row[i]) * row[i];
      if (row[i] > row[best]) best = static_cast<int>(i);
    }
    const double rms = std::sqrt(sum_sq / static_cast<double>(row.size()));
    EXPECT_GT(rms, 0.01) << "row " << r;
    EXPECT_LT(rms, 1000.0) << "row " << r;
    argmaxes.insert(best);
  }
  EXPECT_GT(argmaxes.size(), 3u) << "the logits barely depend on the tokens";
}

}  // namespace
}  // namespace pier::engine
