// The Llama-family runner on tiny random-weight models written by the test:
// logits against a plain double-precision reference (llama and qwen2 variants,
// GQA, tied and untied output, Q/K/V biases, partial and scaled RoPE, F32 and
// quantized weights), bitwise batch invariance, bad batches and bad files.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "device/cpu/cpu_device.h"
#include "engine/runner/cpu/cpu_runner.h"
#include "engine/runner/local_model.h"
#include "kernels/cpu/cpu_isa.h"
#include "engine/test_governor.h"
#include "engine/tiny_model.h"

namespace pier::engine {
namespace {

using testing::BuildTinyModel;
using testing::ReferenceForward;
using testing::TinyModelSpec;

// A tiny model image and the LocalModel running it (declared in that order: the image
// outlives the model that maps it).
struct TinyRun {
  std::vector<uint8_t> image;
  std::unique_ptr<LocalModel> model;
};

TinyRun OpenTiny(const TinyModelSpec& spec, int threads = 2, int64_t kv_tokens = 1024,
                 std::optional<DType> weights_dtype = std::nullopt) {
  TinyRun run;
  run.image = BuildTinyModel(spec);
  auto file = model::GgufFile::FromMemory(run.image.data(), run.image.size(), "tiny.gguf");
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  LocalModelOptions options;
  options.threads = threads;
  options.kv_tokens = kv_tokens;
  // f32 K/V: the scalar reference keeps K/V in float, and the f32 variants are held to 1e-4.
  options.kv_dtype = KvDtype::kF32;
  options.weights_dtype = weights_dtype;
  auto model = LocalModel::Create(std::move(file).value(), options, pier::testing::TestGovernor());
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  if (model.ok()) run.model = std::move(model).value();
  return run;
}

std::vector<int32_t> RandomTokens(int64_t n, int64_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> tokens(n);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % n_vocab);
  return tokens;
}

std::vector<int32_t> Iota(int64_t n, int32_t first = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

SequenceSpan Span(std::vector<int32_t> tokens, int64_t first_position, std::vector<int32_t> blocks,
                  LogitsWanted logits = LogitsWanted::kAll, int64_t id = 0) {
  SequenceSpan s;
  s.sequence_id = id;
  s.tokens = std::move(tokens);
  s.first_position = first_position;
  s.block_table = std::move(blocks);
  s.logits = logits;
  return s;
}

// Largest |a - b| over a row divided by the row's RMS reference logit.
double RelativeError(std::span<const float> got, const std::vector<double>& want) {
  double err = 0, ss = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(got[i] - want[i]));
    ss += want[i] * want[i];
  }
  return err / std::sqrt(ss / static_cast<double>(want.size()));
}

struct VariantCase {
  std::string name;
  TinyModelSpec spec;
  double tolerance;  // relative to the row's RMS logit
};

// F32 weights: only float32 rounding separates the runner from the double reference
// (~1e-6 relative per operation, a few hundred operations deep): 1e-4 leaves margin and
// still catches any wrong index, pairing or scale, which move logits by O(1).
// Quantized weights: the runner rounds activations to 8-bit blocks before every product
// (up to 1/254 of a block's largest value per element) while the reference does not; on
// these random weights that moves logits by about 5% of their RMS, so the bound is 0.1
// (a wrong weight decoding moves them by O(1)).
std::vector<VariantCase> Variants() {
  std::vector<VariantCase> cases;
  TinyModelSpec llama;
  cases.push_back({"llama_gqa_untied_f32", llama, 1e-4});
  TinyModelSpec tied = llama;
  tied.tied_output = true;
  tied.n_kv_head = 1;  // multi-query
  cases.push_back({"llama_mqa_tied_f32", tied, 1e-4});
  TinyModelSpec mha = llama;
  mha.n_kv_head = mha.n_head;
  mha.rope_dims = 8;  // partial rotation: dims 8..15 of each head untouched
  mha.rope_linear_factor = 4.0;
  cases.push_back({"llama_mha_partial_linear_rope_f32", mha, 1e-4});
  TinyModelSpec qwen = llama;
  qwen.arch = "qwen2";
  qwen.qkv_bias = true;
  qwen.tied_output = true;
  cases.push_back({"qwen2_bias_neox_tied_f32", qwen, 1e-4});
  TinyModelSpec q8 = llama;
  q8.matrix_type = 8;
  cases.push_back({"llama_q8_0", q8, 0.1});
  TinyModelSpec q41 = qwen;
  q41.matrix_type = 3;
  cases.push_back({"qwen2_q4_1", q41, 0.1});
  return cases;
}

