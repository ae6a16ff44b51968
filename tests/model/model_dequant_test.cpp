// Dequantizes rows of the default model and compares them with gguf-py's
// GGUFReader + dequantize (fixture: tools/gen_dequant_fixture.py --model ...).
#include <gtest/gtest.h>

#include <bit>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/gguf_file.h"

namespace pier::model {
namespace {

uint64_t Fnv1a64(const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

TEST(ModelDequantTest, DefaultModelRowsMatchGgufPy) {
  const std::string fixture_path =
      std::string(PIER_SOURCE_DIR) + "/tests/fixtures/model/smollm2_rows.json";
  std::ifstream in(fixture_path);
  ASSERT_TRUE(in.good()) << "missing fixture " << fixture_path;
  const nlohmann::json fixture = nlohmann::json::parse(in);

  auto file = GgufFile::Open(PIER_DEFAULT_MODEL_PATH);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  int rows_checked = 0;
  for (const auto& t : fixture["tensors"]) {
    const std::string name = t["name"].get<std::string>();
    const GgufTensorInfo* tensor = (*file)->FindTensor(name);
    ASSERT_NE(tensor, nullptr) << name;
    std::string type_name = t["type"].get<std::string>();  // "Q4_1"
    for (char& c : type_name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    EXPECT_EQ(DTypeName(tensor->type), type_name) << name;
    ASSERT_EQ(tensor->row_length(), t["row_length"].get<int64_t>()) << name;
    ASSERT_EQ(tensor->row_count(), t["rows"].get<int64_t>()) << name;
    std::vector<float> row(static_cast<size_t>(tensor->row_length()));
    for (const auto& sample : t["samples"]) {
      const auto r = sample["row"].get<int64_t>();
      ASSERT_TRUE(DequantizeRows(*tensor, r, 1, row.data()).ok()) << name << " row " << r;
      const std::string first = sample["first"].get<std::string>();
      for (size_t i = 0; i < first.size() / 8; ++i) {
        const auto bits = static_cast<uint32_t>(std::stoul(first.substr(8 * i, 8), nullptr, 16));
        EXPECT_EQ(std::bit_cast<uint32_t>(row[i]), bits)
            << name << " row " << r << " [" << i << "]";
      }
      char hash[17];
      std::snprintf(hash, sizeof(hash), "%016llx",
                    static_cast<unsigned long long>(Fnv1a64(row.data(), row.size() * 4)));
      EXPECT_EQ(std::string(hash), sample["fnv1a64"].get<std::string>()) << name << " row " << r;
      double sum = 0;
      for (float v : row) sum += v;
      EXPECT_NEAR(sum, sample["sum"].get<double>(), 1e-9 * (1 + std::abs(sum))) << name;
      ++rows_checked;
    }
  }
  EXPECT_GE(rows_checked, 15);
}

TEST(ModelDequantTest, RowsOutOfRangeAreRejected) {
  auto file = GgufFile::Open(PIER_DEFAULT_MODEL_PATH);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const GgufTensorInfo* tensor = (*file)->FindTensor("blk.0.attn_q.weight");
  ASSERT_NE(tensor, nullptr);
  std::vector<float> row(static_cast<size_t>(tensor->row_length()));
  EXPECT_EQ(DequantizeRows(*tensor, tensor->row_count(), 1, row.data()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DequantizeRows(*tensor, -1, 1, row.data()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pier::model
