#include "tensor_models/onnx/onnx_session.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "device/cpu/cpu_device.h"
#include "tensor_models/onnx/ort_library.h"
#include "tensor_models/tensor_test_util.h"

namespace pier::tensor_models {
namespace {

using tensor_models::testing::Floats;
using tensor_models::testing::Fp32;
using tensor_models::testing::TinyOnnxModel;

class OnnxSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = std::move(CpuDevice::Create()).value();
    governor_ = std::move(MemoryGovernor::Create(device_.get())).value();
    owner_ = std::move(governor_->AddOwner({.name = "m/weights"})).value();
    run_owner_ = std::move(governor_->AddOwner({.name = "m/workspace"})).value();
  }

  Result<std::unique_ptr<OnnxSession>> Open(const std::string& path, int64_t max_batch = 8) {
    OnnxSessionOptions options;
    options.path = path;
    options.governor = governor_.get();
    options.owner = owner_;
    options.run_owner = run_owner_;
    options.max_batch_size = max_batch;
    return OnnxSession::Open(options);
  }

  uint64_t Charged(OwnerId owner) const {
    for (const auto& o : governor_->Stats().owners) {
      if (o.id == owner) return o.allocated_bytes;
    }
    return 0;
  }

  std::unique_ptr<CpuDevice> device_;
  std::unique_ptr<MemoryGovernor> governor_;
  OwnerId owner_;
  OwnerId run_owner_;
};

TEST_F(OnnxSessionTest, ReadsTheGraphsInputsAndOutputsAndRunsABatch) {
  auto session = Open(TinyOnnxModel("add_mul.onnx"));
  ASSERT_TRUE(session.ok()) << session.status().ToString() << " (run scripts/bootstrap)";
  const TensorModelInfo& info = (*session)->info();
  ASSERT_EQ(info.inputs.size(), 2u);
  EXPECT_EQ(info.inputs[0].name, "a");
  EXPECT_EQ(info.inputs[0].type, ElementType::kFp32);
  EXPECT_EQ(info.inputs[0].shape, (std::vector<int64_t>{-1, 4}));
  ASSERT_EQ(info.outputs.size(), 2u);
  EXPECT_EQ(info.outputs[0].name, "sum");
  EXPECT_EQ(info.outputs[1].name, "product");
  EXPECT_EQ(info.max_batch_size, 8);
  EXPECT_EQ(info.opset, 17);

  // Inputs in any order, by name.
  Result<std::vector<HostTensor>> out = (*session)->Run(
      {Fp32("b", {2, 4}, {1, 1, 1, 1, 2, 2, 2, 2}), Fp32("a", {2, 4}, {1, 2, 3, 4, 5, 6, 7, 8})});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0].name, "sum");
  EXPECT_EQ((*out)[0].shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(Floats((*out)[0]), (std::vector<float>{2, 3, 4, 5, 7, 8, 9, 10}));
  EXPECT_EQ(Floats((*out)[1]), (std::vector<float>{1, 2, 3, 4, 10, 12, 14, 16}));
  // The outputs were allocated through the governor (the workspace owner) and are back.
  EXPECT_GT((*session)->memory().allocations.load(), 0u);
  EXPECT_EQ(Charged(run_owner_), 0u);
}

TEST_F(OnnxSessionTest, MeasuresWhatMakingTheSessionTookBesideTheAllocator) {
  // A 284-byte file whose constant ONNX Runtime folds into 256 MiB while making the session:
  // ONNX Runtime 1.32 allocates initializers itself, not through the environment's allocator,
  // so the session measures the process's growth instead (the host charges it; see
  // serving/tensor_host.h).
  auto session = Open(TinyOnnxModel("big_constant.onnx"));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  EXPECT_GE((*session)->load_figures().resident_delta, uint64_t{256} << 20);
  EXPECT_EQ((*session)->load_figures().charged_bytes, Charged(owner_));
}

TEST_F(OnnxSessionTest, CarriesEveryElementTypeThroughTheGraph) {
  auto session = Open(TinyOnnxModel("types.onnx"));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  const TensorModelInfo& info = (*session)->info();
  std::vector<HostTensor> inputs;
  for (const TensorSpec& spec : info.inputs) {
    HostTensor t{spec.name, spec.type, {2, 3}, {}};
    if (spec.type == ElementType::kBytes) {
      for (int i = 0; i < 6; ++i) {
        std::string s = "s" + std::string(static_cast<size_t>(i), 'x');
        if (i == 0) s.clear();                       // an empty element
        if (i == 3) s = std::string("a\0b\xff", 4);  // any bytes, NUL included
        const uint32_t n = static_cast<uint32_t>(s.size());
        t.bytes.append(reinterpret_cast<const char*>(&n), 4);
        t.bytes += s;
      }
    } else {
      for (int64_t i = 0; i < 6 * ElementSize(spec.type); ++i) {
        t.bytes.push_back(static_cast<char>(spec.type == ElementType::kBool ? (i % 2) : i + 1));
      }
    }
    inputs.push_back(std::move(t));
  }
  auto out = (*session)->Run(inputs);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    // Identity: out_<type> equals in_<type>, byte for byte.
    const std::string suffix = info.outputs[i].name.substr(4);
    auto in = std::find_if(inputs.begin(), inputs.end(),
                           [&](const HostTensor& t) { return t.name == "in_" + suffix; });
    ASSERT_NE(in, inputs.end()) << info.outputs[i].name;
    EXPECT_EQ((*out)[i].type, in->type) << suffix;
    EXPECT_EQ((*out)[i].shape, in->shape) << suffix;
    EXPECT_EQ((*out)[i].bytes, in->bytes) << suffix;
  }
}

