// A TensorRunner for front-end tests (no ONNX Runtime): a model that adds its two FP32 inputs
// ("x" + "y" -> "sum", and "x" again as "x_copy"), or one that gives each input back as
// "<name>_out" (any types), or a classifier whose every item scores `row_scores` ("scores",
// FP32 [items, row_scores.size()], items the first dimension of its first input). Submit checks
// names, types and ranks as CheckTensorRequest does, with its messages' form; then answers at once
// on the caller's thread, or holds the request (hold = true) until Release, or refuses (refuse) or
// fails it (fail). Stats and Memory give back whatever the test sets in `stats` and `memory`.
//
// Thread-safety: Submit and Release from any thread (one mutex).
#pragma once

#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine_client.h"
#include "serving/tensor_runner.h"

namespace pier::testing {

// A tensor model's `client` in the registry: it refuses generation (tensor models do not
// generate); the routes under test never reach it otherwise.
class NoEngineClient final : public engine::EngineClient {
 public:
  Result<std::shared_ptr<engine::RequestHandle>> Submit(engine::Request) override {
    return UnavailableError("a tensor model does not generate");
  }
  void Abort(const std::string&) override {}
  void AbortAll(std::string) override {}
  engine::EngineStats Stats() const override { return {}; }
};

class FakeTensorRunner final : public serving::TensorRunner {
 public:
  enum class Kind { kAdd, kIdentity, kScores };

  FakeTensorRunner(Kind kind, serving::TensorModelInfo info) : kind_(kind), info_(std::move(info)) {
    stats.window_seconds = 0.002;
  }

  const serving::TensorModelInfo& info() const override { return info_; }

  Status Submit(serving::TensorRequest request,
                std::function<void(serving::TensorResult)> done) override {
    if (!refuse.ok()) return refuse;
    for (const HostTensor& input : request.inputs) {
      const TensorSpec* spec = Find(info_.inputs, input.name);
      if (spec == nullptr) return InvalidArgumentError("unknown input '" + input.name + "'");
      if (spec->type != input.type) {
        return InvalidArgumentError("model 'fake': input '" + input.name + "': expected " +
                                    std::string(ElementTypeName(spec->type)) + ", got " +
                                    std::string(ElementTypeName(input.type)));
      }
      if (spec->shape.size() != input.shape.size()) {
        return InvalidArgumentError("model 'fake': input '" + input.name + "': expected shape " +
                                    ShapeText(spec->shape) + ", got " + ShapeText(input.shape));
      }
    }
    for (const std::string& name : request.outputs) {
      if (Find(info_.outputs, name) == nullptr) {
        return InvalidArgumentError("model 'fake': unknown output '" + name + "'");
      }
    }
    serving::TensorResult result = Run(request);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      last = request;
      ++submitted;
      if (hold) {
        held_.push_back([done, result] { done(result); });
        return Status::Ok();
      }
    }
    done(std::move(result));
    return Status::Ok();
  }

  serving::TensorRunnerStats Stats() const override { return stats; }
  std::optional<serving::TensorRunnerMemory> Memory() const override { return memory; }

  // Answers every held request.
  void Release() {
    std::vector<std::function<void()>> held;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      held.swap(held_);
    }
    for (auto& answer : held) answer();
  }

  Status refuse = Status::Ok();  // Submit's answer instead of queueing
  Status fail = Status::Ok();    // the result's status instead of outputs
  bool hold = false;
  std::vector<float> row_scores;     // kScores: each item's row
  serving::TensorRunnerStats stats;  // set before the runner is shared
  std::optional<serving::TensorRunnerMemory> memory;
  serving::TensorRequest last;
  int submitted = 0;

 private:
  static const TensorSpec* Find(const std::vector<TensorSpec>& specs, const std::string& name) {
    for (const TensorSpec& spec : specs) {
      if (spec.name == name) return &spec;
    }
    return nullptr;
  }

  serving::TensorResult Run(const serving::TensorRequest& request) const {
    serving::TensorResult result;
    if (!fail.ok()) {
      result.status = fail;
      return result;
    }
    std::vector<HostTensor> all;
    if (kind_ == Kind::kAdd) {
      const HostTensor* x = &request.inputs[0];
      const HostTensor* y = request.inputs.size() > 1 ? &request.inputs[1] : x;
      if (x->name != "x") std::swap(x, y);
      HostTensor sum = *x;
      sum.name = "sum";
      for (size_t i = 0; i + 4 <= sum.bytes.size(); i += 4) {
        float a, b;
        std::memcpy(&a, x->bytes.data() + i, 4);
        std::memcpy(&b, y->bytes.data() + i, 4);
        a += b;
        std::memcpy(sum.bytes.data() + i, &a, 4);
      }
      HostTensor copy = *x;
      copy.name = "x_copy";
      all = {sum, copy};
    } else if (kind_ == Kind::kScores) {
      const int64_t items = request.inputs.at(0).shape.at(0);
      HostTensor scores{
          "scores", ElementType::kFp32, {items, static_cast<int64_t>(row_scores.size())}, ""};
      for (int64_t i = 0; i < items; ++i) {
        scores.bytes.append(reinterpret_cast<const char*>(row_scores.data()),
                            row_scores.size() * sizeof(float));
      }
      all = {scores};
    } else {
      for (const TensorSpec& spec : info_.inputs) {
        for (const HostTensor& input : request.inputs) {
          if (input.name != spec.name) continue;
          HostTensor out = input;
          out.name = input.name + "_out";
          all.push_back(out);
        }
      }
    }
    if (request.outputs.empty()) {
      result.outputs = all;
    } else {
      for (const std::string& name : request.outputs) {
        for (const HostTensor& t : all) {
          if (t.name == name) result.outputs.push_back(t);
        }
      }
    }
    result.batch_size = 1;
    result.queue_seconds = 0.0005;
    result.compute_seconds = 0.004;
    return result;
  }

  const Kind kind_;
  const serving::TensorModelInfo info_;
  mutable std::mutex mutex_;
  std::vector<std::function<void()>> held_;
};

}  // namespace pier::testing
