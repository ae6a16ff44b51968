// The CUDA runner end to end on a random-weight model of the default model's exact shape
// (SmolLM2-135M: built here, in memory, since the real file is too large to bring to a GPU
// machine): its logits against the CPU runner's on the same machine within a stated tolerance,
// a token's logits bitwise the same alone, in a batch of 64 and after a chunked prefill, and
// bad input refused. Real-weight greedy text is checked on the CPU side only. Skips with the
// reason when no GPU is usable.
#include "engine/runner/cuda/cuda_runner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "common/thread_pool.h"
#include "device/cpu/cpu_device.h"
#include "device/cuda/cuda_device.h"
#include "device/cuda/cuda_plugin.h"
#include "engine/kv/kv_store.h"
#include "engine/kv/leased_kv_store.h"
#include "engine/runner/cpu/cpu_runner.h"
#include "engine/runner/local_model.h"
#include "memory/memory_governor.h"
#include "model/gguf_file.h"
#include "tests/engine/random_llama.h"

namespace pier::engine {
namespace {

using testing::BuildRandomLlama;
using testing::RandomLlamaSpec;

constexpr int64_t kBlocks = 1024;  // 16,384 positions of K/V on each side

// Everything both runners need, built once for the test binary (the image is ~100 MB).
struct Rig {
  RandomLlamaSpec spec;
  std::vector<uint8_t> image;
  std::unique_ptr<model::GgufFile> file;
  std::unique_ptr<cuda::CudaDevice> gpu;
  std::unique_ptr<MemoryGovernor> gpu_governor;
  std::unique_ptr<LeasedKvStore> gpu_kv;
  std::unique_ptr<ModelRunner> gpu_runner;
  std::unique_ptr<CpuDevice> cpu;
  std::unique_ptr<MemoryGovernor> cpu_governor;
  std::unique_ptr<PooledKvStore> cpu_kv;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<ModelRunner> cpu_runner;
  std::string error;
};

KvLayout LayoutOf(const RandomLlamaSpec& spec) {
  return KvLayout{spec.n_layer, 16, spec.n_kv_head, spec.n_embd / spec.n_head, KvDtype::kF16};
}

Rig* TheRig() {
  static Rig* const rig = [] {
    auto* r = new Rig;
    auto fail = [&](const std::string& what, const Status& s) {
      r->error = what + ": " + s.ToString();
      return r;
    };
    r->image = BuildRandomLlama(r->spec, 42);
    auto file = model::GgufFile::FromMemory(r->image.data(), r->image.size(), "random-135m.gguf");
    if (!file.ok()) return fail("image", file.status());
    r->file = std::move(*file);
    auto gpu = cuda::CudaDevice::Open(0);
    if (!gpu.ok()) return fail("GPU", gpu.status());
    r->gpu = std::move(*gpu);
    auto gg = MemoryGovernor::Create(r->gpu.get());
    if (!gg.ok()) return fail("GPU governor", gg.status());
    r->gpu_governor = std::move(*gg);
    const OwnerId gpu_owner = *r->gpu_governor->AddOwner({.name = "random-135m"});
    LeasedKvOptions kv_options;
    kv_options.blocks_per_chunk = 64;
    kv_options.min_chunks = kv_options.max_chunks = kv_options.initial_chunks = kBlocks / 64;
    auto gkv = LeasedKvStore::Create(LayoutOf(r->spec), kv_options, *r->gpu_governor, gpu_owner);
    if (!gkv.ok()) return fail("GPU KV", gkv.status());
    r->gpu_kv = std::move(*gkv);
    auto gr =
        CreateCudaModelRunner(*r->file, CudaRunnerOptions{r->gpu.get(), r->gpu_governor.get(),
                                                          gpu_owner, gpu_owner, r->gpu_kv.get()});
    if (!gr.ok()) return fail("CUDA runner", gr.status());
    r->gpu_runner = std::move(*gr);

    auto cpu = CpuDevice::Create();
    if (!cpu.ok()) return fail("CPU", cpu.status());
    r->cpu = std::move(*cpu);
    auto cg = MemoryGovernor::Create(r->cpu.get());
    if (!cg.ok()) return fail("CPU governor", cg.status());
    r->cpu_governor = std::move(*cg);
    const OwnerId cpu_owner = *r->cpu_governor->AddOwner({.name = "random-135m"});
    auto ckv = PooledKvStore::Create(LayoutOf(r->spec), kBlocks, *r->cpu_governor, cpu_owner);
    if (!ckv.ok()) return fail("CPU KV", ckv.status());
    r->cpu_kv = std::move(*ckv);
    r->pool = std::make_unique<ThreadPool>(8);
    auto cr = CreateCpuModelRunner(
        *r->file, CpuRunnerOptions{r->cpu_governor.get(), cpu_owner, cpu_owner, r->cpu_kv.get(),
                                   r->pool.get(), std::nullopt});
    if (!cr.ok()) return fail("CPU runner", cr.status());
    r->cpu_runner = std::move(*cr);
    return r;
  }();
  return rig;
}

class CudaRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const cuda::CudaStatus& status = cuda::GetCudaStatus();
    if (!status.usable()) GTEST_SKIP() << "no usable GPU, skipped: " << status.Summary();
    rig_ = TheRig();
    ASSERT_TRUE(rig_->error.empty()) << rig_->error;
  }

