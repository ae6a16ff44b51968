// GPU benchmark of whole decode steps through the CUDA runner (engine/cuda_runner.h): random-
// weight models of the default model's shape (SmolLM2-135M) and of Llama 2 7B's, Q4_0 layer
// matrices, built in memory on the GPU machine (the real files are too large to bring). Each
// batch of B sequences is prefilled with 128 tokens, then B tokens per step are decoded for 32
// steps (CUDA graphs, as served); tokens/s = B * steps / time. The targets of issue #21 are
// stated for these numbers (7B: 400 tokens/s at batch 1, 8,000 at 64; 135M: 1,500 and 40,000).
// Then the small model again with each runner setting that waits for a measurement: without
// the fused launches (`_unfused`), with packed weights (`_packed`), on the tensor cores from 8
// tokens (`_mma`).
//
// Output: "RESULT <name> <value> <unit>" lines, or one "SKIP <reason>" line (exit 0) when no
// GPU is usable.
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/cuda_bench_util.h"
#include "device/cuda/cuda_device.h"
#include "device/cuda/cuda_plugin.h"
#include "engine/kv/leased_kv_store.h"
#include "engine/runner/cuda/cuda_runner.h"
#include "memory/memory_governor.h"
#include "model/gguf_file.h"
#include "tests/engine/random_llama.h"

namespace {

using pier::MemoryGovernor;
using pier::OwnerId;
using pier::engine::Batch;
using pier::engine::LogitsWanted;
using pier::engine::SequenceSpan;

constexpr int64_t kPrompt = 128;
constexpr int64_t kSteps = 32;
constexpr int64_t kContext = kPrompt + kSteps;

struct Model {
  const char* name;
  pier::engine::testing::RandomLlamaSpec spec;
};

// A runner setting against the default (fused launches, GGUF layout, warp-per-row products),
// timed on the small model to decide the defaults: its name suffix, the change, the batches.
struct Variant {
  const char* suffix;  // "" for the defaults
  void (*change)(pier::engine::CudaRunnerOptions&);
  std::vector<int64_t> batches;
};

bool Bench(pier::cuda::CudaDevice& device, const Model& m, const Variant& variant) {
  const std::vector<uint8_t> image = pier::engine::testing::BuildRandomLlama(m.spec, 7);
  auto file = pier::model::GgufFile::FromMemory(image.data(), image.size(), m.name);
  if (!file.ok()) {
    std::fprintf(stderr, "FAIL %s image: %s\n", m.name, file.status().ToString().c_str());
    return false;
  }
  auto governor = MemoryGovernor::Create(&device);
  if (!governor.ok()) return false;
  const OwnerId owner = *(*governor)->AddOwner({.name = m.name});
  const int64_t blocks_per_seq = (kContext + 15) / 16 + 1;
  pier::engine::LeasedKvOptions kv_options;
  kv_options.blocks_per_chunk = 64;
  kv_options.min_chunks = kv_options.initial_chunks = kv_options.max_chunks =
      static_cast<size_t>((64 * blocks_per_seq + 63) / 64);
  const pier::engine::KvLayout layout{m.spec.n_layer, 16, m.spec.n_kv_head,
                                      m.spec.n_embd / m.spec.n_head, pier::engine::KvDtype::kF16};
  auto kv = pier::engine::LeasedKvStore::Create(layout, kv_options, **governor, owner);
  if (!kv.ok()) {
    std::fprintf(stderr, "FAIL %s KV: %s\n", m.name, kv.status().ToString().c_str());
    return false;
  }
  pier::engine::CudaRunnerOptions options{&device, governor->get(), owner, owner, kv->get()};
  if (variant.change != nullptr) variant.change(options);
  auto runner = pier::engine::CreateCudaModelRunner(**file, options);
  if (!runner.ok()) {
    std::fprintf(stderr, "FAIL %s runner: %s\n", m.name, runner.status().ToString().c_str());
    return false;
  }
  std::mt19937 rng(3);
  for (int64_t batch_size : variant.batches) {
    std::vector<SequenceSpan> seqs(static_cast<size_t>(batch_size));
    Batch prefill;
    for (int64_t i = 0; i < batch_size; ++i) {
      SequenceSpan& s = seqs[i];
      s.sequence_id = i;
      for (int64_t k = 0; k < kPrompt; ++k) {
        s.tokens.push_back(static_cast<int32_t>(rng() % m.spec.n_vocab));
      }
      for (int64_t b = 0; b < blocks_per_seq; ++b) {
        s.block_table.push_back(static_cast<int32_t>(i * blocks_per_seq + b));
      }
      prefill.sequences.push_back(s);
    }
    if (auto out = (*runner)->Step(prefill); !out.ok()) {
      std::fprintf(stderr, "FAIL %s prefill: %s\n", m.name, out.status().ToString().c_str());
      return false;
    }
    double seconds = 0;
    for (int64_t step = 0; step < kSteps + 1; ++step) {  // step 0 captures the graph: untimed
      Batch decode;
      for (SequenceSpan s : seqs) {
        s.first_position = kPrompt + step;
        s.tokens = {static_cast<int32_t>(rng() % m.spec.n_vocab)};
        s.logits = LogitsWanted::kLast;
        decode.sequences.push_back(std::move(s));
      }
      const auto start = std::chrono::steady_clock::now();
      auto out = (*runner)->Step(decode);
      const auto end = std::chrono::steady_clock::now();
      if (!out.ok()) {
        std::fprintf(stderr, "FAIL %s decode: %s\n", m.name, out.status().ToString().c_str());
        return false;
      }
      if (step > 0) seconds += std::chrono::duration<double>(end - start).count();
    }
    const std::string name =
        std::string(m.name) + variant.suffix + "_decode_b" + std::to_string(batch_size);
    std::printf("RESULT %s_tokens_per_s %.0f tokens/s\n", name.c_str(),
                static_cast<double>(batch_size * kSteps) / seconds);
    std::printf("RESULT %s_step_ms %.3f ms\n", name.c_str(), 1e3 * seconds / kSteps);
  }
  const pier::engine::CudaGraphStats graphs = pier::engine::GraphStatsOf(**runner);
  std::printf("INFO %s%s graphs: %lld captured, %lld launched, %lld fallbacks\n", m.name,
              variant.suffix, static_cast<long long>(graphs.captures),
              static_cast<long long>(graphs.launches), static_cast<long long>(graphs.fallbacks));
  return true;
}

}  // namespace