TEST(LlamaModelTest, VariantsMatchScalarReference) {
  for (const VariantCase& c : Variants()) {
    SCOPED_TRACE(c.name);
    TinyRun run = OpenTiny(c.spec);
    ASSERT_NE(run.model, nullptr);
    const std::vector<int32_t> tokens = RandomTokens(37, c.spec.n_vocab, 7);
    const auto want = ReferenceForward(run.model->file(), c.spec, tokens);
    Batch batch{{Span(tokens, 0, Iota(4))}};
    auto out = run.model->runner().Step(batch);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    ASSERT_EQ(out->rows.size(), tokens.size());
    double worst = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
      EXPECT_EQ(out->rows[i].sequence_index, 0);
      EXPECT_EQ(out->rows[i].position, static_cast<int64_t>(i));
      worst = std::max(worst, RelativeError(out->Row(i), want[i]));
    }
    EXPECT_LE(worst, c.tolerance);
    std::printf("%s: max error / RMS logit = %.2e\n", c.name.c_str(), worst);
  }
}

// `--weights-dtype`: an f32 model's matrices quantized at load. Accuracy against the
// double-precision reference of the f32 weights, per choice, and the weights' charge is the
// packed bytes they became (the estimate admission used), not the file's f32 bytes.
TEST(LlamaModelTest, WeightsDtypeQuantizesFloatMatricesAtLoad) {
  TinyModelSpec spec;  // f32 matrices
  const std::vector<int32_t> tokens = RandomTokens(37, spec.n_vocab, 7);
  double previous = 0;
  for (const std::optional<DType> dtype :
       {std::optional<DType>(), std::optional(DType::kQ8_0), std::optional(DType::kQ4_0)}) {
    const std::string name = dtype ? std::string(DTypeName(*dtype)) : "f32 as stored";
    SCOPED_TRACE(name);
    TinyRun run = OpenTiny(spec, 2, 1024, dtype);
    ASSERT_NE(run.model, nullptr);
    const auto want = ReferenceForward(run.model->file(), spec, tokens);
    auto out = run.model->runner().Step(Batch{{Span(tokens, 0, Iota(4))}});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    double worst = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
      worst = std::max(worst, RelativeError(out->Row(i), want[i]));
    }
    std::printf("weights %s: max error / RMS logit = %.2e\n", name.c_str(), worst);
    MemoryGovernor& governor = run.model->governor();
    auto weights = governor.StatsFor(*governor.FindOwner("tiny-llama/weights"));
    ASSERT_TRUE(weights.ok());
    const MemoryEstimate& e = run.model->estimate();
    if (!dtype) {
      EXPECT_LE(worst, 1e-4);
      EXPECT_EQ(e.packed_weight_bytes, 0u);
      EXPECT_GT(weights->external_bytes, 0u);  // used in place from the mapping
    } else {
      // Quantized: coarser than f32 (q4_0 coarser than q8_0), still close on these random
      // weights (q4_0's 16 levels move their logits by about half their RMS).
      EXPECT_GT(worst, 2 * previous);
      EXPECT_LE(worst, *dtype == DType::kQ8_0 ? 0.1 : 1.0);
      EXPECT_GT(e.packed_weight_bytes, 0u);
      // Only the (untied) embedding, whose rows are looked up, not multiplied, and the norms
      // (1.25 KB, also copied to f32) stay mapped.
      const model::GgufTensorInfo* embd = run.model->file().FindTensor("token_embd.weight");
      EXPECT_GE(e.mapped_weight_bytes, embd->size_bytes);
      EXPECT_LT(e.mapped_weight_bytes, embd->size_bytes + 2048);
      EXPECT_EQ(weights->external_bytes, e.mapped_weight_bytes);
      // Held: the packed matrices (8.5 or 4.5 bits per weight against 32) and the f32 norms.
      EXPECT_LT(weights->block_bytes, (e.tensor_bytes - embd->size_bytes) / 3);
    }
    previous = worst;
  }
}

