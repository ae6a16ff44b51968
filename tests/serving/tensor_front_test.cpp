#include "serving/tensor_front.h"

#include <gtest/gtest.h>
#include <png.h>
#include <zlib.h>

#include <atomic>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "device/cpu/cpu_device.h"
#include "tensor_models/batch_tensors.h"
#include "tensor_models/tensor_test_util.h"

namespace pier::serving {
namespace {

namespace image = tensor_models::image;

// A runner that records what reaches it and answers zeros; Submit can be held on a gate.
class RecordingRunner final : public TensorRunner {
 public:
  RecordingRunner() {
    info_.inputs = {{"x", ElementType::kFp32, {-1, 3, 4, 6}}};
    info_.outputs = {{"scores", ElementType::kFp32, {-1, 3}}};
    info_.max_batch_size = 4;
  }
  const TensorModelInfo& info() const override { return info_; }
  Status Submit(TensorRequest request, std::function<void(TensorResult)> done) override {
    if (hold) opened.wait();
    received.push_back(request.inputs.at(0));
    TensorResult result;
    const int64_t n = request.inputs.at(0).shape.at(0);
    result.outputs.push_back({"scores", ElementType::kFp32, {n, 3}, std::string(n * 12, '\0')});
    result.compute_seconds = 0.001;
    if (on_submit) on_submit();
    done(std::move(result));
    return Status::Ok();
  }
  TensorRunnerStats Stats() const override { return {}; }

  TensorModelInfo info_;
  std::vector<HostTensor> received;
  bool hold = false;
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::function<void()> on_submit;
};

// A `width` x `height` RGB PNG of one colour, through libpng's own writer.
std::string SolidPng(int width, int height, uint8_t r, uint8_t g, uint8_t b) {
  std::vector<uint8_t> pixels(static_cast<size_t>(width) * height * 3);
  for (size_t i = 0; i < pixels.size(); i += 3) {
    pixels[i] = r;
    pixels[i + 1] = g;
    pixels[i + 2] = b;
  }
  png_image png;
  std::memset(&png, 0, sizeof(png));
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(width);
  png.height = static_cast<png_uint_32>(height);
  png.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  EXPECT_TRUE(png_image_write_to_memory(&png, nullptr, &size, 0, pixels.data(), 0, nullptr));
  std::string out(size, '\0');
  EXPECT_TRUE(png_image_write_to_memory(&png, out.data(), &size, 0, pixels.data(), 0, nullptr));
  out.resize(size);
  return out;
}

// `png` claiming `width` x `height` in its IHDR (its CRC made right again): what a PNG bomb's
// header says.
std::string ClaimSize(std::string png, uint32_t width, uint32_t height) {
  auto put = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) png[at + i] = static_cast<char>(v >> (24 - 8 * i));
  };
  put(16, width);  // 8 signature + 4 length + 4 "IHDR"
  put(20, height);
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(png.data() + 12), 17);
  put(29, static_cast<uint32_t>(crc));
  return png;
}

HostTensor Images(const std::vector<std::string>& encoded) {
  HostTensor t;
  t.name = "image";
  t.type = ElementType::kBytes;
  t.shape = {static_cast<int64_t>(encoded.size())};
  for (const std::string& e : encoded) tensor_models::AppendBytesElement(t.bytes, e);
  return t;
}

