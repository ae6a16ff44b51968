// Image preprocessing against Pillow: tests/fixtures/image/ (tools/gen_image_fixtures.py) holds
// small JPEG and PNG files, what Pillow 13.0.0 decodes from them (after exif_transpose), its
// resizes with every filter, and whole preprocessing cases computed with Pillow and numpy.
//
// Measured here (Debian's libjpeg-turbo 2.1.5 and libpng 1.6.39 against Pillow 13.0.0's
// bundled libjpeg-turbo 3.2.0 and its own PNG reader), max absolute pixel error:
//   PNG (RGB, palette, grey, 1-bit grey, grey+alpha, RGBA, 16-bit RGB, interlaced, eXIf): 0
//   JPEG (4:2:0, 4:4:4, progressive, grey, EXIF orientations 1..9, big-endian EXIF): 0
//   resize, every filter (nearest, box, bilinear, hamming, bicubic, lanczos), down, up,
//   one dimension only: 0 (bit for bit)
//   whole preprocessing: FP32 bit-identical to numpy's float32 (checked within 1e-6
//   relative), FP16 and UINT8 identical.
// The JPEG tolerance below is what was measured (0); a different libjpeg-turbo may move a
// level or two, and the printed figure says by how much.
#include "tensor_models/image/image_preprocess.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tensor/float16.h"

