// Validation tests of the GGUF reader on small images built in memory.
#include "model/gguf_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "model/gguf_test_writer.h"

namespace pier::model {
namespace {

using testing::GgufTestWriter;
using ::testing::HasSubstr;

constexpr char kName[] = "test.gguf";

// A small valid file: a few keys of each kind and two tensors (f32 and q8_0).
GgufTestWriter ValidWriter() {
  GgufTestWriter w;
  w.AddString("general.architecture", "llama");
  w.AddU32("llama.block_count", 2);
  w.AddF32("llama.rope.freq_base", 10000.0f);
  w.AddBool("general.flag", true);
  w.AddStringArray("tokenizer.ggml.tokens", {"<s>", "a", "bc"});
  w.AddArray<int32_t>("tokenizer.ggml.token_type", GgufTestWriter::kI32, {1, 2, 3});
  std::vector<uint8_t> f32(4 * 8 * 4);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = static_cast<uint8_t>(i);
  w.AddTensor("a.weight", 0, {8, 4}, f32);
  w.AddTensor("b.weight", 8, {32, 2}, std::vector<uint8_t>(2 * 34, 0x11));
  return w;
}

Result<std::unique_ptr<GgufFile>> Open(const std::vector<uint8_t>& bytes) {
  return GgufFile::FromMemory(bytes.data(), bytes.size(), kName);
}

// Expects an error with `code` whose message names the file and contains `text`.
void ExpectError(const std::vector<uint8_t>& bytes, StatusCode code, const std::string& text) {
  auto file = Open(bytes);
  ASSERT_FALSE(file.ok()) << "expected an error containing: " << text;
  EXPECT_EQ(file.status().code(), code) << file.status().ToString();
  EXPECT_THAT(file.status().message(), HasSubstr(kName));
  EXPECT_THAT(file.status().message(), HasSubstr(text));
}

TEST(GgufFileTest, ReadsValidFile) {
  const std::vector<uint8_t> bytes = ValidWriter().Build();
  auto file = Open(bytes);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const GgufFile& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.metadata().size(), 6u);
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_EQ(*f.GetInt("llama.block_count"), 2);
  EXPECT_DOUBLE_EQ(*f.GetFloat("llama.rope.freq_base"), 10000.0);
  EXPECT_TRUE(*f.GetBool("general.flag"));
  EXPECT_EQ(*f.GetStringArray("tokenizer.ggml.tokens"),
            (std::vector<std::string_view>{"<s>", "a", "bc"}));
  EXPECT_EQ(*f.GetIntArray("tokenizer.ggml.token_type"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(f.Find("tokenizer.ggml.tokens")->array_size(), 3u);

  ASSERT_EQ(f.tensors().size(), 2u);
  const GgufTensorInfo* a = f.FindTensor("a.weight");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->type, DType::kF32);
  EXPECT_EQ(a->dims, (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(a->element_count, 32);
  EXPECT_EQ(a->row_length(), 8);
  EXPECT_EQ(a->row_count(), 4);
  EXPECT_EQ(a->size_bytes, 128u);
  EXPECT_EQ(a->file_offset % 32, 0u);
  EXPECT_EQ(a->data, bytes.data() + a->file_offset);
  EXPECT_EQ(a->data[5], 5);
  const GgufTensorInfo* b = f.FindTensor("b.weight");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->type, DType::kQ8_0);
  EXPECT_EQ(b->size_bytes, 68u);
  EXPECT_EQ(b->file_offset, a->file_offset + 128);
  EXPECT_EQ(b->data[0], 0x11);
  EXPECT_EQ(f.FindTensor("missing"), nullptr);
}

TEST(GgufFileTest, FindMatrixChecksTheShapeInGgmlOrder) {
  const std::vector<uint8_t> bytes = ValidWriter().Build();
  auto file = Open(bytes);
  ASSERT_TRUE(file.ok());
  const GgufFile& f = **file;
  // a.weight has ggml dims {8, 4}: a matrix of 4 rows of 8.
  Result<const GgufTensorInfo*> a = f.FindMatrix("a.weight", 4, 8);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(*a, f.FindTensor("a.weight"));

  Result<const GgufTensorInfo*> transposed = f.FindMatrix("a.weight", 8, 4);
  ASSERT_FALSE(transposed.ok());
  EXPECT_EQ(transposed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(transposed.status().message(),
            "test.gguf: tensor 'a.weight' should be [4, 8] (ggml order)");

  Result<const GgufTensorInfo*> missing = f.FindMatrix("c.weight", 4, 8);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "test.gguf: tensor 'c.weight' is missing");
}

TEST(GgufFileTest, TypedLookupsNameFileAndKey) {
  const std::vector<uint8_t> bytes = ValidWriter().Build();
  auto file = Open(bytes);
  ASSERT_TRUE(file.ok());
  Result<int64_t> missing = (*file)->GetInt("nope.key");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("test.gguf"));
  EXPECT_THAT(missing.status().message(), HasSubstr("nope.key"));
  Result<int64_t> wrong = (*file)->GetInt("general.architecture");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.status().message(), HasSubstr("string"));
  EXPECT_FALSE((*file)->GetStringArray("tokenizer.ggml.token_type").ok());
}

TEST(GgufFileTest, IntegerWideningAndLimits) {
  GgufTestWriter w;
  w.AddU64("big", ~0ull);
  w.AddI64("neg", -5);
  w.AddU8("small", 200);
  w.AddF64("pi", 3.5);
  const std::vector<uint8_t> bytes = w.Build();
  auto file = Open(bytes);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_FALSE((*file)->GetInt("big").ok());  // above INT64_MAX
  EXPECT_EQ(*(*file)->GetInt("neg"), -5);
  EXPECT_EQ(*(*file)->GetInt("small"), 200);
  EXPECT_DOUBLE_EQ(*(*file)->GetFloat("pi"), 3.5);
  EXPECT_DOUBLE_EQ(*(*file)->GetFloat("small"), 200.0);
  EXPECT_EQ((*file)->Find("big")->ToDisplayString(), "18446744073709551615");
}

TEST(GgufFileTest, RejectsTruncationAtEveryOffset) {
  const std::vector<uint8_t> bytes = ValidWriter().Build();
  auto full = Open(bytes);
  ASSERT_TRUE(full.ok());
  // The file is complete once the last tensor's data ends; only padding follows.
  const GgufTensorInfo& last = (*full)->tensors().back();
  const size_t data_end = last.file_offset + last.size_bytes;
  ASSERT_LT(data_end, bytes.size());
  for (size_t size = 0; size < bytes.size(); ++size) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + size);
    auto file = Open(cut);
    if (size >= data_end) {
      EXPECT_TRUE(file.ok()) << "size " << size << ": " << file.status().ToString();
      continue;
    }
    ASSERT_FALSE(file.ok()) << "opened a file truncated to " << size << " bytes";
    EXPECT_EQ(file.status().code(), StatusCode::kDataLoss) << file.status().ToString();
    EXPECT_THAT(file.status().message(), HasSubstr(kName));
  }
}