TEST(LlamaModelTest, WrongRopePairingIsDetected) {
  // The reference with the other pairing must be far off: the check above can tell them apart.
  TinyModelSpec spec;
  TinyRun run = OpenTiny(spec);
  ASSERT_NE(run.model, nullptr);
  const std::vector<int32_t> tokens = RandomTokens(12, spec.n_vocab, 3);
  TinyModelSpec as_neox = spec;
  as_neox.arch = "qwen2";  // the reference then rotates halves instead of adjacent pairs
  const auto wrong = ReferenceForward(run.model->file(), as_neox, tokens);
  auto out = run.model->runner().Step(Batch{{Span(tokens, 0, Iota(1))}});
  ASSERT_TRUE(out.ok());
  EXPECT_GT(RelativeError(out->Row(11), wrong[11]), 1e-2);
}

// ---- batch invariance ----------------------------------------------------------------

// Logits of every position of `tokens` computed by `chunks` (sizes summing to its length),
// one step per chunk, in blocks `blocks`.
std::vector<float> RunChunked(ModelRunner& runner, const std::vector<int32_t>& tokens,
                              const std::vector<int64_t>& chunks,
                              const std::vector<int32_t>& blocks) {
  std::vector<float> logits;
  int64_t pos = 0;
  for (int64_t n : chunks) {
    std::vector<int32_t> piece(tokens.begin() + pos, tokens.begin() + pos + n);
    auto out = runner.Step(Batch{{Span(piece, pos, blocks)}});
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    if (!out.ok()) return {};
    logits.insert(logits.end(), out->logits.begin(), out->logits.end());
    pos += n;
  }
  return logits;
}

bool SameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(LlamaModelTest, EveryChunkingGivesIdenticalBits) {
  TinyModelSpec spec;
  spec.matrix_type = 8;
  TinyRun run = OpenTiny(spec);
  ASSERT_NE(run.model, nullptr);
  ModelRunner& runner = run.model->runner();
  const int64_t n = 45;
  const std::vector<int32_t> tokens = RandomTokens(n, spec.n_vocab, 11);
  // Blocks out of order, so that the block table is really followed.
  const std::vector<int32_t> blocks = {5, 2, 7};
  const std::vector<float> whole = RunChunked(runner, tokens, {n}, blocks);
  ASSERT_EQ(whole.size(), static_cast<size_t>(n * spec.n_vocab));
  for (int64_t c = 1; c <= n; ++c) {  // every chunk size; c = 1 is decoding one by one
    std::vector<int64_t> chunks(n / c, c);
    if (n % c != 0) chunks.push_back(n % c);
    EXPECT_TRUE(SameBits(RunChunked(runner, tokens, chunks, {1, 6, 3}), whole))
        << "chunk size " << c;
  }
  std::mt19937 rng(5);
  for (int trial = 0; trial < 30; ++trial) {  // irregular chunkings
    std::vector<int64_t> chunks;
    for (int64_t left = n; left > 0;) {
      chunks.push_back(std::min<int64_t>(left, 1 + rng() % 12));
      left -= chunks.back();
    }
    EXPECT_TRUE(SameBits(RunChunked(runner, tokens, chunks, {0, 4, 8}), whole)) << trial;
  }
}

// Every CPU level this machine has (cpu_isa.h: the MatMul, attention, row and K/V paths all
// switch together) gives the same logits, bit for bit, for every weight type and variant.
TEST(LlamaModelTest, EveryCpuIsaLevelGivesIdenticalBits) {
  struct Reset {
    ~Reset() { kernels::internal::SetActiveIsaForTesting(std::nullopt); }
  } reset;
  int levels = 0;
  for (const VariantCase& c : Variants()) {
    TinyRun run = OpenTiny(c.spec);
    ASSERT_NE(run.model, nullptr) << c.name;
    const std::vector<int32_t> tokens = RandomTokens(21, c.spec.n_vocab, 3);
    kernels::internal::SetActiveIsaForTesting(kernels::Isa::kScalar);
    const std::vector<float> scalar = RunChunked(run.model->runner(), tokens, {16, 5}, {1, 0});
    levels = 1;
    for (kernels::Isa isa : {kernels::Isa::kAvx2, kernels::Isa::kAvx512}) {
      if (!kernels::IsaSupported(isa)) continue;
      kernels::internal::SetActiveIsaForTesting(isa);
      EXPECT_TRUE(SameBits(RunChunked(run.model->runner(), tokens, {16, 5}, {1, 0}), scalar))
          << c.name << " at " << kernels::IsaName(isa);
      ++levels;
    }
  }
  std::printf("CPU levels compared: %d (best here: %s)\n", levels,
              kernels::IsaName(kernels::BestIsa()));
}

