// ModelInfo tests on metadata built in memory.
#include "model/model_info.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/gguf_test_writer.h"

namespace pier::model {
namespace {

using testing::GgufTestWriter;
using ::testing::HasSubstr;

constexpr char kName[] = "info.gguf";

// A consistent small qwen2-shaped model (metadata only, plus one tensor).
GgufTestWriter BaseWriter(std::string_view arch = "qwen2") {
  GgufTestWriter w;
  const std::string a(arch);
  w.AddString("general.architecture", arch);
  w.AddString("general.name", "tiny");
  w.AddU32(a + ".context_length", 4096);
  w.AddU32(a + ".embedding_length", 256);
  w.AddU32(a + ".block_count", 4);
  w.AddU32(a + ".feed_forward_length", 688);
  w.AddU32(a + ".attention.head_count", 8);
  w.AddU32(a + ".attention.head_count_kv", 2);
  w.AddF32(a + ".rope.freq_base", 1000000.0f);
  w.AddF32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
  w.AddStringArray("tokenizer.ggml.tokens", {"a", "b", "c", "d", "e"});
  w.AddTensor("token_embd.weight", 8, {256, 5}, std::vector<uint8_t>(5 * 8 * 34));
  w.AddTensor("output_norm.weight", 0, {256}, std::vector<uint8_t>(256 * 4));
  return w;
}

Result<ModelInfo> Read(const GgufTestWriter& writer, std::vector<uint8_t>* storage) {
  *storage = writer.Build();
  auto file = GgufFile::FromMemory(storage->data(), storage->size(), kName);
  if (!file.ok()) return file.status();
  return ReadModelInfo(**file);
}

void ExpectError(const GgufTestWriter& writer, StatusCode code, const std::string& text) {
  std::vector<uint8_t> bytes;
  Result<ModelInfo> info = Read(writer, &bytes);
  ASSERT_FALSE(info.ok()) << "expected: " << text;
  EXPECT_EQ(info.status().code(), code) << info.status().ToString();
  EXPECT_THAT(info.status().message(), HasSubstr(kName));
  EXPECT_THAT(info.status().message(), HasSubstr(text));
}

TEST(ModelInfoTest, Gemma3ReadsItsSlidingWindowAndRefusesABadOne) {
  std::vector<uint8_t> bytes;
  GgufTestWriter ok = BaseWriter("gemma3");
  ok.AddU32("gemma3.attention.sliding_window", 512);
  Result<ModelInfo> info = Read(ok, &bytes);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->sliding_window, 512);
  // gemma3's local layers cannot run without it.
  ExpectError(BaseWriter("gemma3"), StatusCode::kNotFound, "gemma3.attention.sliding_window");
  GgufTestWriter wide = BaseWriter("gemma3");
  wide.AddU32("gemma3.attention.sliding_window", 8192);
  ExpectError(wide, StatusCode::kDataLoss,
              "attention.sliding_window 8192 is larger than context_length 4096");
  GgufTestWriter zero = BaseWriter("gemma3");
  zero.AddU32("gemma3.attention.sliding_window", 0);
  ExpectError(zero, StatusCode::kDataLoss, "gemma3.attention.sliding_window' is 0");
}

TEST(ModelInfoTest, ReadsHyperParameters) {
  std::vector<uint8_t> bytes;
  Result<ModelInfo> info = Read(BaseWriter(), &bytes);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->architecture, "qwen2");
  EXPECT_EQ(info->name, "tiny");
  EXPECT_EQ(info->context_length, 4096);
  EXPECT_EQ(info->embedding_length, 256);
  EXPECT_EQ(info->block_count, 4);
  EXPECT_EQ(info->feed_forward_length, 688);
  EXPECT_EQ(info->head_count, 8);
  EXPECT_EQ(info->head_count_kv, 2);
  EXPECT_EQ(info->head_dim, 32);
  EXPECT_EQ(info->rope_dimension_count, 32);
  EXPECT_DOUBLE_EQ(info->rope_freq_base, 1000000.0);
  EXPECT_DOUBLE_EQ(info->rms_norm_eps, static_cast<double>(1e-6f));
  EXPECT_FALSE(info->rope_scaling.has_value());
  EXPECT_EQ(info->vocab_size, 5);
  EXPECT_EQ(info->weight_bytes, 5u * 8 * 34 + 256 * 4);
  EXPECT_EQ(info->parameter_count, 5 * 256 + 256);
  EXPECT_EQ(info->tensor_types.at(DType::kQ8_0), 1);
  EXPECT_EQ(info->tensor_types.at(DType::kF32), 1);
  EXPECT_EQ(info->kv_bytes_per_token, 2u * 4 * 2 * 32 * 2);
  EXPECT_FALSE(info->has_chat_template);
}