  // A sequence of `n` random tokens using blocks first_block, first_block + 1, ...
  SequenceSpan Sequence(int64_t id, int64_t n, int32_t first_block, uint32_t seed,
                        LogitsWanted logits = LogitsWanted::kLast) const {
    std::mt19937 rng(seed);
    SequenceSpan s;
    s.sequence_id = id;
    for (int64_t i = 0; i < n; ++i) s.tokens.push_back(static_cast<int32_t>(rng() % 49152));
    for (int64_t b = 0; b < (n + 15) / 16 + 1; ++b) s.block_table.push_back(first_block + b);
    s.logits = logits;
    return s;
  }

  std::vector<float> Run(ModelRunner& runner, const Batch& batch) {
    auto out = runner.Step(batch);
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    if (!out.ok()) return {};
    return std::vector<float>(out->logits.begin(), out->logits.end());
  }

  // A second runner on the rig's GPU, governor and KV store with options changed by `change`
  // (owners of its own, named after `what`).
  template <typename Change>
  Result<std::unique_ptr<ModelRunner>> Twin(const std::string& what, Change change) {
    static int twins = 0;
    PIER_ASSIGN_OR_RETURN(
        const OwnerId owner,
        rig_->gpu_governor->AddOwner({.name = what + "-twin-" + std::to_string(++twins)}));
    CudaRunnerOptions options{rig_->gpu.get(), rig_->gpu_governor.get(), owner, owner,
                              rig_->gpu_kv.get()};
    change(options);
    return CreateCudaModelRunner(*rig_->file, options);
  }

  Rig* rig_ = nullptr;
};

TEST_F(CudaRunnerTest, LogitsAgreeWithTheCpuRunner) {
  Batch batch;
  batch.sequences = {Sequence(1, 5, 0, 1, LogitsWanted::kAll), Sequence(2, 17, 10, 2),
                     Sequence(3, 300, 20, 3)};
  const std::vector<float> gpu = Run(*rig_->gpu_runner, batch);
  const std::vector<float> cpu = Run(*rig_->cpu_runner, batch);
  ASSERT_EQ(gpu.size(), cpu.size());
  ASSERT_EQ(gpu.size(), 7u * 49152);
  double max_diff = 0, max_abs = 0, sum_sq_diff = 0;
  size_t same_argmax = 0;
  for (size_t r = 0; r < 7; ++r) {
    const float* g = gpu.data() + r * 49152;
    const float* c = cpu.data() + r * 49152;
    for (size_t i = 0; i < 49152; ++i) {
      ASSERT_TRUE(std::isfinite(g[i])) << "row " << r << " logit " << i;
      const double d = std::fabs(static_cast<double>(g[i]) - c[i]);
      max_diff = std::max(max_diff, d);
      max_abs = std::max(max_abs, std::fabs(static_cast<double>(c[i])));
      sum_sq_diff += d * d;
    }
    same_argmax += std::max_element(g, g + 49152) - g == std::max_element(c, c + 49152) - c;
  }
  std::printf(
      "GPU vs CPU logits: largest difference %.3g (largest logit %.3g), rms %.3g, "
      "same argmax in %zu of 7 rows\n",
      max_diff, max_abs, std::sqrt(sum_sq_diff / static_cast<double>(gpu.size())), same_argmax);
  // Every product, norm and activation is the CPU's bits; attention differs by float rounding
  // (about 1e-6 relative per layer), which 30 layers may amplify a little.
  EXPECT_LE(max_diff, 1e-3 * max_abs);
  EXPECT_EQ(same_argmax, 7u);
}