TEST(LlamaModelTest, BatchCompanyAndThreadCountDoNotChangeBits) {
  TinyModelSpec spec;
  spec.matrix_type = 3;
  spec.arch = "qwen2";
  spec.qkv_bias = true;
  TinyRun run = OpenTiny(spec, /*threads=*/2, /*kv_tokens=*/64 * 16 * 3);
  ASSERT_NE(run.model, nullptr);
  ModelRunner& runner = run.model->runner();
  const std::vector<int32_t> target = RandomTokens(20, spec.n_vocab, 21);
  const std::vector<float> alone = RunChunked(runner, target, {20}, {0, 1});
  ASSERT_FALSE(alone.empty());

  std::mt19937 rng(9);
  for (int b = 2; b <= 64; ++b) {
    // Other sequences: each prefills a random prompt in its own blocks, then the batch mixes
    // prompt chunks and decode tokens of those sequences around the target.
    Batch batch;
    const int target_index = static_cast<int>(rng() % b);
    for (int s = 0; s < b; ++s) {
      if (s == target_index) {
        batch.sequences.push_back(Span(target, 0, {0, 1}, LogitsWanted::kAll, 1000));
        continue;
      }
      const std::vector<int32_t> blocks = {2 + 2 * s, 3 + 2 * s};
      const int64_t context = rng() % 12;
      if (context > 0) {
        auto pre =
            runner.Step(Batch{{Span(RandomTokens(context, spec.n_vocab, rng()), 0, blocks)}});
        ASSERT_TRUE(pre.ok());
      }
      const int64_t len = 1 + rng() % 6;
      const auto wanted = static_cast<LogitsWanted>(rng() % 3);
      batch.sequences.push_back(
          Span(RandomTokens(len, spec.n_vocab, rng()), context, blocks, wanted, s));
    }
    auto out = runner.Step(batch);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    std::vector<float> got;
    for (size_t r = 0; r < out->rows.size(); ++r) {
      if (out->rows[r].sequence_index == target_index) {
        EXPECT_EQ(out->rows[r].position, static_cast<int64_t>(got.size()) / spec.n_vocab);
        got.insert(got.end(), out->Row(r).begin(), out->Row(r).end());
      }
    }
    EXPECT_TRUE(SameBits(got, alone)) << "batch of " << b << ", target at " << target_index;
  }

  for (int threads : {1, 3}) {
    TinyRun other = OpenTiny(spec, threads);
    ASSERT_NE(other.model, nullptr);
    EXPECT_TRUE(SameBits(RunChunked(other.model->runner(), target, {7, 13}, {3, 0}), alone))
        << threads << " threads";
  }
}

TEST(LlamaModelTest, LogitsOnlyForRequestedPositions) {
  TinyModelSpec spec;
  TinyRun run = OpenTiny(spec);
  ASSERT_NE(run.model, nullptr);
  Batch batch;
  batch.sequences.push_back(Span(RandomTokens(5, spec.n_vocab, 1), 0, {0}, LogitsWanted::kNone, 7));
  batch.sequences.push_back(Span(RandomTokens(4, spec.n_vocab, 2), 0, {1}, LogitsWanted::kLast, 8));
  batch.sequences.push_back(Span(RandomTokens(3, spec.n_vocab, 3), 0, {2}, LogitsWanted::kAll, 9));
  auto out = run.model->runner().Step(batch);
  ASSERT_TRUE(out.ok());
  ASSERT_EQ(out->rows.size(), 4u);
  EXPECT_EQ(out->rows[0].sequence_index, 1);
  EXPECT_EQ(out->rows[0].position, 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(out->rows[1 + i].sequence_index, 2);
    EXPECT_EQ(out->rows[1 + i].position, i);
  }
  EXPECT_EQ(out->logits.size(), 4u * spec.n_vocab);
  EXPECT_EQ(out->n_vocab, spec.n_vocab);
  auto empty = run.model->runner().Step(Batch{});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->rows.empty());
}