int main() {
  int exit_code = 0;
  const std::unique_ptr<pier::cuda::CudaDevice> opened =
      pier::cuda::bench::OpenBenchDevice(&exit_code);
  if (opened == nullptr) return exit_code;
  Model small{"135m_q4_0", {}};
  small.spec.matrix_type = pier::DType::kQ4_0;
  Model seven{"7b_q4_0", {}};
  seven.spec.n_embd = 4096;
  seven.spec.n_layer = 32;
  seven.spec.n_head = 32;
  seven.spec.n_kv_head = 32;
  seven.spec.n_ff = 11008;
  seven.spec.n_vocab = 32000;
  seven.spec.context_length = 4096;
  seven.spec.rope_freq_base = 10000.0f;
  seven.spec.matrix_type = pier::DType::kQ4_0;
  const Variant defaults{"", nullptr, {1, 8, 64}};
  for (const Model& m : {small, seven}) {
    if (!Bench(*opened, m, defaults)) return 1;
  }
  // What each setting that waits for a measurement does on the small model.
  const Variant variants[] = {
      {"_unfused", [](pier::engine::CudaRunnerOptions& o) { o.fuse_kernels = false; }, {1, 8}},
      {"_packed", [](pier::engine::CudaRunnerOptions& o) { o.packed_weights = true; }, {1, 8, 64}},
      {"_mma", [](pier::engine::CudaRunnerOptions& o) { o.mma_min_tokens = 8; }, {8, 64}},
  };
  for (const Variant& variant : variants) {
    if (!Bench(*opened, small, variant)) return 1;
  }
  return 0;
}