class TensorFrontTest : public ::testing::Test {
 protected:
  void SetUp() override { Budget(uint64_t{1} << 30); }
  void Budget(uint64_t bytes) {
    governor_.reset();
    device_ = std::move(CpuDevice::Create()).value();
    GovernorOptions options;
    options.budget = BudgetSpec::Bytes(bytes);
    governor_ = std::move(MemoryGovernor::Create(device_.get(), options)).value();
  }
  std::unique_ptr<TensorFront> Front(int64_t max_queued = 256) {
    ImagePreprocessSettings settings;
    settings.name = "image";
    settings.mean = {0.5};
    settings.std = {0.5};
    TensorFrontOptions options;
    options.model = "vision";
    options.image = ResolveImageInput(settings, inner_.info(), "vision").value();
    options.labels = {{"scores", {"red", "green", "blue"}}};
    options.governor = governor_.get();
    options.owner_prefix = "vision";
    options.max_queued_images = max_queued;
    Result<std::unique_ptr<TensorFront>> front = TensorFront::Create(&inner_, options);
    EXPECT_TRUE(front.ok()) << front.status().ToString();
    return std::move(front).value();
  }
  TensorResult Infer(TensorFront& front, TensorRequest request) {
    return tensor_models::testing::SubmitAndWait(front, std::move(request));
  }
  OwnerStats ImagesOwner() const {
    for (const OwnerStats& o : governor_->Stats().owners) {
      if (o.name == "vision/images") return o;
    }
    ADD_FAILURE() << "no owner vision/images";
    return {};
  }

  std::unique_ptr<CpuDevice> device_;
  std::unique_ptr<MemoryGovernor> governor_;
  RecordingRunner inner_;
};

TEST_F(TensorFrontTest, ShowsTheImageInputAndTheLabelsToClients) {
  std::unique_ptr<TensorFront> front = Front();
  const TensorModelInfo& info = front->info();
  ASSERT_EQ(info.inputs.size(), 1u);
  EXPECT_EQ(info.inputs[0].name, "image");
  EXPECT_EQ(info.inputs[0].type, ElementType::kBytes);
  EXPECT_EQ(info.inputs[0].shape, std::vector<int64_t>{-1});
  EXPECT_EQ(info.max_element_bytes.at("image"), int64_t{32} << 20);
  EXPECT_EQ(info.labels.at("scores"), (std::vector<std::string>{"red", "green", "blue"}));
  ASSERT_EQ(info.outputs.size(), 1u);
  EXPECT_EQ(info.outputs[0].name, "scores");
}

TEST_F(TensorFrontTest, DecodesEachImageIntoTheModelsTensorChargedToTheModel) {
  std::unique_ptr<TensorFront> front = Front();
  // While the model runs, the tensor (2 images x 3 x 4 x 6 floats) is charged to its owner.
  uint64_t used_while_running = 0;
  inner_.on_submit = [&] { used_while_running = ImagesOwner().allocated_bytes; };
  TensorRequest request;
  // 255 -> (1 - 0.5) / 0.5 = 1; 0 -> -1; 51 -> (0.2 - 0.5) / 0.5 = -0.6.
  request.inputs = {Images({SolidPng(12, 8, 255, 0, 51), SolidPng(3, 2, 0, 255, 0)})};
  TensorResult result = Infer(*front, std::move(request));
  ASSERT_TRUE(result.status.ok()) << result.status.ToString();
  EXPECT_GT(result.decode_seconds, 0);
  ASSERT_EQ(inner_.received.size(), 1u);
  const HostTensor& x = inner_.received[0];
  EXPECT_EQ(x.name, "x");
  EXPECT_EQ(x.shape, (std::vector<int64_t>{2, 3, 4, 6}));
  ASSERT_EQ(x.bytes.size(), 2u * 3 * 4 * 6 * sizeof(float));
  std::vector<float> v(x.bytes.size() / sizeof(float));
  std::memcpy(v.data(), x.bytes.data(), x.bytes.size());
  const float expected[2][3] = {{1.0f, -1.0f, -0.6f}, {-1.0f, 1.0f, -1.0f}};
  for (int n = 0; n < 2; ++n) {
    for (int c = 0; c < 3; ++c) {
      for (int i = 0; i < 24; ++i) {
        ASSERT_NEAR(v[(n * 3 + c) * 24 + i], expected[n][c], 1e-6) << n << " " << c << " " << i;
      }
    }
  }
  EXPECT_GE(used_while_running, 2u * 3 * 4 * 6 * sizeof(float));
  // Everything is given back once the answer is out, and the decoder's buffers were charged.
  const OwnerStats after = ImagesOwner();
  EXPECT_EQ(after.allocated_bytes, 0u);
  EXPECT_GE(after.peak_allocated_bytes, used_while_running + 12u * 8 * 3);
  TensorRunnerStats stats = front->Stats();
  EXPECT_EQ(stats.images, 2);
  EXPECT_EQ(stats.images_refused, 0);
}

