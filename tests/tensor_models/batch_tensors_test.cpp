// Batch tensors: BYTES elements split and joined, data checked against shapes, requests
// concatenated along the batch (padded or not) and sliced back.
#include "tensor_models/batch_tensors.h"

#include <gtest/gtest.h>

#include "tensor_test_util.h"

namespace pier::tensor_models {
namespace {

using testing::Floats;
using testing::Fp32;
using testing::Strings;
using testing::StringsOf;

TEST(BytesElementsTest, JoinAndSplitRoundTrip) {
  const std::vector<std::string> values = {"", "a", std::string(300, 'x'), std::string("\0z", 2)};
  const std::string joined = JoinBytesElements(values);
  EXPECT_EQ(joined.size(), 4 * 4 + 0 + 1 + 300 + 2);
  EXPECT_EQ(joined.substr(0, 4), std::string("\0\0\0\0", 4));
  EXPECT_EQ(joined.substr(9, 4), std::string("\x2c\x01\0\0", 4));  // 300, little-endian
  auto split = SplitBytesElements(joined, 4);
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  ASSERT_EQ(split->size(), 4u);
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ((*split)[i], values[i]);
  auto offsets = BytesElementOffsets(joined, 4);
  ASSERT_TRUE(offsets.ok());
  EXPECT_EQ(*offsets, (std::vector<size_t>{0, 4, 9, 313, 319}));
}

TEST(BytesElementsTest, RefusesWhatIsNotExactlyTheElements) {
  const std::string two = JoinBytesElements(std::vector<std::string>{"ab", "c"});
  EXPECT_EQ(BytesElementOffsets(two, 3).status().message(),
            "data holds 2 BYTES elements, the shape needs 3");
  EXPECT_EQ(BytesElementOffsets(two, 1).status().message(),
            "data holds 5 bytes past the 1 BYTES elements the shape needs");
  EXPECT_EQ(BytesElementOffsets(two.substr(0, 10), 2).status().message(),
            "BYTES element 1 is cut short: its length says 1 bytes, 0 remain");
  EXPECT_EQ(BytesElementOffsets(two.substr(0, 7), 2).status().message(),
            "BYTES element 1 is cut short: 1 bytes remain for its 4-byte length");
  // A length prefix that claims far more than is there.
  EXPECT_EQ(BytesElementOffsets(std::string("\xff\xff\xff\xff", 4), 1).status().message(),
            "BYTES element 0 is cut short: its length says 4294967295 bytes, 0 remain");
  // An absurd count with little data is refused without reserving for it.
  EXPECT_FALSE(BytesElementOffsets(two, int64_t{1} << 60).ok());
  EXPECT_TRUE(BytesElementOffsets("", 0).ok());
}

TEST(CheckTensorDataTest, FixedSizeAndBytes) {
  EXPECT_TRUE(CheckTensorData(Fp32("a", {2, 4}, std::vector<float>(8))).ok());
  EXPECT_EQ(CheckTensorData(Fp32("a", {2, 4}, std::vector<float>(5))).message(),
            "data holds 20 bytes, shape [2, 4] of FP32 needs 32");
  EXPECT_EQ(CheckTensorData(Strings("s", {2, 2}, {"a", "b", "c"})).message(),
            "data holds 3 BYTES elements, shape [2, 2] needs 4");
  EXPECT_TRUE(CheckTensorData(Strings("s", {0, 2}, {})).ok());
  HostTensor huge{
      .name = "h", .type = ElementType::kFp64, .shape = {int64_t{1} << 61, 2}, .bytes = {}};
  EXPECT_EQ(CheckTensorData(huge).code(), StatusCode::kInvalidArgument);
}

TEST(BatchTensorsTest, ConcatenatesAndSlicesBack) {
  const HostTensor a = Fp32("x", {1, 2}, {1, 2});
  const HostTensor b = Fp32("x", {3, 2}, {3, 4, 5, 6, 7, 8});
  const HostTensor* parts[] = {&a, &b};
  const HostTensor whole = ConcatenateBatch(parts);
  EXPECT_EQ(whole.shape, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(Floats(whole), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  auto rows = BatchRows::Of(whole);
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->rows(), 4);
  const HostTensor second = rows->Slice(1, 3);
  EXPECT_EQ(second.name, "x");
  EXPECT_EQ(second.shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(Floats(second), (std::vector<float>{3, 4, 5, 6, 7, 8}));
}

TEST(BatchTensorsTest, BytesRowsSliceWholeElements) {
  const HostTensor a = Strings("s", {1, 2}, {"one", ""});
  const HostTensor b = Strings("s", {2, 2}, {"three", "four", "fifty", "6"});
  const HostTensor* parts[] = {&a, &b};
  const HostTensor whole = ConcatenateBatch(parts);
  EXPECT_EQ(StringsOf(whole), (std::vector<std::string>{"one", "", "three", "four", "fifty", "6"}));
  auto rows = BatchRows::Of(whole);
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(StringsOf(rows->Slice(0, 1)), (std::vector<std::string>{"one", ""}));
  EXPECT_EQ(StringsOf(rows->Slice(1, 2)),
            (std::vector<std::string>{"three", "four", "fifty", "6"}));
  EXPECT_EQ(StringsOf(rows->Slice(2, 1)), (std::vector<std::string>{"fifty", "6"}));
}

// Parts of different sizes after the batch: each at the start of its rows along every dimension,
// the rest the pad element, and the whole at the largest size of each dimension.
TEST(BatchTensorsTest, ConcatenatesPaddedToTheLargestOfEachDimension) {
  const HostTensor a = Fp32("x", {1, 2, 1}, {1, 2});              // [1, 2, 1]
  const HostTensor b = Fp32("x", {2, 1, 3}, {3, 4, 5, 6, 7, 8});  // [2, 1, 3]
  const HostTensor c = Fp32("x", {1, 2, 2}, {9, 10, 11, 12});     // [1, 2, 2]
  const HostTensor* parts[] = {&a, &b, &c};
  const float pad = -1;
  const std::string element(reinterpret_cast<const char*>(&pad), sizeof(pad));
  const HostTensor whole = ConcatenatePadded(parts, element);
  EXPECT_EQ(whole.name, "x");
  EXPECT_EQ(whole.shape, (std::vector<int64_t>{4, 2, 3}));
  EXPECT_EQ(Floats(whole), (std::vector<float>{1, -1, -1, 2,  -1, -1,    // a
                                               3, 4,  5,  -1, -1, -1,    // b, row 0
                                               6, 7,  8,  -1, -1, -1,    // b, row 1
                                               9, 10, -1, 11, 12, -1}))  // c
      << "row-major, each part's elements where its own indices put them";
  // Rank 2 (the last dimension padded) and rank 1 (nothing to pad).
  const HostTensor d = Fp32("y", {2, 1}, {1, 2});
  const HostTensor e = Fp32("y", {1, 3}, {3, 4, 5});
  const HostTensor* two[] = {&d, &e};
  EXPECT_EQ(Floats(ConcatenatePadded(two, element)),
            (std::vector<float>{1, -1, -1, 2, -1, -1, 3, 4, 5}));
  const HostTensor f = Fp32("z", {2}, {1, 2});
  const HostTensor g = Fp32("z", {1}, {3});
  const HostTensor* one[] = {&f, &g};
  const HostTensor line = ConcatenatePadded(one, element);
  EXPECT_EQ(line.shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(Floats(line), (std::vector<float>{1, 2, 3}));
}

TEST(BatchTensorsTest, RowsRefuseScalarsAndBadData) {
  EXPECT_FALSE(BatchRows::Of(Fp32("x", {}, {1})).ok());
  EXPECT_FALSE(BatchRows::Of(Fp32("x", {2, 2}, {1, 2, 3})).ok());
}

}  // namespace
}  // namespace pier::tensor_models