TEST(LlamaModelTest, AStepAskedToStopEarlyReturnsNoRowsAndItsRedoIsExact) {
  TinyModelSpec spec;
  spec.n_layer = 4;
  TinyRun run = OpenTiny(spec);
  ASSERT_NE(run.model, nullptr);
  const std::vector<int32_t> tokens = RandomTokens(12, spec.n_vocab, 5);
  // The stopped step reads other tokens into the same positions, so the K/V it leaves half
  // written are wrong for the redo.
  std::atomic<bool> stop = true;
  Batch other{{Span(RandomTokens(12, spec.n_vocab, 6), 0, {0})}};
  other.stop_early = &stop;
  auto stopped = run.model->runner().Step(other);
  ASSERT_TRUE(stopped.ok()) << stopped.status().ToString();
  EXPECT_TRUE(stopped->stopped_early);
  EXPECT_TRUE(stopped->rows.empty());
  // Run again over them: the same bits as a model that never stopped.
  stop = false;
  Batch batch{{Span(tokens, 0, {0})}};
  batch.stop_early = &stop;
  auto redone = run.model->runner().Step(batch);
  ASSERT_TRUE(redone.ok());
  EXPECT_FALSE(redone->stopped_early);
  TinyRun fresh = OpenTiny(spec);
  auto reference = fresh.model->runner().Step(Batch{{Span(tokens, 0, {0})}});
  ASSERT_TRUE(reference.ok());
  ASSERT_EQ(redone->logits.size(), reference->logits.size());
  EXPECT_EQ(std::memcmp(redone->logits.data(), reference->logits.data(),
                        redone->logits.size() * sizeof(float)),
            0);
}

// ---- memory ------------------------------------------------------------------------------

TEST(LlamaModelTest, EveryBufferIsChargedToTheGovernor) {
  TinyModelSpec spec;
  TinyRun run = OpenTiny(spec, 2, 160);
  ASSERT_NE(run.model, nullptr);
  MemoryGovernor& governor = run.model->governor();
  auto weights = governor.StatsFor(*governor.FindOwner("tiny-llama/weights"));
  auto kv = governor.StatsFor(*governor.FindOwner("tiny-llama/kv"));
  auto workspace_owner = *governor.FindOwner("tiny-llama/workspace");
  ASSERT_TRUE(weights.ok() && kv.ok());
  EXPECT_GT(weights->external_bytes, 0u);  // the mapped matrices, used in place
  EXPECT_GT(weights->block_bytes, 0u);     // f32 copies of the norms
  EXPECT_GE(kv->block_bytes, run.model->kv().layout().bytes_per_block() * 10);
  EXPECT_EQ(governor.StatsFor(workspace_owner)->block_bytes, 0u);
  ASSERT_TRUE(run.model->runner().Step(Batch{{Span(Iota(30), 0, {0, 1})}}).ok());
  EXPECT_GT(governor.StatsFor(workspace_owner)->block_bytes, 0u);
}

// Elastic KV: a lease of whole chunks that never holds more positions than asked for, and
// starts at its minimum (what the estimate says admission needs).
TEST(LlamaModelTest, ElasticKvLeaseMatchesTheEstimate) {
  TinyModelSpec spec;
  auto image = BuildTinyModel(spec);
  for (int64_t kv_tokens : {int64_t{100}, int64_t{1000}}) {
    for (int64_t kv_min : {int64_t{0}, int64_t{300}, int64_t{1} << 20}) {
      auto file = model::GgufFile::FromMemory(image.data(), image.size(), "tiny.gguf");
      ASSERT_TRUE(file.ok());
      LocalModelOptions options;
      options.kv_tokens = kv_tokens;
      options.kv_dtype = KvDtype::kF32;
      options.kv_policy = KvPolicy::kElastic;
      options.kv_min = KvSize::Tokens(kv_min);
      auto estimate = EstimateMemory(**file, options);
      ASSERT_TRUE(estimate.ok()) << estimate.status().ToString();
      auto model =
          LocalModel::Create(std::move(file).value(), options, pier::testing::TestGovernor());
      ASSERT_TRUE(model.ok()) << model.status().ToString();
      const KvStore& kv = (*model)->kv();
      const int64_t blocks = (kv_tokens + 15) / 16;
      EXPECT_LE(kv.num_blocks(), (blocks + 15) / 16 * 16) << kv_tokens;
      EXPECT_LE(kv.num_blocks() * kv.layout().block_size, std::max<int64_t>(kv_tokens, 256) + 255);
      if (kv_tokens < 256) {
        EXPECT_EQ(kv.num_blocks(), blocks) << "a small cache, a small chunk";
      }
      MemoryGovernor& governor = (*model)->governor();
      auto owner = governor.StatsFor(*governor.FindOwner("tiny-llama/kv"));
      ASSERT_TRUE(owner.ok());
      EXPECT_EQ(owner->lease_bytes, estimate->kv_min_bytes) << kv_tokens << " " << kv_min;
      EXPECT_LE(estimate->kv_min_tokens, estimate->kv_tokens);
    }
  }
}

