// Seeded random corruption of a valid GGUF image: the reader must reject or
// accept every mutant without reading outside it (run under ASan/UBSan in CI).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "model/gguf_file.h"
#include "model/gguf_test_writer.h"
#include "model/gguf_walk.h"

namespace pier::model {
namespace {

using testing::GgufTestWriter;

constexpr char kName[] = "mutant.gguf";

// A small model-shaped file with every value kind and several tensor types.
std::vector<uint8_t> Seed() {
  GgufTestWriter w;
  w.AddString("general.architecture", "llama");
  w.AddString("general.name", "seed");
  w.AddU32("llama.context_length", 128);
  w.AddU32("llama.embedding_length", 32);
  w.AddU32("llama.block_count", 1);
  w.AddU32("llama.feed_forward_length", 64);
  w.AddU32("llama.attention.head_count", 4);
  w.AddU32("llama.attention.head_count_kv", 2);
  w.AddF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.AddF64("llama.rope.freq_base", 10000.0);
  w.AddBool("tokenizer.ggml.add_bos_token", true);
  w.AddStringArray("tokenizer.ggml.tokens", {"<s>", "</s>", "a", "b"});
  w.AddArray<float>("tokenizer.ggml.scores", GgufTestWriter::kF32, {0.f, -1.f, -2.f, -3.f});
  w.AddArray<int32_t>("tokenizer.ggml.token_type", GgufTestWriter::kI32, {3, 3, 1, 1});
  w.AddU32("general.alignment", 32);
  std::mt19937 rng(7);
  auto random_bytes = [&rng](size_t n) {
    std::vector<uint8_t> bytes(n);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
    return bytes;
  };
  w.AddTensor("token_embd.weight", 8, {32, 4}, random_bytes(4 * 34));     // q8_0
  w.AddTensor("blk.0.attn_q.weight", 3, {32, 2}, random_bytes(2 * 20));   // q4_1
  w.AddTensor("blk.0.ffn_up.weight", 12, {256, 1}, random_bytes(144));    // q4_k
  w.AddTensor("blk.0.ffn_down.weight", 14, {256, 1}, random_bytes(210));  // q6_k
  w.AddTensor("blk.0.attn_norm.weight", 1, {32}, random_bytes(64));       // f16
  w.AddTensor("output_norm.weight", 0, {32}, random_bytes(128));          // f32
  return w.Build();
}

void Mutate(std::mt19937_64& rng, std::vector<uint8_t>& bytes) {
  auto pick = [&rng](size_t n) { return static_cast<size_t>(rng() % (n == 0 ? 1 : n)); };
  const int mutations = 1 + static_cast<int>(rng() % 3);
  for (int m = 0; m < mutations && !bytes.empty(); ++m) {
    switch (rng() % 6) {
      case 0:  // flip random bits of one byte
        bytes[pick(bytes.size())] ^= static_cast<uint8_t>(1 + rng() % 255);
        break;
      case 1:  // truncate
        bytes.resize(pick(bytes.size()));
        break;
      case 2: {  // overwrite a 64-bit field with a hostile length
        const uint64_t candidates[] = {0,
                                       1,
                                       0xffffffffffffffffull,
                                       0x7fffffffffffffffull,
                                       1ull << 32,
                                       bytes.size(),
                                       bytes.size() + 1,
                                       rng()};
        const uint64_t value = candidates[rng() % 8];
        if (bytes.size() >= 8) std::memcpy(bytes.data() + pick(bytes.size() - 7), &value, 8);
        break;
      }
      case 3: {  // overwrite a 32-bit field (types, n_dims, version)
        const uint32_t candidates[] = {0,  1,  4,           9,
                                       13, 30, 0xffffffffu, static_cast<uint32_t>(rng())};
        const uint32_t value = candidates[rng() % 8];
        if (bytes.size() >= 4) std::memcpy(bytes.data() + pick(bytes.size() - 3), &value, 4);
        break;
      }
      case 4: {  // delete a run of bytes
        const size_t at = pick(bytes.size());
        const size_t n = std::min<size_t>(1 + rng() % 16, bytes.size() - at);
        bytes.erase(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                    bytes.begin() + static_cast<std::ptrdiff_t>(at + n));
        break;
      }
      default: {  // insert random bytes
        const size_t at = pick(bytes.size() + 1);
        std::vector<uint8_t> extra(1 + rng() % 16);
        for (uint8_t& b : extra) b = static_cast<uint8_t>(rng());
        bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at), extra.begin(), extra.end());
        break;
      }
    }
  }
}

TEST(GgufCorruptionTest, RandomMutationsNeverCrash) {
  const std::vector<uint8_t> seed = Seed();
  {
    auto file = GgufFile::FromMemory(seed.data(), seed.size(), kName);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    ASSERT_TRUE(ReadModelInfo(**file).ok());
  }
  std::mt19937_64 rng(0x5eed'6775'6600ull);
  constexpr int kMutants = 10000;  // about 8 s under ASan at -O0
  int opened = 0, failed = 0;
  uint64_t checksum = 0;
  for (int i = 0; i < kMutants; ++i) {
    // A fresh heap buffer of the exact size, so ASan sees any read past its end.
    std::vector<uint8_t> bytes = seed;
    Mutate(rng, bytes);
    std::unique_ptr<uint8_t[]> exact(new uint8_t[bytes.size() + (bytes.empty() ? 1 : 0)]);
    if (!bytes.empty()) std::memcpy(exact.get(), bytes.data(), bytes.size());
    auto file = GgufFile::FromMemory(exact.get(), bytes.size(), kName);
    if (!file.ok()) {
      ++failed;
      ASSERT_NE(file.status().message().find(kName), std::string::npos)
          << "mutant " << i << ": " << file.status().ToString();
      continue;
    }
    ++opened;
    for (const GgufTensorInfo& tensor : (*file)->tensors()) {
      ASSERT_GE(tensor.data, exact.get());
      ASSERT_LE(tensor.file_offset + tensor.size_bytes, bytes.size()) << tensor.name;
    }
    checksum += testing::WalkGgufFile(**file);
  }
  std::printf("%d mutants: %d opened, %d rejected (checksum %llu)\n", kMutants, opened, failed,
              static_cast<unsigned long long>(checksum));
  EXPECT_EQ(opened + failed, kMutants);
  EXPECT_GT(opened, 0);  // some mutations (e.g. in tensor data) keep the file valid
  EXPECT_GT(failed, kMutants / 2);
}

}  // namespace
}  // namespace pier::model