TEST_F(OnnxSessionTest, AGraphWithAFixedFirstDimensionIsServedUnbatched) {
  auto session = Open(TinyOnnxModel("fixed.onnx"));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  EXPECT_EQ((*session)->info().max_batch_size, 0);
  EXPECT_EQ((*session)->info().inputs[0].shape, (std::vector<int64_t>{2, 3}));
  auto out = (*session)->Run({Fp32("x", {2, 3}, {1, 2, 3, 4, 5, 6})});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(Floats((*out)[0]), (std::vector<float>{2, 4, 6, 8, 10, 12}));
  // max_batch_size 0 serves a batchable graph unbatched too.
  auto unbatched = Open(TinyOnnxModel("add_mul.onnx"), 0);
  ASSERT_TRUE(unbatched.ok());
  EXPECT_EQ((*unbatched)->info().max_batch_size, 0);
}

TEST_F(OnnxSessionTest, OpenDimensionsTakeAnySizeAndOverridesFixThem) {
  auto session = Open(TinyOnnxModel("spatial.onnx"));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  EXPECT_EQ((*session)->info().inputs[0].shape, (std::vector<int64_t>{-1, 1, -1, -1}));
  for (int64_t side : {2, 5}) {
    std::vector<float> x(static_cast<size_t>(side * side), 3.0f);
    auto out = (*session)->Run({Fp32("x", {1, 1, side, side}, x)});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(Floats((*out)[0]), std::vector<float>{3.0f});
    EXPECT_EQ((*out)[1].shape, (std::vector<int64_t>{1, 1, side, side}));
  }

  OnnxSessionOptions options;
  options.path = TinyOnnxModel("spatial.onnx");
  options.governor = governor_.get();
  options.owner = owner_;
  options.input_shapes["x"] = {-1, 1, 8, 8};
  auto fixed = OnnxSession::Open(options);
  ASSERT_TRUE(fixed.ok()) << fixed.status().ToString();
  EXPECT_EQ((*fixed)->info().inputs[0].shape, (std::vector<int64_t>{-1, 1, 8, 8}));
  options.input_shapes["x"] = {-1, 2, 8, 8};  // the model fixes dimension 1 at 1
  auto contradicts = OnnxSession::Open(options);
  ASSERT_FALSE(contradicts.ok());
  EXPECT_NE(contradicts.status().message().find("contradicts"), std::string::npos);
  options.input_shapes = {{"y", {1}}};
  EXPECT_NE(OnnxSession::Open(options).status().message().find("'y' is not an input"),
            std::string::npos);
}

TEST_F(OnnxSessionTest, RefusesBrokenGraphsWithTheirReason) {
  auto unknown = Open(TinyOnnxModel("unknown_op.onnx"));
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("NoSuchOp"), std::string::npos)
      << unknown.status().message();

  const std::string truncated = ::testing::TempDir() + "/truncated.onnx";
  {
    std::ifstream in(TinyOnnxModel("add_mul.onnx"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() - 7);
  }
  auto cut = Open(truncated);
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(cut.status().message().find("not an ONNX model"), std::string::npos);
  EXPECT_EQ(Open("/nonexistent/model.onnx").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Charged(owner_), 0u);
}

TEST_F(OnnxSessionTest, StopRunEndsALongRunSoon) {
  auto session = Open(TinyOnnxModel("slow.onnx"));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  std::vector<float> x(256, 0.01f);
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    (*session)->StopRun();
  });
  const auto start = std::chrono::steady_clock::now();
  auto out = (*session)->Run({Fp32("x", {1, 256}, x)});
  const auto took = std::chrono::steady_clock::now() - start;
  stopper.join();
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(out.status().message().find("stopped"), std::string::npos);
  // A full run takes about a second; stopped, it ends far sooner (generous for a busy machine).
  EXPECT_LT(took, std::chrono::milliseconds(900));
  // A later run is not affected by the earlier stop.
  (*session)->StopRun();  // none in progress: a no-op
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    (*session)->StopRun();
  });
  auto again = (*session)->Run({Fp32("x", {1, 256}, x)});
  late.join();
  EXPECT_FALSE(again.ok());
}

TEST(OrtLibraryTest, AMissingLibraryIsRefusedNamingThePathTried) {
  // Runs in its own process order-independently: another test may have loaded the library
  // already, and then a new path is refused naming the one loaded.
  Status set = SetOrtLibraryPath("/nonexistent/libonnxruntime.so.1");
  if (!set.ok()) {
    EXPECT_NE(set.message().find("already loaded"), std::string::npos) << set.message();
    return;
  }
  Result<OrtLibrary*> library = OrtLibrary::Get();
  ASSERT_FALSE(library.ok());
  EXPECT_EQ(library.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(library.status().message().find("/nonexistent/libonnxruntime.so.1"), std::string::npos);
  EXPECT_NE(library.status().message().find("--onnxruntime-library"), std::string::npos);
  ASSERT_TRUE(SetOrtLibraryPath("").ok());
  Result<OrtLibrary*> found = OrtLibrary::Get();
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ((*found)->version(), "1.32.0");
}

}  // namespace
}  // namespace pier::tensor_models