// kv_max sizes the cache apart from kv_tokens, in tokens or bytes; kv_min in bytes means the
// positions those bytes hold at the cache's dtype.
TEST(LlamaModelTest, KvBoundsInTokensOrBytes) {
  TinyModelSpec spec;
  auto image = BuildTinyModel(spec);
  auto estimate = [&](LocalModelOptions options) {
    auto file = model::GgufFile::FromMemory(image.data(), image.size(), "tiny.gguf");
    EXPECT_TRUE(file.ok());
    return EstimateMemory(**file, options);
  };
  LocalModelOptions options;
  options.kv_tokens = 1000;
  options.kv_dtype = KvDtype::kF32;
  options.kv_policy = KvPolicy::kElastic;
  Result<MemoryEstimate> plain = estimate(options);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  const uint64_t per_token = plain->kv_bytes_per_token;
  ASSERT_GT(per_token, 0u);

  options.kv_max = KvSize::Tokens(320);
  Result<MemoryEstimate> by_tokens = estimate(options);
  ASSERT_TRUE(by_tokens.ok()) << by_tokens.status().ToString();
  EXPECT_EQ(by_tokens->kv_tokens, 320);

  options.kv_max = KvSize::Bytes(per_token * 650);  // rounds down to 640, whole blocks
  options.kv_min = KvSize::Bytes(per_token * 300);
  Result<MemoryEstimate> by_bytes = estimate(options);
  ASSERT_TRUE(by_bytes.ok()) << by_bytes.status().ToString();
  EXPECT_EQ(by_bytes->kv_tokens, 640);
  EXPECT_EQ(by_bytes->kv_min_tokens, 512) << "300 tokens, in whole 256-token chunks";

  options.kv_min = KvSize::Tokens(700);
  Result<MemoryEstimate> inverted = estimate(options);
  ASSERT_FALSE(inverted.ok());
  EXPECT_NE(inverted.status().message().find("kv_min 700 tokens (700 tokens) is more than kv_max"),
            std::string::npos)
      << inverted.status().message();

  options.kv_min = {};
  options.kv_max = KvSize::Bytes(per_token * 15);
  Result<MemoryEstimate> tiny = estimate(options);
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.status().message().find("holds less than one block (16 tokens"), std::string::npos)
      << tiny.status().message();

  // The model holds what the estimate says: a static store of kv_max's tokens.
  options.kv_policy = KvPolicy::kStatic;
  options.kv_max = KvSize::Tokens(320);
  auto file = model::GgufFile::FromMemory(image.data(), image.size(), "tiny.gguf");
  ASSERT_TRUE(file.ok());
  auto model = LocalModel::Create(std::move(file).value(), options, pier::testing::TestGovernor());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_EQ((*model)->kv().num_blocks() * (*model)->kv().layout().block_size, 320);
}

// ---- bad input ---------------------------------------------------------------------------

TEST(LlamaModelTest, MalformedBatchesAreRefused) {
  TinyModelSpec spec;
  spec.context = 40;
  TinyRun run = OpenTiny(spec, 2, 64);  // 4 blocks of 16
  ASSERT_NE(run.model, nullptr);
  ModelRunner& runner = run.model->runner();
  const std::vector<Batch> bad = {
      Batch{{Span({}, 0, {0})}},                          // no tokens
      Batch{{Span({1, 75}, 0, {0})}},                     // token id past the vocabulary
      Batch{{Span({1, -1}, 0, {0})}},                     // negative token id
      Batch{{Span({1, 2}, -1, {0})}},                     // negative position
      Batch{{Span(Iota(20), 0, {0})}},                    // block table too short
      Batch{{Span({1}, 0, {4})}},                         // block not in the store
      Batch{{Span({1}, 40, {0, 1, 2})}},                  // position past the context
      Batch{{Span({1}, 0, {0}), Span({1, 2}, 0, {-1})}},  // one bad sequence among good
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    auto out = runner.Step(bad[i]);
    ASSERT_FALSE(out.ok()) << "batch " << i;
    EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << out.status().ToString();
  }
  EXPECT_TRUE(runner.Step(Batch{{Span(Iota(39), 0, {0, 1, 2})}}).ok());  // the largest allowed
}