TEST(GgufFileTest, RejectsBadMagic) {
  GgufTestWriter w = ValidWriter();
  w.magic = 0x46554748u;
  ExpectError(w.Build(), StatusCode::kDataLoss, "not a GGUF file");
}

TEST(GgufFileTest, RejectsVersionOneAsUnsupported) {
  GgufTestWriter w = ValidWriter();
  w.version = 1;
  ExpectError(w.Build(), StatusCode::kUnsupported, "version 1 is not supported");
}

TEST(GgufFileTest, RejectsUnknownVersion) {
  GgufTestWriter w = ValidWriter();
  w.version = 4;
  ExpectError(w.Build(), StatusCode::kUnsupported, "version 4");
}

TEST(GgufFileTest, AcceptsVersionTwo) {
  GgufTestWriter w = ValidWriter();
  w.version = 2;
  const std::vector<uint8_t> bytes = w.Build();
  auto file = Open(bytes);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->version(), 2u);
}

TEST(GgufFileTest, RejectsHugeCounts) {
  GgufTestWriter w = ValidWriter();
  w.kv_count_override = ~0ull;
  ExpectError(w.Build(), StatusCode::kDataLoss, "metadata entries");
  GgufTestWriter t = ValidWriter();
  t.tensor_count_override = 1ull << 60;
  ExpectError(t.Build(), StatusCode::kDataLoss, "tensors");
}