TEST_F(TensorFrontTest, RefusesBadImagesBeforeTheModelSeesThem) {
  std::unique_ptr<TensorFront> front = Front();
  const std::string good = SolidPng(6, 4, 1, 2, 3);
  struct Case {
    std::string bytes;
    const char* says;
  };
  const Case cases[] = {
      {"GIF89a....", "not a JPEG or PNG"},
      {good.substr(0, good.size() / 2), "input 'image'"},
      // 30,000 x 30,000 (and a bomb: a few hundred bytes that claim 900 million pixels) are
      // refused from the header: nothing is decoded, nothing allocated.
      {ClaimSize(good, 30000, 30000), "30000 x 30000"},
  };
  for (const Case& c : cases) {
    TensorRequest request;
    request.inputs = {Images({good, c.bytes})};
    TensorResult result = Infer(*front, std::move(request));
    ASSERT_FALSE(result.status.ok()) << c.says;
    EXPECT_EQ(result.status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(result.status.message().find(c.says), std::string::npos) << result.status.message();
    EXPECT_NE(result.status.message().find("element 1"), std::string::npos)
        << result.status.message();
  }
  EXPECT_TRUE(inner_.received.empty());
  EXPECT_EQ(front->Stats().images_refused, 3);
  EXPECT_EQ(ImagesOwner().allocated_bytes, 0u);
  // A tensor instead of image bytes is refused at once, naming what the input takes.
  TensorRequest tensor;
  tensor.inputs = {{"image", ElementType::kFp32, {1, 3, 4, 6}, std::string(288, '\0')}};
  Status refused = front->Submit(std::move(tensor), [](TensorResult) {});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("BYTES"), std::string::npos) << refused.message();
}

TEST_F(TensorFrontTest, RefusesForMemoryWhenTheBudgetCannotHoldTheImage) {
  Budget(uint64_t{64} << 10);  // 64 KiB: not a 200 x 200 image's 117 KiB of pixels
  std::unique_ptr<TensorFront> front = Front();
  TensorRequest request;
  request.inputs = {Images({SolidPng(200, 200, 9, 9, 9)})};
  TensorResult result = Infer(*front, std::move(request));
  ASSERT_FALSE(result.status.ok());
  EXPECT_EQ(result.status.code(), StatusCode::kResourceExhausted) << result.status.ToString();
  EXPECT_TRUE(inner_.received.empty());
}

TEST_F(TensorFrontTest, BoundsItsQueueAndSkipsRequestsNobodyWaitsFor) {
  inner_.hold = true;  // the decoding thread's first hand-off blocks
  std::unique_ptr<TensorFront> front = Front(/*max_queued=*/2);
  const std::string png = SolidPng(6, 4, 1, 2, 3);
  std::atomic<int> answered = 0;
  auto submit = [&](std::shared_ptr<std::atomic<bool>> cancelled) {
    TensorRequest request;
    request.inputs = {Images({png})};
    request.cancelled = std::move(cancelled);
    return front->Submit(std::move(request), [&](TensorResult) { ++answered; });
  };
  ASSERT_TRUE(submit(nullptr).ok());  // taken by the thread, held in the runner
  while (front->Stats().queued_images != 0) std::this_thread::yield();
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  ASSERT_TRUE(submit(cancelled).ok());
  ASSERT_TRUE(submit(nullptr).ok());
  Status full = submit(nullptr);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("2 images are waiting to be decoded"), std::string::npos)
      << full.message();
  cancelled->store(true);  // its client went away: it is never decoded
  inner_.gate.set_value();
  while (answered.load() < 3) std::this_thread::yield();
  EXPECT_EQ(inner_.received.size(), 2u);
  EXPECT_EQ(front->Stats().images, 2);
}

}  // namespace
}  // namespace pier::serving