namespace pier::tensor_models::image {
namespace {

constexpr int kJpegTolerance = 0;  // measured: 0 on Debian 12's libjpeg-turbo 2.1.5

std::string FixturePath(const std::string& name) {
  return std::string(PIER_SOURCE_DIR) + "/tests/fixtures/image/" + name;
}

std::string ReadFixture(const std::string& name) {
  std::ifstream file(FixturePath(name), std::ios::binary);
  EXPECT_TRUE(file.good()) << FixturePath(name);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

const nlohmann::json& Index() {
  static const nlohmann::json index = nlohmann::json::parse(ReadFixture("index.json"));
  return index;
}

// A BufferSource over exact-size heap blocks (ASan sees a read past any of them), recording
// each request; it refuses from request number `refuse_from` on (0: never).
class TestBuffers {
 public:
  explicit TestBuffers(size_t refuse_from = 0) : refuse_from_(refuse_from) {}

  BufferSource Source() {
    return [this](size_t bytes) -> Result<std::span<uint8_t>> {
      requests_.push_back(bytes);
      if (refuse_from_ != 0 && requests_.size() >= refuse_from_) {
        return ResourceExhaustedError("test budget: " + std::to_string(bytes) + " bytes refused");
      }
      blocks_.emplace_back(new uint8_t[bytes == 0 ? 1 : bytes]);
      std::memset(blocks_.back().get(), 0xA5, bytes);  // not zeros: unwritten pixels show
      return std::span<uint8_t>(blocks_.back().get(), bytes);
    };
  }
  const std::vector<size_t>& requests() const { return requests_; }

 private:
  size_t refuse_from_;
  std::vector<size_t> requests_;
  std::deque<std::unique_ptr<uint8_t[]>> blocks_;
};

struct Image {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> pixels;  // [height, width, 3]
  RgbView View() { return RgbView{width, height, pixels}; }
};

Image NewImage(int64_t width, int64_t height) {
  return Image{width, height, std::vector<uint8_t>(width * height * 3, 0xA5)};
}

// The file decoded and oriented as PreprocessImage does; the status when it fails.
Result<Image> DecodeAndOrient(const std::string& encoded) {
  PIER_ASSIGN_OR_RETURN(ImageHeader header, ProbeImage(encoded));
  Image stored = NewImage(header.width, header.height);
  PIER_RETURN_IF_ERROR(DecodeImage(encoded, header, stored.View()));
  int64_t width = 0;
  int64_t height = 0;
  OrientedSize(header.orientation, header.width, header.height, &width, &height);
  Image oriented = NewImage(width, height);
  OrientImage(stored.View(), header.orientation, oriented.View());
  return oriented;
}

int MaxAbsDifference(const std::vector<uint8_t>& a, const std::string& b) {
  EXPECT_EQ(a.size(), b.size());
  int worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    worst = std::max(worst, std::abs(int{a[i]} - int{static_cast<uint8_t>(b[i])}));
  }
  return worst;
}

Interpolation InterpolationNamed(const std::string& name) {
  if (name == "nearest") return Interpolation::kNearest;
  if (name == "box") return Interpolation::kBox;
  if (name == "bilinear") return Interpolation::kBilinear;
  if (name == "hamming") return Interpolation::kHamming;
  if (name == "bicubic") return Interpolation::kBicubic;
  EXPECT_EQ(name, "lanczos");
  return Interpolation::kLanczos;
}

PreprocessSpec SpecOf(const nlohmann::json& j) {
  PreprocessSpec spec;
  spec.height = j.at("height");
  spec.width = j.at("width");
  const std::string resize = j.at("resize");
  spec.resize = resize == "stretch" ? ResizeMode::kStretch
                : resize == "crop"  ? ResizeMode::kCrop
                                    : ResizeMode::kLetterbox;
  spec.shorter_side = j.at("shorter_side");
  spec.interpolation = InterpolationNamed(j.at("interpolation"));
  spec.pad_value = j.at("pad_value");
  spec.scale = static_cast<float>(j.at("scale").get<double>());
  for (int c = 0; c < 3; ++c) {
    spec.mean[c] = static_cast<float>(j.at("mean")[c].get<double>());
    spec.std[c] = static_cast<float>(j.at("std")[c].get<double>());
  }
  spec.layout = j.at("layout") == "nchw" ? TensorLayout::kNchw : TensorLayout::kNhwc;
  spec.channels = j.at("channels") == "rgb" ? ChannelOrder::kRgb : ChannelOrder::kBgr;
  const std::string type = j.at("type");
  spec.type = type == "FP32"   ? ElementType::kFp32
              : type == "FP16" ? ElementType::kFp16
                               : ElementType::kUint8;
  spec.apply_exif = j.at("apply_exif");
  return spec;
}

TEST(ImageDecodeTest, MatchesPillowAfterExifTranspose) {
  ASSERT_FALSE(Index()["decode"].empty());
  int worst_png = 0;
  int worst_jpeg = 0;
  for (const auto& c : Index()["decode"]) {
    const std::string file = c["file"];
    SCOPED_TRACE(file);
    const std::string encoded = ReadFixture(file);
    Result<ImageHeader> header = ProbeImage(encoded);
    ASSERT_TRUE(header.ok()) << header.status().ToString();
    EXPECT_EQ(header->format, c["format"] == "png" ? ImageFormat::kPng : ImageFormat::kJpeg);
    EXPECT_EQ(header->width, c["stored_width"].get<int64_t>());
    EXPECT_EQ(header->height, c["stored_height"].get<int64_t>());
    EXPECT_EQ(header->orientation, c["orientation"].get<int>());
    Result<Image> image = DecodeAndOrient(encoded);
    ASSERT_TRUE(image.ok()) << image.status().ToString();
    EXPECT_EQ(image->width, c["width"].get<int64_t>());
    EXPECT_EQ(image->height, c["height"].get<int64_t>());
    const int error = MaxAbsDifference(image->pixels, ReadFixture(c["expected"]));
    std::printf("decode %-30s max pixel error %d\n", file.c_str(), error);
    (c["format"] == "png" ? worst_png : worst_jpeg) =
        std::max(c["format"] == "png" ? worst_png : worst_jpeg, error);
  }
  std::printf("decode: max pixel error PNG %d, JPEG %d\n", worst_png, worst_jpeg);
  EXPECT_EQ(worst_png, 0);
  EXPECT_LE(worst_jpeg, kJpegTolerance);
}

TEST(ImageOrientTest, OrientationsFiveToEightSwapTheSides) {
  for (int orientation = 0; orientation <= 9; ++orientation) {
    int64_t width = 0;
    int64_t height = 0;
    OrientedSize(orientation, 37, 23, &width, &height);
    const bool swaps = orientation >= 5 && orientation <= 8;
    EXPECT_EQ(width, swaps ? 23 : 37) << orientation;
    EXPECT_EQ(height, swaps ? 37 : 23) << orientation;
  }
  // A 2 x 1 image [a b] turned each way (Pillow's exif_transpose).
  Image in{2, 1, {1, 1, 1, 2, 2, 2}};
  const std::vector<std::vector<uint8_t>> firsts = {{},     {1, 2}, {2, 1}, {2, 1}, {1, 2},
                                                    {1, 2}, {1, 2}, {2, 1}, {2, 1}};
  for (int orientation = 1; orientation <= 8; ++orientation) {
    int64_t width = 0;
    int64_t height = 0;
    OrientedSize(orientation, 2, 1, &width, &height);
    Image out = NewImage(width, height);
    OrientImage(in.View(), orientation, out.View());
    EXPECT_EQ(out.pixels[0], firsts[orientation][0]) << orientation;
    EXPECT_EQ(out.pixels[3], firsts[orientation][1]) << orientation;
  }
}

TEST(ImageResizeTest, MatchesPillowBitForBit) {
  ASSERT_FALSE(Index()["resize"].empty());
  int worst = 0;
  for (const auto& c : Index()["resize"]) {
    const std::string expected = c["expected"];
    SCOPED_TRACE(expected);
    const std::string source = ReadFixture(c["source"]);
    Image in{c["source_width"], c["source_height"],
             std::vector<uint8_t>(source.begin(), source.end())};
    Image out = NewImage(c["width"], c["height"]);
    TestBuffers buffers;
    ASSERT_TRUE(
        ResizeImage(in.View(), InterpolationNamed(c["filter"]), buffers.Source(), out.View()).ok());
    const int error = MaxAbsDifference(out.pixels, ReadFixture(expected));
    if (error != 0) std::printf("resize %s max pixel error %d\n", expected.c_str(), error);
    worst = std::max(worst, error);
  }
  std::printf("resize: %zu cases, max pixel error %d\n", Index()["resize"].size(), worst);
  EXPECT_EQ(worst, 0);
}

TEST(ImagePreprocessTest, MatchesPillowAndNumpy) {
  ASSERT_FALSE(Index()["preprocess"].empty());
  for (const auto& c : Index()["preprocess"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const PreprocessSpec spec = SpecOf(c["spec"]);
    std::vector<uint8_t> out(PreprocessedBytes(spec));
    TestBuffers buffers;
    Result<ImageGeometry> geometry =
        PreprocessImage(ReadFixture(c["file"]), spec, buffers.Source(), out);
    ASSERT_TRUE(geometry.ok()) << geometry.status().ToString();
    const std::string expected = ReadFixture(c["expected"]);
    ASSERT_EQ(out.size(), expected.size());
    double worst = 0;
    int worst_pixel = 0;
    for (size_t i = 0; i < out.size() / ElementSize(spec.type); ++i) {
      if (spec.type == ElementType::kFp32) {
        float a;
        float b;
        std::memcpy(&a, out.data() + i * 4, 4);
        std::memcpy(&b, expected.data() + i * 4, 4);
        worst = std::max(worst, std::fabs(double{a} - b) / std::max(1.0, std::fabs(double{b})));
      } else if (spec.type == ElementType::kFp16) {
        uint16_t a;
        uint16_t b;
        std::memcpy(&a, out.data() + i * 2, 2);
        std::memcpy(&b, expected.data() + i * 2, 2);
        worst = std::max(worst, std::fabs(double{Fp16ToFp32(a)} - Fp16ToFp32(b)));
      } else {
        worst_pixel = std::max(worst_pixel, std::abs(int{out[i]} - int{uint8_t(expected[i])}));
      }
    }
    std::printf("preprocess %-34s max error %g (relative, float) %d (uint8)\n", name.c_str(), worst,
                worst_pixel);
    EXPECT_LE(worst, 1e-6);
    EXPECT_EQ(worst_pixel, 0);
    const auto& g = c["geometry"];
    EXPECT_EQ(geometry->source_width, g[0].get<int64_t>());
    EXPECT_EQ(geometry->source_height, g[1].get<int64_t>());
    EXPECT_DOUBLE_EQ(geometry->scale_x, g[2].get<double>());
    EXPECT_DOUBLE_EQ(geometry->scale_y, g[3].get<double>());
    EXPECT_DOUBLE_EQ(geometry->offset_x, g[4].get<double>());
    EXPECT_DOUBLE_EQ(geometry->offset_y, g[5].get<double>());
  }
}

PreprocessSpec SmallSpec() {
  PreprocessSpec spec;
  spec.height = 8;
  spec.width = 8;
  return spec;
}

TEST(ImageBadInputTest, NotAnImageIsRefusedNamingItsFirstBytes) {
  Result<ImageHeader> header = ProbeImage(ReadFixture(Index()["bad"]["not_an_image"]));
  ASSERT_FALSE(header.ok());
  EXPECT_EQ(header.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(header.status().message(),
            "not a JPEG or PNG image (starts with 47 49 46 38 39 61 3f 20)");
  EXPECT_EQ(ProbeImage("").status().message(), "not a JPEG or PNG image (starts with nothing)");
  // A signature with the header cut short.
  const std::string png = ReadFixture("rgb.png");
  EXPECT_EQ(ProbeImage(png.substr(0, 20)).status().message(),
            "corrupt PNG image: the header is cut short");
  const std::string jpeg = ReadFixture("rgb_420.jpg");
  EXPECT_EQ(ProbeImage(jpeg.substr(0, 40)).status().message(),
            "corrupt JPEG image: the header is cut short");
}

TEST(ImageBadInputTest, TruncatedJpegIsAnErrorNotGreyRows) {
  const std::string truncated = ReadFixture(Index()["bad"]["truncated_jpeg"]);
  Result<ImageHeader> header = ProbeImage(truncated);
  ASSERT_TRUE(header.ok()) << header.status().ToString();  // the header is whole
  Image image = NewImage(header->width, header->height);
  const Status decoded = DecodeImage(truncated, *header, image.View());
  EXPECT_EQ(decoded.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(decoded.message(), "corrupt JPEG image: Premature end of JPEG file");
  TestBuffers buffers;
  std::vector<uint8_t> out(PreprocessedBytes(SmallSpec()));
  EXPECT_EQ(PreprocessImage(truncated, SmallSpec(), buffers.Source(), out).status().message(),
            decoded.message());
  // Every cut of a PNG is an error too.
  const std::string png = ReadFixture("rgb.png");
  Result<ImageHeader> png_header = ProbeImage(png);
  ASSERT_TRUE(png_header.ok());
  for (size_t size = 40; size < png.size() - 12; size += 97) {
    Image png_image = NewImage(png_header->width, png_header->height);
    EXPECT_FALSE(DecodeImage(png.substr(0, size), *png_header, png_image.View()).ok()) << size;
  }
}

TEST(ImageBadInputTest, HugePngIsRefusedBeforeAnyBufferIsAsked) {
  const std::string huge = ReadFixture(Index()["bad"]["huge_ihdr"]);
  Result<ImageHeader> header = ProbeImage(huge);
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  EXPECT_EQ(header->width, 30000);
  EXPECT_EQ(header->height, 30000);
  const Status limits = CheckImageLimits(*header, huge.size(), ImageLimits{});
  EXPECT_EQ(limits.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(limits.message(),
            "image is 30000 x 30000 pixels; the limit is 16384 x 16384 and 40000000 pixels");
  TestBuffers buffers;
  std::vector<uint8_t> out(PreprocessedBytes(SmallSpec()));
  EXPECT_EQ(PreprocessImage(huge, SmallSpec(), buffers.Source(), out).status().message(),
            limits.message());
  EXPECT_TRUE(buffers.requests().empty());  // DecodeImage was never reached
}

TEST(ImageBadInputTest, PngBombIsRefusedByItsPixels) {
  const std::string bomb = ReadFixture(Index()["bad"]["bomb"]);
  EXPECT_LT(bomb.size(), 32u << 10);
  Result<ImageHeader> header = ProbeImage(bomb);
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  EXPECT_EQ(header->width * header->height, 144'000'000);
  TestBuffers buffers;
  std::vector<uint8_t> out(PreprocessedBytes(SmallSpec()));
  const Status status = PreprocessImage(bomb, SmallSpec(), buffers.Source(), out).status();
  EXPECT_EQ(status.message(),
            "image is 12000 x 12000 pixels; the limit is 16384 x 16384 and 40000000 pixels");
  EXPECT_TRUE(buffers.requests().empty());
}

TEST(ImageBadInputTest, EncodedBytesOverTheLimitAreRefused) {
  PreprocessSpec spec = SmallSpec();
  spec.limits.max_bytes = 100;
  const std::string png = ReadFixture("rgb.png");
  TestBuffers buffers;
  std::vector<uint8_t> out(PreprocessedBytes(spec));
  EXPECT_EQ(PreprocessImage(png, spec, buffers.Source(), out).status().message(),
            "image is " + std::to_string(png.size()) + " bytes; the limit is 100");
  EXPECT_TRUE(buffers.requests().empty());
}

TEST(ImageBadInputTest, ABufferSourcesRefusalIsPassedOn) {
  PreprocessSpec spec = SmallSpec();
  spec.resize = ResizeMode::kCrop;
  spec.shorter_side = 10;
  const std::string jpeg = ReadFixture("orientation_6.jpg");
  // Decoded, oriented, fitted, the resize's intermediate: refusing each in turn.
  for (size_t refuse_from = 1; refuse_from <= 4; ++refuse_from) {
    TestBuffers buffers(refuse_from);
    std::vector<uint8_t> out(PreprocessedBytes(spec));
    const Status status = PreprocessImage(jpeg, spec, buffers.Source(), out).status();
    EXPECT_EQ(status.code(), StatusCode::kResourceExhausted) << refuse_from;
    EXPECT_EQ(status.message().rfind("test budget: ", 0), 0u) << status.message();
    EXPECT_EQ(buffers.requests().size(), refuse_from);
  }
  TestBuffers buffers;
  std::vector<uint8_t> out(PreprocessedBytes(spec));
  ASSERT_TRUE(PreprocessImage(jpeg, spec, buffers.Source(), out).ok());
  // 37 x 23 stored, turned to 23 x 37, resized to 10 x 16 and cropped to 8 x 8 at (1, 4): the
  // intermediate holds the 8 kept columns over source rows 8..28, the ones output rows 4..11
  // read (bilinear's support is 2.3125 rows at this scale), not all 37.
  EXPECT_EQ(buffers.requests(),
            (std::vector<size_t>{37 * 23 * 3, 37 * 23 * 3, 8 * 8 * 3, 8 * 21 * 3}));
}

TEST(ImageBadInputTest, ImpossibleSpecsAreRefused) {
  PreprocessSpec spec = SmallSpec();
  spec.resize = ResizeMode::kCrop;
  spec.shorter_side = 7;
  TestBuffers buffers;
  std::vector<uint8_t> out(PreprocessedBytes(spec));
  EXPECT_EQ(PreprocessImage(ReadFixture("rgb.png"), spec, buffers.Source(), out).status().message(),
            "preprocess: shorter_side 7 is less than the crop's 8 x 8");
  spec = SmallSpec();
  spec.type = ElementType::kInt64;
  out.resize(PreprocessedBytes(spec));
  EXPECT_EQ(PreprocessImage(ReadFixture("rgb.png"), spec, buffers.Source(), out).status().message(),
            "preprocess: the tensor's type must be FP32, FP16 or UINT8, not INT64");
}

TEST(ImageBadInputTest, AFileThatDisagreesWithItsProbeIsRefused) {
  const std::string png = ReadFixture("rgb.png");
  // One column more than the file: libpng's limits are the probe's, so a file larger than its
  // probe stops in libpng's IHDR check instead.
  ImageHeader header{ImageFormat::kPng, 38, 23, 1};
  Image image = NewImage(38, 23);
  EXPECT_EQ(DecodeImage(png, header, image.View()).message(),
            "corrupt PNG image: its header disagrees with the probe");
  header.format = ImageFormat::kJpeg;
  EXPECT_EQ(DecodeImage(ReadFixture("rgb_444.jpg"), header, image.View()).message(),
            "corrupt JPEG image: its frame header disagrees with the probe");
}

// Damaged copies of every fixture (a few bytes changed, or cut): refused or decoded, never a
// crash or a read out of bounds (this test runs under ASan/UBSan with the unit tests).
TEST(ImageBadInputTest, DamagedFilesNeverCrash) {
  std::mt19937 random(45);
  int refused = 0;
  int runs = 0;
  for (const auto& c : Index()["decode"]) {
    const std::string original = ReadFixture(c["file"]);
    for (int i = 0; i < 40; ++i) {
      std::string damaged = original;
      const int changes = 1 + static_cast<int>(random() % 4);
      for (int k = 0; k < changes; ++k) {
        damaged[random() % damaged.size()] = static_cast<char>(random());
      }
      if (i % 5 == 0) damaged.resize(random() % damaged.size());
      PreprocessSpec spec = SmallSpec();
      spec.limits.max_pixels = 1 << 20;
      spec.limits.max_width = 4096;
      spec.limits.max_height = 4096;
      TestBuffers buffers;
      std::vector<uint8_t> out(PreprocessedBytes(spec));
      const Status status = PreprocessImage(damaged, spec, buffers.Source(), out).status();
      if (!status.ok()) {
        EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
        ++refused;
      }
      ++runs;
    }
  }
  std::printf("damaged files: %d runs, %d refused\n", runs, refused);
}

}  // namespace
}  // namespace pier::tensor_models::image