TEST(GgufFileTest, RejectsStringLengthPastEnd) {
  GgufTestWriter w;
  std::vector<uint8_t> value;
  GgufTestWriter::Put<uint64_t>(value, 1000);  // claims 1000 bytes, has 3
  value.insert(value.end(), {'a', 'b', 'c'});
  w.AddRaw("general.name", GgufTestWriter::kString, value);
  ExpectError(w.Build(), StatusCode::kDataLoss, "general.name");
  ExpectError(w.Build(), StatusCode::kDataLoss, "string length 1000");
}

TEST(GgufFileTest, RejectsArrayLengthPastEnd) {
  GgufTestWriter w;
  std::vector<uint8_t> value;
  GgufTestWriter::Put<uint32_t>(value, GgufTestWriter::kF32);
  GgufTestWriter::Put<uint64_t>(value, 1ull << 62);
  w.AddRaw("scores", GgufTestWriter::kArray, value);
  ExpectError(w.Build(), StatusCode::kDataLoss, "scores");
  GgufTestWriter s;
  value.clear();
  GgufTestWriter::Put<uint32_t>(value, GgufTestWriter::kString);
  GgufTestWriter::Put<uint64_t>(value, 1ull << 40);
  s.AddRaw("tokens", GgufTestWriter::kArray, value);
  ExpectError(s.Build(), StatusCode::kDataLoss, "strings exceeds");
}

TEST(GgufFileTest, RejectsUnknownValueTypes) {
  GgufTestWriter w;
  w.AddRaw("weird", 13, {0, 0, 0, 0});
  ExpectError(w.Build(), StatusCode::kDataLoss, "unknown value type 13");
  GgufTestWriter a;
  std::vector<uint8_t> value;
  GgufTestWriter::Put<uint32_t>(value, 77);
  GgufTestWriter::Put<uint64_t>(value, 0);
  a.AddRaw("arr", GgufTestWriter::kArray, value);
  ExpectError(a.Build(), StatusCode::kDataLoss, "unknown element type 77");
}

TEST(GgufFileTest, RejectsBadAlignment) {
  for (uint32_t alignment : {0u, 3u, 48u}) {
    GgufTestWriter w = ValidWriter();
    w.AddU32("general.alignment", alignment);
    ExpectError(w.Build(), StatusCode::kDataLoss, "power of two");
  }
  GgufTestWriter s = ValidWriter();
  s.AddString("general.alignment", "64");
  ExpectError(s.Build(), StatusCode::kDataLoss, "general.alignment has type string");
}

TEST(GgufFileTest, HonoursCustomAlignment) {
  GgufTestWriter w = ValidWriter();
  w.alignment = 64;
  w.AddU32("general.alignment", 64);
  const std::vector<uint8_t> bytes = w.Build();
  auto file = Open(bytes);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->alignment(), 64u);
  for (const GgufTensorInfo& t : (*file)->tensors()) EXPECT_EQ(t.file_offset % 64, 0u);
}

TEST(GgufFileTest, RejectsMisalignedTensorOffset) {
  GgufTestWriter w;
  w.AddTensor("x", 0, {4}, std::vector<uint8_t>(16), 8);
  ExpectError(w.Build(), StatusCode::kDataLoss, "not a multiple of the alignment 32");
}

TEST(GgufFileTest, RejectsTensorPastEnd) {
  GgufTestWriter w;
  w.AddTensor("blk.0.attn_q.weight", 0, {1024}, std::vector<uint8_t>(16));
  ExpectError(w.Build(), StatusCode::kDataLoss,
              "tensor 'blk.0.attn_q.weight' (offset 96, 4096 bytes) extends past the end of the "
              "file (size 128)");
  GgufTestWriter far;
  far.AddTensor("x", 0, {4}, std::vector<uint8_t>(16), 1ull << 63);
  ExpectError(far.Build(), StatusCode::kDataLoss, "extends past the end of the file");
}