TEST_F(CudaRunnerTest, TokenLogitsAreTheSameAloneInABatchOfSixtyFourAndChunked) {
  const SequenceSpan probe = Sequence(100, 600, 200, 9);
  Batch alone;
  alone.sequences = {probe};
  const std::vector<float> a = Run(*rig_->gpu_runner, alone);

  Batch big;  // the probe among 63 others of various lengths
  for (int i = 0; i < 63; ++i) {
    big.sequences.push_back(Sequence(i, 1 + (i * 7) % 40, 250 + 5 * i, 1000 + i));
  }
  big.sequences.insert(big.sequences.begin() + 31, probe);
  auto out = rig_->gpu_runner->Step(big);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->rows[31].sequence_index, 31);
  const std::span<const float> in_batch = out->Row(31);
  ASSERT_EQ(a.size(), in_batch.size());
  EXPECT_EQ(std::memcmp(a.data(), in_batch.data(), a.size() * 4), 0)
      << "the probe's logits changed with the batch";

  // The same prompt in chunks of 256, 256 and 88 tokens (K/V from earlier steps).
  std::vector<float> chunked;
  for (int64_t first = 0; first < 600; first += 256) {
    SequenceSpan part = probe;
    const int64_t n = std::min<int64_t>(256, 600 - first);
    part.tokens.assign(probe.tokens.begin() + first, probe.tokens.begin() + first + n);
    part.first_position = first;
    part.logits = first + n == 600 ? LogitsWanted::kLast : LogitsWanted::kNone;
    Batch b;
    b.sequences = {part};
    chunked = Run(*rig_->gpu_runner, b);
  }
  ASSERT_EQ(chunked.size(), a.size());
  EXPECT_EQ(std::memcmp(a.data(), chunked.data(), a.size() * 4), 0)
      << "the probe's logits changed with the chunking";
}

TEST_F(CudaRunnerTest, DecodeStepsFollowThePrefill) {
  // Prefill 40 tokens, then 5 decode steps feeding back the GPU's greedy pick, on both sides:
  // the picks agree.
  SequenceSpan gpu_seq = Sequence(7, 40, 600, 17);
  SequenceSpan cpu_seq = gpu_seq;
  for (int step = 0; step < 6; ++step) {
    Batch gb, cb;
    gb.sequences = {gpu_seq};
    cb.sequences = {cpu_seq};
    const std::vector<float> g = Run(*rig_->gpu_runner, gb);
    const std::vector<float> c = Run(*rig_->cpu_runner, cb);
    ASSERT_EQ(g.size(), 49152u);
    const auto g_pick = static_cast<int32_t>(std::max_element(g.begin(), g.end()) - g.begin());
    const auto c_pick = static_cast<int32_t>(std::max_element(c.begin(), c.end()) - c.begin());
    EXPECT_EQ(g_pick, c_pick) << "step " << step;
    const int64_t next = gpu_seq.first_position + static_cast<int64_t>(gpu_seq.tokens.size());
    gpu_seq.first_position = cpu_seq.first_position = next;
    gpu_seq.tokens = cpu_seq.tokens = {g_pick};
  }
}

