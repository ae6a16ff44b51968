#include "serving/tensor_front.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "engine/runner/local_model.h"
#include "tensor_models/batch_tensors.h"
#include "tensor_models/tensor_batcher.h"

namespace pier::serving {
namespace {

namespace image = tensor_models::image;
using Clock = std::chrono::steady_clock;

constexpr double kDecodeBounds[] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02,
                                    0.05,   0.1,   0.2,   0.5,   1,    2};

Buckets DecodeBuckets() {
  Buckets b;
  b.bounds.assign(std::begin(kDecodeBounds), std::end(kDecodeBounds));
  b.counts.assign(b.bounds.size() + 1, 0);
  return b;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

TensorFront::TensorFront(TensorRunner* inner, TensorFrontOptions options)
    : inner_(inner), options_(std::move(options)), info_(inner->info()) {
  MutexLock lock(mutex_);
  decode_seconds_ = DecodeBuckets();
}

Result<std::unique_ptr<TensorFront>> TensorFront::Create(TensorRunner* inner,
                                                         TensorFrontOptions options) {
  if (options.image.has_value() && options.governor == nullptr) {
    return InvalidArgumentError("model " + options.model +
                                ": an image input needs its device's governor");
  }
  std::unique_ptr<TensorFront> front(new TensorFront(inner, std::move(options)));
  TensorFrontOptions& o = front->options_;
  for (auto& [output, names] : o.labels) front->info_.labels[output] = names;
  if (o.image.has_value()) {
    const ImageInput& in = *o.image;
    TensorSpec& spec = front->info_.inputs.at(in.index);
    spec.name = in.name;
    spec.type = ElementType::kBytes;
    spec.shape = {in.batched ? -1 : 1};
    front->info_.max_element_bytes[in.name] =
        static_cast<int64_t>(std::min<uint64_t>(in.spec.limits.max_bytes, uint64_t{1} << 40));
    const std::string prefix =
        o.owner_prefix.empty() ? engine::UniqueOwnerPrefix(*o.governor, o.model) : o.owner_prefix;
    PIER_ASSIGN_OR_RETURN(front->owner_, o.governor->AddOwner({.name = prefix + "/images",
                                                               .priority = o.owner_priority}));
    for (int64_t i = 0; i < in.threads; ++i) {
      front->threads_.emplace_back([f = front.get()] { f->DecodeLoop(); });
    }
  }
  return front;
}

TensorFront::~TensorFront() {
  std::deque<Job> left;
  {
    MutexLock lock(mutex_);
    stopping_ = true;
    left.swap(queue_);
    queued_images_ = 0;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
  for (Job& job : left) {
    TensorResult result;
    result.status = UnavailableError("model " + options_.model + " is shutting down");
    job.done(std::move(result));
  }
  if (options_.image.has_value()) {
    if (Status removed = options_.governor->RemoveOwner(owner_); !removed.ok()) {
      spdlog::warn("image owner not removed: {}", removed.ToString());
    }
  }
}

Status TensorFront::Submit(TensorRequest request, std::function<void(TensorResult)> done) {
  if (!options_.image.has_value()) return inner_->Submit(std::move(request), std::move(done));
  // The request as clients send it, images included (their count, their BYTES framing).
  PIER_RETURN_IF_ERROR(CheckTensorRequest(options_.model, info_, request));
  const ImageInput& in = *options_.image;
  int64_t images = 0;
  for (const HostTensor& t : request.inputs) {
    if (t.name == in.name) images = std::max<int64_t>(0, ElementCount(t.shape));
  }
  {
    MutexLock lock(mutex_);
    if (stopping_) return UnavailableError("model " + options_.model + " is shutting down");
    if (queued_images_ + images > options_.max_queued_images && !queue_.empty()) {
      return ResourceExhaustedError("model " + options_.model + ": " +
                                    std::to_string(queued_images_) +
                                    " images are waiting to be decoded (the most is " +
                                    std::to_string(options_.max_queued_images) + ")");
    }
    queued_images_ += images;
    queue_.push_back(Job{std::move(request), std::move(done), images, Clock::now()});
  }
  wake_.notify_one();
  return Status::Ok();
}

void TensorFront::DecodeLoop() {
  for (;;) {
    Job job;
    {
      MutexLock lock(mutex_);
      lock.Wait(wake_, [this]() PIER_REQUIRES(mutex_) { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      queued_images_ -= job.images;
    }
    Run(std::move(job));
  }
}

void TensorFront::Run(Job job) {
  auto fail = [&job](Status status) {
    TensorResult result;
    result.status = std::move(status);
    job.done(std::move(result));
  };
  const TensorRequest& r = job.request;
  if (r.cancelled != nullptr && r.cancelled->load()) {
    fail(tensor_models::CancelledError(options_.model));
    return;
  }
  if (Clock::now() > r.deadline) {
    fail(ResourceExhaustedError("model " + options_.model +
                                ": the request waited past its deadline for its images to be "
                                "decoded"));
    return;
  }
  const Clock::time_point start = Clock::now();
  Result<ExternalCharge> charge = Decode(job.request);
  const double decode_seconds = SecondsSince(start);
  {
    MutexLock lock(mutex_);
    decode_seconds_.Observe(decode_seconds);
    if (charge.ok()) {
      images_ += job.images;
    } else if (charge.status().code() == StatusCode::kInvalidArgument) {
      ++images_refused_;
    }
  }
  if (!charge.ok()) {
    fail(charge.status());
    return;
  }
  // The tensor's charge is held until the run ends (the callback owns it).
  auto held = std::make_shared<ExternalCharge>(std::move(charge).value());
  auto done = std::make_shared<std::function<void(TensorResult)>>(std::move(job.done));
  Status submitted =
      inner_->Submit(std::move(job.request), [done, held, decode_seconds](TensorResult result) {
        held->Release();
        result.decode_seconds = decode_seconds;
        (*done)(std::move(result));
      });
  if (!submitted.ok()) {
    TensorResult result;
    result.status = std::move(submitted);
    (*done)(std::move(result));
  }
}

Result<ExternalCharge> TensorFront::Decode(TensorRequest& request) {
  const ImageInput& in = *options_.image;
  auto it = std::find_if(request.inputs.begin(), request.inputs.end(),
                         [&](const HostTensor& t) { return t.name == in.name; });
  if (it == request.inputs.end()) return InternalError("the image input went missing");
  PIER_ASSIGN_OR_RETURN(std::vector<std::string_view> encoded,
                        tensor_models::SplitBytesElements(it->bytes, ElementCount(it->shape)));
  const uint64_t per_image = image::PreprocessedBytes(in.spec);
  const uint64_t total = per_image * encoded.size();
  MemoryResult<ExternalCharge> charge = options_.governor->ChargeExternal(owner_, total);
  if (!charge.ok()) {
    return ResourceExhaustedError("model " + options_.model + ": no memory for " +
                                  std::to_string(encoded.size()) + " decoded images (" +
                                  charge.error().ToStatus().message() + ")");
  }
  HostTensor tensor;
  tensor.name = in.input;
  tensor.type = in.spec.type;
  if (in.batched) {
    tensor.shape.push_back(static_cast<int64_t>(encoded.size()));
  } else if (in.leading_one) {
    tensor.shape.push_back(1);
  }
  tensor.shape.insert(tensor.shape.end(), in.image_dims.begin(), in.image_dims.end());
  tensor.bytes.resize(total);
  for (size_t i = 0; i < encoded.size(); ++i) {
    // The decoder's buffers, charged while this image is decoded.
    std::vector<Block> blocks;
    image::BufferSource buffers = [&](size_t bytes) -> Result<std::span<uint8_t>> {
      MemoryResult<Block> block = options_.governor->Allocate(owner_, std::max<size_t>(bytes, 1));
      if (!block.ok()) {
        return ResourceExhaustedError("no memory to decode the image: " +
                                      block.error().ToStatus().message());
      }
      blocks.push_back(std::move(block).value());
      return std::span<uint8_t>(blocks.back().as<uint8_t>(), bytes);
    };
    std::span<uint8_t> out(reinterpret_cast<uint8_t*>(tensor.bytes.data()) + i * per_image,
                           per_image);
    Result<image::ImageGeometry> done = image::PreprocessImage(encoded[i], in.spec, buffers, out);
    if (!done.ok()) {
      const std::string which =
          encoded.size() > 1 ? " element " + std::to_string(i) : std::string();
      return Status(done.status().code(), "model " + options_.model + ": input '" + in.name + "'" +
                                              which + ": " + done.status().message());
    }
  }
  *it = std::move(tensor);
  return std::move(charge).value();
}

TensorRunnerStats TensorFront::Stats() const {
  TensorRunnerStats stats = inner_->Stats();
  MutexLock lock(mutex_);
  stats.queued_images = queued_images_;
  stats.images = images_;
  stats.images_refused = images_refused_;
  stats.decode_seconds = decode_seconds_;
  return stats;
}

}  // namespace pier::serving
