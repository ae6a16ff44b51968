// TensorFront: a tensor (ONNX) model as its clients see it, in front of the runner that
// computes it (a TensorHost in this process, a worker, or an instance pool), for the two
// things that belong to the front end rather than to the model's process (issue #45):
//
//   - an image input (`preprocess:`, image_input.h): the model's input is shown as a BYTES
//     input of encoded JPEG/PNG images (one per batch item); each request's images are
//     probed, refused by size before decoding, decoded, fitted and normalised on the front's
//     own decoding threads (`threads`, so the HTTP threads never decode), and the tensor goes
//     to the runner. Decoding buffers and the tensor until its run ends are charged to the
//     governor owner "<prefix>/images"; a request's images wait in a bounded queue
//     (RESOURCE_EXHAUSTED when full), and one dropped by its client (`cancelled`) or past its
//     deadline is not decoded.
//   - class labels (`labels:`, class_labels.h): set in info().labels, so a classification
//     answer names each class.
//
// Thread-safety: as TensorRunner. The inner runner must outlive the front.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "memory/memory_governor.h"
#include "serving/image_input.h"
#include "serving/tensor_runner.h"

namespace pier::serving {

struct TensorFrontOptions {
  std::string model;                                       // for messages
  std::optional<ImageInput> image;                         // unset: inputs pass through
  std::map<std::string, std::vector<std::string>> labels;  // per output name
  MemoryGovernor* governor = nullptr;                      // required with `image`
  std::string owner_prefix;  // "<id>" or "<id>#2": the owner is <prefix>/images
  int owner_priority = 0;
  int64_t max_queued_images = 256;  // waiting to be decoded, all requests together
};

class TensorFront final : public TensorRunner {
 public:
  // INVALID_ARGUMENT for an image input without a governor; the owner's registration errors.
  [[nodiscard]] static Result<std::unique_ptr<TensorFront>> Create(TensorRunner* inner,
                                                                   TensorFrontOptions options);
  // Stops the decoding threads; requests still waiting for them fail UNAVAILABLE.
  ~TensorFront() override;

  const TensorModelInfo& info() const override { return info_; }
  [[nodiscard]] Status Submit(TensorRequest request,
                              std::function<void(TensorResult)> done) override;
  TensorRunnerStats Stats() const override;
  std::optional<TensorRunnerMemory> Memory() const override { return inner_->Memory(); }

 private:
  struct Job {
    TensorRequest request;
    std::function<void(TensorResult)> done;
    int64_t images = 0;
    std::chrono::steady_clock::time_point submitted;
  };
  TensorFront(TensorRunner* inner, TensorFrontOptions options);
  void DecodeLoop();
  // Decodes `job`'s images into the model's tensor and hands the request to the runner.
  void Run(Job job);
  // The request with its images replaced by the model's tensor, charged to the owner, or
  // the failure (INVALID_ARGUMENT naming the image, RESOURCE_EXHAUSTED for memory).
  Result<ExternalCharge> Decode(TensorRequest& request);

  TensorRunner* inner_;
  TensorFrontOptions options_;
  TensorModelInfo info_;  // the inner runner's, as clients see it
  OwnerId owner_;
  std::vector<std::thread> threads_;

  mutable Mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> queue_ PIER_GUARDED_BY(mutex_);
  int64_t queued_images_ PIER_GUARDED_BY(mutex_) = 0;
  bool stopping_ PIER_GUARDED_BY(mutex_) = false;
  int64_t images_ PIER_GUARDED_BY(mutex_) = 0;          // decoded
  int64_t images_refused_ PIER_GUARDED_BY(mutex_) = 0;  // not images, too large, corrupt
  Buckets decode_seconds_ PIER_GUARDED_BY(mutex_);      // per request, all its images
};

}  // namespace pier::serving