Result<std::unique_ptr<LocalModel>> OpenImage(const std::vector<uint8_t>& image,
                                              KvDtype kv_dtype = KvDtype::kF16) {
  auto file = model::GgufFile::FromMemory(image.data(), image.size(), "tiny.gguf");
  if (!file.ok()) return file.status();
  LocalModelOptions options;
  options.kv_tokens = 256;
  options.kv_dtype = kv_dtype;
  return LocalModel::Create(std::move(file).value(), options, pier::testing::TestGovernor());
}

TEST(LlamaModelTest, BadModelFilesAreRefusedWithAReason) {
  {  // qwen2 without its biases
    TinyModelSpec spec;
    spec.arch = "qwen2";
    auto m = OpenImage(BuildTinyModel(spec));
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
    EXPECT_NE(m.status().message().find("attn_q.bias"), std::string::npos);
  }
  // Families whose own tensors or keys are missing: qwen3 without its Q/K norms, phi3 without
  // its fused projection, gemma3 without its sliding window.
  for (const auto& [arch, missing] :
       std::vector<std::pair<std::string, std::string>>{{"qwen3", "attn_q_norm.weight"},
                                                        {"phi3", "attn_qkv.weight"},
                                                        {"gemma2", "sliding_window"},
                                                        {"gemma3", "sliding_window"}}) {
    TinyModelSpec spec;
    spec.arch = arch;
    auto m = OpenImage(BuildTinyModel(spec));
    ASSERT_FALSE(m.ok()) << arch;
    EXPECT_EQ(m.status().code(), StatusCode::kNotFound) << m.status().ToString();
    EXPECT_NE(m.status().message().find(missing), std::string::npos) << m.status().ToString();
  }
  {  // unsupported RoPE scaling
    TinyModelSpec spec;
    spec.rope_linear_factor = 2.0;
    spec.rope_scaling_type = "yarn";
    const std::vector<uint8_t> image = BuildTinyModel(spec);
    auto m = OpenImage(image);
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), StatusCode::kUnsupported) << m.status().ToString();
  }
  {  // a head size above what attention supports
    TinyModelSpec spec;
    spec.n_embd = 640;
    spec.n_head = 2;
    spec.n_kv_head = 1;  // head size 320
    spec.n_layer = 1;
    const std::vector<uint8_t> image = BuildTinyModel(spec);
    auto m = OpenImage(image);
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), StatusCode::kUnsupported) << m.status().ToString();
    EXPECT_NE(m.status().message().find("head size 320"), std::string::npos)
        << m.status().ToString();
  }
  {  // q8_0 K/V with a head size that is not a multiple of 32 (the tiny model's is 16)
    TinyModelSpec spec;
    auto m = OpenImage(BuildTinyModel(spec), KvDtype::kQ8_0);
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument) << m.status().ToString();
    EXPECT_NE(m.status().message().find("multiple of 32"), std::string::npos)
        << m.status().ToString();
    EXPECT_TRUE(OpenImage(BuildTinyModel(spec), KvDtype::kF16).ok());
  }
  {  // a KV store whose layout does not fit the model
    TinyModelSpec spec;
    const std::vector<uint8_t> image = BuildTinyModel(spec);
    auto file = model::GgufFile::FromMemory(image.data(), image.size(), "tiny.gguf");
    ASSERT_TRUE(file.ok());
    auto device = CpuDevice::Create();
    ASSERT_TRUE(device.ok());
    auto governor = MemoryGovernor::Create(device->get());
    ASSERT_TRUE(governor.ok());
    OwnerId owner = *(*governor)->AddOwner({.name = "x"});
    KvLayout layout{spec.n_layer, 16, spec.n_kv_head + 1, spec.head_dim()};
    auto kv = PooledKvStore::Create(layout, 4, **governor, owner);
    ASSERT_TRUE(kv.ok());
    ThreadPool pool(1);
    CpuRunnerOptions options{governor->get(), owner, owner, kv->get(), &pool, std::nullopt};
    auto runner = CreateCpuModelRunner(**file, options);
    ASSERT_FALSE(runner.ok());
    EXPECT_EQ(runner.status().code(), StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace pier::engine