// Decode steps through the CUDA graphs (a bucket per batch size, padded) against the same
// steps without graphs, and a token decoded alone (bucket 1) against in a batch of 64.
TEST_F(CudaRunnerTest, GraphedDecodeIsBitwiseTheEagerOneAtEveryBatchSize) {
  auto eager = Twin("eager", [](CudaRunnerOptions& o) { o.use_graphs = false; });
  ASSERT_TRUE(eager.ok()) << eager.status().ToString();
  ModelRunner& graphed = *rig_->gpu_runner;

  // 64 sequences with prompts of 3..66 tokens (prefilled without graphs), then decode steps of
  // 1, 3, 8, 9, 33 and 64 of them.
  std::vector<SequenceSpan> seqs;
  for (int i = 0; i < 64; ++i) seqs.push_back(Sequence(2000 + i, 3 + i, 100 + 6 * i, 500 + i));
  Batch prefill;
  prefill.sequences = seqs;
  ASSERT_FALSE(Run(graphed, prefill).empty());
  const CudaGraphStats before = GraphStatsOf(graphed);
  // Each size twice (the second a replay, with other tokens).
  for (int64_t n : {1, 3, 8, 9, 33, 64, 1, 3, 8, 9, 33, 64}) {
    Batch decode;
    for (int64_t i = 0; i < n; ++i) {
      SequenceSpan d = seqs[i];
      d.first_position = static_cast<int64_t>(seqs[i].tokens.size());
      d.tokens = {static_cast<int32_t>((7 * i + n + GraphStatsOf(graphed).launches) % 49152)};
      decode.sequences.push_back(d);
    }
    const std::vector<float> with_graph = Run(graphed, decode);
    const std::vector<float> without = Run(**eager, decode);
    ASSERT_EQ(with_graph.size(), static_cast<size_t>(n) * 49152);
    ASSERT_EQ(with_graph.size(), without.size());
    EXPECT_EQ(std::memcmp(with_graph.data(), without.data(), with_graph.size() * 4), 0)
        << "a graphed decode of " << n << " differs from the eager one";
    if (n == 64) {
      // Row 0 of the 64 against the same token decoded alone.
      Batch alone;
      alone.sequences = {decode.sequences[0]};
      const std::vector<float> one = Run(graphed, alone);
      EXPECT_EQ(std::memcmp(one.data(), with_graph.data(), one.size() * 4), 0)
          << "a token's logits differ between batch 1 and batch 64";
    }
  }
  // Contexts past one attention split (positions 300-308, several splits per row, rows whose
  // splits start past the first) in the 512 tier's graphs.
  std::vector<SequenceSpan> longer;
  for (int i = 0; i < 9; ++i) longer.push_back(Sequence(3000 + i, 300 + i, 500 + 21 * i, 900 + i));
  Batch long_prefill;
  long_prefill.sequences = longer;
  ASSERT_FALSE(Run(graphed, long_prefill).empty());
  for (int64_t n : {2, 9, 9}) {
    Batch decode;
    for (int64_t i = 0; i < n; ++i) {
      SequenceSpan d = longer[i];
      d.first_position = static_cast<int64_t>(longer[i].tokens.size());
      d.tokens = {static_cast<int32_t>((11 * i + n + GraphStatsOf(graphed).launches) % 49152)};
      decode.sequences.push_back(d);
    }
    const std::vector<float> with_graph = Run(graphed, decode);
    const std::vector<float> without = Run(**eager, decode);
    ASSERT_EQ(with_graph.size(), without.size());
    EXPECT_EQ(std::memcmp(with_graph.data(), without.data(), with_graph.size() * 4), 0)
        << "a graphed decode of " << n << " at ~300 positions differs from the eager one";
  }
  const CudaGraphStats after = GraphStatsOf(graphed);
  EXPECT_GE(after.launches - before.launches, 16) << "the decode steps did not use graphs";
  EXPECT_EQ(after.fallbacks, 0);
  std::printf("graphs: %lld captured, %lld launched\n", static_cast<long long>(after.captures),
              static_cast<long long>(after.launches));
}