TEST(ModelInfoTest, OptionalKeysAndFallbacks) {
  GgufTestWriter w;
  w.AddString("general.architecture", "llama");
  w.AddU32("llama.context_length", 2048);
  w.AddU32("llama.embedding_length", 64);
  w.AddU32("llama.block_count", 2);
  w.AddU32("llama.feed_forward_length", 128);
  w.AddU32("llama.attention.head_count", 4);
  w.AddU32("llama.attention.key_length", 48);  // head_dim need not be n_embd / n_head
  w.AddF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.AddString("llama.rope.scaling.type", "yarn");
  w.AddF32("llama.rope.scaling.factor", 4.0f);
  w.AddU32("llama.rope.scaling.original_context_length", 512);
  w.AddString("tokenizer.chat_template", "{{ x }}");
  w.AddTensor("token_embd.weight", 0, {64, 7}, std::vector<uint8_t>(64 * 7 * 4));
  std::vector<uint8_t> bytes;
  Result<ModelInfo> info = Read(w, &bytes);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->head_count_kv, 4);  // defaults to head_count
  EXPECT_EQ(info->head_dim, 48);
  EXPECT_DOUBLE_EQ(info->rope_freq_base, 10000.0);
  ASSERT_TRUE(info->rope_scaling.has_value());
  EXPECT_EQ(info->rope_scaling->type, "yarn");
  EXPECT_DOUBLE_EQ(info->rope_scaling->factor, 4.0);
  EXPECT_EQ(info->rope_scaling->original_context, 512);
  EXPECT_EQ(info->vocab_size, 7);  // from token_embd.weight
  EXPECT_TRUE(info->has_chat_template);
  EXPECT_EQ(info->kv_bytes_per_token, 2u * 2 * 4 * 48 * 2);
}

TEST(ModelInfoTest, RejectsUnknownArchitecture) {
  GgufTestWriter w = BaseWriter("gemma");
  ExpectError(w, StatusCode::kUnsupported,
              "architecture 'gemma' is not supported (supported: llama, qwen2, qwen3, phi3, "
              "gemma2, gemma3)");
}

TEST(ModelInfoTest, RejectsMissingArchitecture) {
  GgufTestWriter w;
  w.AddU32("llama.block_count", 1);
  ExpectError(w, StatusCode::kNotFound, "general.architecture");
}

TEST(ModelInfoTest, RejectsMissingRequiredKey) {
  GgufTestWriter w;
  w.AddString("general.architecture", "llama");
  w.AddU32("llama.embedding_length", 64);
  ExpectError(w, StatusCode::kNotFound, "llama.context_length");
}

TEST(ModelInfoTest, RejectsNonPositiveOrHugeValues) {
  GgufTestWriter zero = BaseWriter();
  zero.AddU32("qwen2.attention.head_count_kv", 0);  // duplicate key: rejected by the reader
  std::vector<uint8_t> bytes;
  EXPECT_FALSE(Read(zero, &bytes).ok());

  GgufTestWriter w;
  w.AddString("general.architecture", "llama");
  w.AddI32("llama.context_length", -1);
  ExpectError(w, StatusCode::kDataLoss, "'llama.context_length' is -1");
  GgufTestWriter huge;
  huge.AddString("general.architecture", "llama");
  huge.AddU64("llama.context_length", 1ull << 40);
  ExpectError(huge, StatusCode::kDataLoss, "llama.context_length");
}

TEST(ModelInfoTest, RejectsInconsistentHeads) {
  GgufTestWriter w;
  w.AddString("general.architecture", "llama");
  w.AddU32("llama.context_length", 2048);
  w.AddU32("llama.embedding_length", 64);
  w.AddU32("llama.block_count", 2);
  w.AddU32("llama.feed_forward_length", 128);
  w.AddU32("llama.attention.head_count", 4);
  w.AddU32("llama.attention.head_count_kv", 3);
  ExpectError(w, StatusCode::kDataLoss, "not a multiple of head_count_kv 3");
}

TEST(ModelInfoTest, RejectsPerLayerHeadCounts) {
  GgufTestWriter w;
  w.AddString("general.architecture", "llama");
  w.AddU32("llama.context_length", 2048);
  w.AddU32("llama.embedding_length", 64);
  w.AddU32("llama.block_count", 2);
  w.AddU32("llama.feed_forward_length", 128);
  w.AddArray<int32_t>("llama.attention.head_count", GgufTestWriter::kI32, {4, 4});
  ExpectError(w, StatusCode::kUnsupported, "per-layer array");
}

TEST(ModelInfoTest, RejectsBadEpsilonType) {
  GgufTestWriter w;
  w.AddString("general.architecture", "llama");
  w.AddU32("llama.context_length", 2048);
  w.AddU32("llama.embedding_length", 64);
  w.AddU32("llama.block_count", 2);
  w.AddU32("llama.feed_forward_length", 128);
  w.AddU32("llama.attention.head_count", 4);
  w.AddString("llama.attention.layer_norm_rms_epsilon", "small");
  ExpectError(w, StatusCode::kInvalidArgument, "layer_norm_rms_epsilon");
}

}  // namespace
}  // namespace pier::model
