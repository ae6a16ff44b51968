// Writes a few valid GGUF images (built with the test writer) as a seed corpus
// for gguf_fuzzer: make_seed_corpus DIR.
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "model/gguf_test_writer.h"

using pier::model::testing::GgufTestWriter;

namespace {

std::vector<uint8_t> RandomBytes(std::mt19937& rng, size_t n) {
  std::vector<uint8_t> bytes(n);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

GgufTestWriter ModelShaped(std::mt19937& rng) {
  GgufTestWriter w;
  w.AddString("general.architecture", "llama");
  w.AddU32("llama.context_length", 128);
  w.AddU32("llama.embedding_length", 32);
  w.AddU32("llama.block_count", 1);
  w.AddU32("llama.feed_forward_length", 64);
  w.AddU32("llama.attention.head_count", 4);
  w.AddF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.AddStringArray("tokenizer.ggml.tokens", {"<s>", "a", "b"});
  w.AddArray<float>("tokenizer.ggml.scores", GgufTestWriter::kF32, {0.f, -1.f, -2.f});
  w.AddTensor("token_embd.weight", 8, {32, 3}, RandomBytes(rng, 3 * 34));
  w.AddTensor("q4_1", 3, {32}, RandomBytes(rng, 20));
  w.AddTensor("q4_k", 12, {256}, RandomBytes(rng, 144));
  w.AddTensor("q5_k", 13, {256}, RandomBytes(rng, 176));
  w.AddTensor("q6_k", 14, {256}, RandomBytes(rng, 210));
  w.AddTensor("q5_0", 6, {32}, RandomBytes(rng, 22));
  w.AddTensor("bf16", 30, {4}, RandomBytes(rng, 8));
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  std::mt19937 rng(1);
  std::vector<std::vector<uint8_t>> seeds;
  seeds.push_back(ModelShaped(rng).Build());
  GgufTestWriter v2 = ModelShaped(rng);
  v2.version = 2;
  seeds.push_back(v2.Build());
  GgufTestWriter aligned;
  aligned.alignment = 64;
  aligned.AddU32("general.alignment", 64);
  aligned.AddString("general.architecture", "qwen2");
  aligned.AddTensor("f16", 1, {8, 2}, RandomBytes(rng, 32));
  aligned.AddTensor("q8_0", 8, {32}, RandomBytes(rng, 34));
  seeds.push_back(aligned.Build());
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::ofstream out(std::string(argv[1]) + "/seed" + std::to_string(i) + ".gguf",
                      std::ios::binary);
    out.write(reinterpret_cast<const char*>(seeds[i].data()),
              static_cast<std::streamsize>(seeds[i].size()));
  }
  return 0;
}