// Layer matrices packed at load into the GPU layout give the GGUF layout's bits.
TEST_F(CudaRunnerTest, PackedWeightsGiveTheSameLogits) {
  auto packed = Twin("packed", [](CudaRunnerOptions& o) { o.packed_weights = true; });
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  Batch batch;
  batch.sequences = {Sequence(1, 70, 800, 31, LogitsWanted::kAll), Sequence(2, 3, 810, 32)};
  const std::vector<float> a = Run(**packed, batch);
  const std::vector<float> b = Run(*rig_->gpu_runner, batch);
  ASSERT_EQ(a.size(), 71u * 49152);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
  Batch decode;  // and through its decode graph
  SequenceSpan d = batch.sequences[1];
  d.first_position = 3;
  d.tokens = {17};
  decode.sequences = {d};
  const std::vector<float> c = Run(**packed, decode);
  const std::vector<float> e = Run(*rig_->gpu_runner, decode);
  ASSERT_EQ(c.size(), e.size());
  EXPECT_EQ(std::memcmp(c.data(), e.data(), c.size() * 4), 0);
}

// The fused launches (Q/K/V and gate/up products, RoPE with the K/V writes, the merge's
// quantization; the rig's runner has them, the default) give the unfused runner's logits, bit
// for bit, in a prefill and through a decode graph.
TEST_F(CudaRunnerTest, FusedLaunchesGiveTheSameLogitsAsTheSeparateOnes) {
  auto unfused = Twin("unfused", [](CudaRunnerOptions& o) { o.fuse_kernels = false; });
  ASSERT_TRUE(unfused.ok()) << unfused.status().ToString();
  // Each runner on blocks of its own, so that K/V the fused one failed to write could not be
  // read from the other's.
  auto sequences = [&](int32_t first_block) {
    return std::vector<SequenceSpan>{Sequence(1, 300, first_block, 51, LogitsWanted::kAll),
                                     Sequence(2, 4, first_block + 30, 52),
                                     Sequence(3, 17, first_block + 40, 53)};
  };
  Batch separate, fused;
  separate.sequences = sequences(860);
  fused.sequences = sequences(904);
  const std::vector<float> a = Run(**unfused, separate);
  const std::vector<float> b = Run(*rig_->gpu_runner, fused);
  ASSERT_EQ(a.size(), 302u * 49152);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
  // Two decode steps of 3 sequences (a graph of 4: one padding row): the first captures the
  // graph, the second replays it.
  for (int step = 0; step < 2; ++step) {
    auto next = [&](Batch& batch) {
      for (size_t i = 0; i < batch.sequences.size(); ++i) {
        SequenceSpan& s = batch.sequences[i];
        s.first_position += static_cast<int64_t>(s.tokens.size());
        s.tokens = {static_cast<int32_t>(23 + 7 * i + step)};
        s.logits = LogitsWanted::kLast;
      }
    };
    next(separate);
    next(fused);
    const std::vector<float> c = Run(**unfused, separate);
    const std::vector<float> e = Run(*rig_->gpu_runner, fused);
    ASSERT_EQ(c.size(), 3u * 49152);
    ASSERT_EQ(c.size(), e.size());
    EXPECT_EQ(std::memcmp(c.data(), e.data(), c.size() * 4), 0) << "decode step " << step;
  }
}

// Products on the tensor cores (from 2 tokens on) give the same logits.
TEST_F(CudaRunnerTest, TensorCoreProductsGiveTheSameLogits) {
  auto mma = Twin("mma", [](CudaRunnerOptions& o) { o.mma_min_tokens = 2; });
  ASSERT_TRUE(mma.ok()) << mma.status().ToString();
  Batch batch;
  batch.sequences = {Sequence(1, 90, 830, 41, LogitsWanted::kAll), Sequence(2, 5, 840, 42)};
  const std::vector<float> a = Run(**mma, batch);
  const std::vector<float> b = Run(*rig_->gpu_runner, batch);
  ASSERT_EQ(a.size(), 91u * 49152);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
}