TEST(GgufFileTest, RejectsUnknownTensorType) {
  GgufTestWriter w;
  w.AddTensor("odd.weight", 4, {32}, std::vector<uint8_t>(32));
  ExpectError(w.Build(), StatusCode::kUnsupported, "tensor 'odd.weight' has unknown tensor type 4");
}

TEST(GgufFileTest, OpensKnownButUnsupportedTypes) {
  GgufTestWriter w;
  w.AddTensor("q2", 10, {256}, std::vector<uint8_t>(84));
  w.AddTensor("iq4", 23, {256}, std::vector<uint8_t>(136));
  const std::vector<uint8_t> bytes = w.Build();
  auto file = Open(bytes);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->FindTensor("iq4")->type, DType::kIQ4_XS);
}

TEST(GgufFileTest, RejectsBadDims) {
  GgufTestWriter zero;
  zero.AddTensor("z", 0, {4, 0}, {});
  ExpectError(zero.Build(), StatusCode::kDataLoss, "dimension 1 of 0");
  GgufTestWriter many;
  many.AddTensor("m", 0, {1, 1, 1, 1, 1}, std::vector<uint8_t>(4));
  ExpectError(many.Build(), StatusCode::kDataLoss, "5 dimensions");
  GgufTestWriter none;
  none.AddTensor("n", 0, {}, {});
  ExpectError(none.Build(), StatusCode::kDataLoss, "0 dimensions");
  GgufTestWriter overflow;
  overflow.AddTensor("o", 0, {1ull << 40, 1ull << 40}, {});
  ExpectError(overflow.Build(), StatusCode::kDataLoss, "overflows");
  GgufTestWriter bytes_overflow;
  bytes_overflow.AddTensor("b", 0, {1ull << 62}, {});
  ExpectError(bytes_overflow.Build(), StatusCode::kDataLoss, "overflows");
}

TEST(GgufFileTest, RejectsRowNotMultipleOfBlock) {
  GgufTestWriter w;
  w.AddTensor("q", 2, {48}, std::vector<uint8_t>(36));
  ExpectError(w.Build(), StatusCode::kDataLoss, "not a multiple of the q4_0 block size 32");
}

TEST(GgufFileTest, RejectsDuplicates) {
  GgufTestWriter keys;
  keys.AddU32("a", 1);
  keys.AddU32("a", 2);
  ExpectError(keys.Build(), StatusCode::kDataLoss, "duplicate metadata key 'a'");
  GgufTestWriter names;
  names.AddTensor("t", 0, {4}, std::vector<uint8_t>(16));
  names.AddTensor("t", 0, {4}, std::vector<uint8_t>(16));
  ExpectError(names.Build(), StatusCode::kDataLoss, "duplicate tensor name 't'");
}

TEST(GgufFileTest, RejectsNestedArrays) {
  GgufTestWriter w;
  std::vector<uint8_t> value;
  GgufTestWriter::Put<uint32_t>(value, GgufTestWriter::kArray);
  GgufTestWriter::Put<uint64_t>(value, 0);
  w.AddRaw("nested", GgufTestWriter::kArray, value);
  ExpectError(w.Build(), StatusCode::kUnsupported, "nested arrays");
}

TEST(GgufFileTest, OpenMapsFileAndNamesMissingOrEmptyFile) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/pier_gguf_file_test.gguf";
  const std::vector<uint8_t> bytes = ValidWriter().Build();
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->path(), path);
  EXPECT_EQ((*file)->file_size(), bytes.size());
  EXPECT_EQ((*file)->FindTensor("a.weight")->data[7], 7);

  auto missing = GgufFile::Open(dir + "/does_not_exist.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("does_not_exist.gguf"));

  const std::string empty = dir + "/pier_gguf_empty.gguf";
  { std::ofstream out(empty, std::ios::binary); }
  auto empty_file = GgufFile::Open(empty);
  ASSERT_FALSE(empty_file.ok());
  EXPECT_EQ(empty_file.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(empty_file.status().message(), HasSubstr("pier_gguf_empty.gguf"));
  std::remove(path.c_str());
  std::remove(empty.c_str());
}

}  // namespace
}  // namespace pier::model
