// pier_bench_embed: offline embedding throughput of an encoder GGUF (texts/s), the number
// issue #19 compares against sentence-transformers at batch 32.
//
//   pier_bench_embed --model models/all-MiniLM-L6-v2.Q8_0.gguf [--threads 2] [--batch 32]
//                    [--tokens 12] [--texts 512]
//
// Inputs are synthetic texts of exactly --tokens tokens ([CLS] + words + [SEP]) drawn from the
// vocabulary with a fixed seed; the whole set is embedded once to warm up, then timed.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "device/cpu/cpu_device.h"
#include "encoder/bert_model.h"
#include "kernels/cpu/matmul.h"
#include "memory/memory_governor.h"
#include "model/gguf_file.h"

int main(int argc, char** argv) {
  std::string path;
  int threads = 2;
  int64_t batch = 32, tokens = 12, texts = 512;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--model")
      path = argv[i + 1];
    else if (flag == "--threads")
      threads = std::atoi(argv[i + 1]);
    else if (flag == "--batch")
      batch = std::atoll(argv[i + 1]);
    else if (flag == "--tokens")
      tokens = std::atoll(argv[i + 1]);
    else if (flag == "--texts")
      texts = std::atoll(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (path.empty() || batch <= 0 || tokens < 2 || texts <= 0) {
    std::fprintf(stderr,
                 "usage: %s --model FILE.gguf [--threads N] [--batch N] [--tokens N] "
                 "[--texts N]\n",
                 argv[0]);
    return 2;
  }
  using namespace pier;
  auto file = model::GgufFile::Open(path);
  if (!file.ok()) {
    std::fprintf(stderr, "%s\n", file.status().ToString().c_str());
    return 1;
  }
  auto device = CpuDevice::Create();
  auto governor = MemoryGovernor::Create(device->get());
  auto weights = (*governor)->AddOwner({.name = "weights"});
  auto workspace = (*governor)->AddOwner({.name = "workspace"});
  ThreadPool pool(threads);
  auto model = encoder::BertModel::Create(**file, {.governor = governor->get(),
                                                   .weights_owner = *weights,
                                                   .workspace_owner = *workspace,
                                                   .pool = &pool,
                                                   .max_batch_tokens = batch * tokens});
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  const int64_t d = (*model)->info().embedding_length;
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> word(2000, 29000);
  std::vector<std::vector<int32_t>> ids(texts);
  for (auto& t : ids) {
    t.push_back(101);
    for (int64_t i = 0; i + 2 < tokens; ++i) t.push_back(word(rng));
    t.push_back(102);
  }
  // A row per token: enough for a model that pools none too (BertModel::Embed).
  std::vector<float> out(batch * tokens * d);
  auto run_all = [&]() {
    for (int64_t first = 0; first < texts; first += batch) {
      std::vector<encoder::EncoderInput> inputs;
      for (int64_t i = first; i < std::min(texts, first + batch); ++i)
        inputs.push_back({.ids = ids[i]});
      Status st = (*model)->Embed(inputs, out.data());
      if (!st.ok()) {
        std::fprintf(stderr, "%s\n", st.ToString().c_str());
        std::exit(1);
      }
    }
  };
  run_all();
  const auto start = std::chrono::steady_clock::now();
  run_all();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("model %s  isa %s  threads %d  batch %lld  tokens/text %lld  texts %lld\n",
              path.c_str(), kernels::MatMulIsaName(), threads, static_cast<long long>(batch),
              static_cast<long long>(tokens), static_cast<long long>(texts));
  std::printf("%.1f texts/s  %.0f tokens/s  %.2f ms per batch\n", texts / seconds,
              texts * tokens / seconds, seconds * 1000.0 / ((texts + batch - 1) / batch));
  return 0;
}