TEST_F(CudaRunnerTest, BadBatchesAreRefusedAndChangeNothing) {
  Batch bad;
  SequenceSpan s = Sequence(1, 4, 700, 5);
  s.tokens[2] = 49152;  // outside the vocabulary
  bad.sequences = {s};
  auto out = rig_->gpu_runner->Step(bad);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("outside the vocabulary"), std::string::npos);
  s = Sequence(1, 4, 700, 5);
  s.block_table = {kBlocks + 5};  // a block the store does not have
  bad.sequences = {s};
  EXPECT_EQ(rig_->gpu_runner->Step(bad).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(CudaRunnerTest, AGpuBudgetTooSmallForTheWeightsIsRefusedWithTheBreakdown) {
  GovernorOptions options;
  options.budget = BudgetSpec::Bytes(uint64_t{32} << 20);  // the weights need ~100 MB
  auto governor = MemoryGovernor::Create(rig_->gpu.get(), options);
  ASSERT_TRUE(governor.ok()) << governor.status().ToString();
  const OwnerId owner = *(*governor)->AddOwner({.name = "too-big"});
  LeasedKvOptions kv_options;
  kv_options.max_chunks = kv_options.initial_chunks = 1;
  auto kv = LeasedKvStore::Create(LayoutOf(rig_->spec), kv_options, **governor, owner);
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  auto runner = CreateCudaModelRunner(
      *rig_->file, CudaRunnerOptions{rig_->gpu.get(), governor->get(), owner, owner, kv->get()});
  ASSERT_FALSE(runner.ok());
  EXPECT_EQ(runner.status().code(), StatusCode::kResourceExhausted) << runner.status().ToString();
  std::printf("refusal: %s\n", runner.status().ToString().c_str());
}

// Admission on a GPU reserves what the CUDA runner then allocates (EstimateMemory with the
// runner's weight block, step and graph workspaces): a model loaded through LocalModel never
// holds more than its estimate, through a prefill of the largest step and a graphed decode of
// 64 sequences.
TEST_F(CudaRunnerTest, ALocalModelOnTheGpuStaysWithinWhatAdmissionReserved) {
  auto governor = MemoryGovernor::Create(rig_->gpu.get());
  ASSERT_TRUE(governor.ok()) << governor.status().ToString();
  auto file = model::GgufFile::FromMemory(rig_->image.data(), rig_->image.size(), "est.gguf");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  LocalModelOptions options;
  options.kv_tokens = 2048;
  options.max_step_tokens = 256;
  options.owner_name = "est";
  auto model = LocalModel::Create(std::move(*file), options, governor->get());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const MemoryEstimate& e = (*model)->estimate();
  EXPECT_GT(e.gpu_weight_bytes, 0u);
  EXPECT_GT(e.graph_workspace_bytes, 0u);
  Batch prefill;
  prefill.sequences = {Sequence(1, 256, 0, 7)};
  EXPECT_FALSE(Run((*model)->runner(), prefill).empty());
  Batch decode;
  for (int64_t s = 0; s < 64; ++s) {
    decode.sequences.push_back(Sequence(100 + s, 1, static_cast<int32_t>(2 * s), 9 + s));
  }
  EXPECT_FALSE(Run((*model)->runner(), decode).empty());
  EXPECT_EQ(GraphStatsOf((*model)->runner()).launches, 1);
  for (const OwnerStats& o : (*governor)->Stats().owners) {
    std::printf("%s: peak %llu bytes\n", o.name.c_str(),
                static_cast<unsigned long long>(o.peak_allocated_bytes));
    if (o.name == "est/weights") {
      EXPECT_LE(o.peak_allocated_bytes, e.weight_bytes());
      EXPECT_GE(o.peak_allocated_bytes, e.weight_bytes() * 9 / 10);
    } else if (o.name == "est/workspace") {
      EXPECT_LE(o.peak_allocated_bytes, e.workspace_bytes);
    } else if (o.name == "est/kv") {
      EXPECT_LE(o.peak_allocated_bytes, e.kv_bytes);
    }
  }
}

}  // namespace
}  // namespace pier::engine
