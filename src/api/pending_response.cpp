#include "api/pending_response.h"

#include <utility>

namespace pier::api {

void PendingResponse::Resolve(HttpResponse response) {
  std::function<void()> wake;
  {
    MutexLock lock(mutex_);
    if (answer_.has_value() || taken_) return;
    answer_ = std::move(response);
    wake = wake_;
  }
  if (wake) wake();
}

void PendingResponse::Start(std::function<void()> wake) {
  MutexLock lock(mutex_);
  wake_ = std::move(wake);
}

std::optional<HttpResponse> PendingResponse::Poll() {
  MutexLock lock(mutex_);
  if (!answer_.has_value()) return std::nullopt;
  taken_ = true;
  std::optional<HttpResponse> answer = std::move(answer_);
  answer_.reset();
  return answer;
}

void PendingResponse::Cancel(std::string_view) {
  MutexLock lock(mutex_);
  wake_ = nullptr;
}

ModelWait::ModelWait(serving::ModelRegistry* registry, serving::ModelEntry entry,
                     std::chrono::steady_clock::time_point deadline,
                     std::chrono::milliseconds limit, std::function<HttpResponse()> retry)
    : registry_(registry),
      entry_(std::move(entry)),
      deadline_(deadline),
      limit_(limit),
      retry_(std::move(retry)) {}

ModelWait::~ModelWait() { StopWatching(); }

void ModelWait::StopWatching() {
  uint64_t watch = 0;
  {
    MutexLock lock(mutex_);
    done_ = true;
    watch = watch_;
    watch_ = 0;
  }
  if (watch != 0) registry_->Unwatch(watch);
}

void ModelWait::Start(std::function<void()> wake) {
  const uint64_t watch = registry_->Watch(std::move(wake));
  {
    MutexLock lock(mutex_);
    if (!done_) {
      watch_ = watch;
    } else {
      registry_->Unwatch(watch);
      return;
    }
  }
  if (!registry_->RequestLoad(entry_.id)) StopWatching();
}

std::optional<HttpResponse> ModelWait::Poll() {
  auto unavailable = [this](const std::string& message) {
    StopWatching();
    HttpResponse response = ErrorResponse(503, message, "model", "model_unavailable");
    response.headers.emplace_back("Retry-After", "5");
    return response;
  };
  Result<serving::ModelEntry> now = registry_->Lookup(entry_.id);
  if (!now.ok()) return unavailable("model " + entry_.id + " was removed while it loaded");
  switch (now->state) {
    case serving::ModelState::kReady:
      StopWatching();
      return retry_();
    case serving::ModelState::kFailed:
      return unavailable("model " + entry_.id + " failed to load: " + now->reason);
    case serving::ModelState::kDraining:
      return unavailable("model " + entry_.id + " is being unloaded: " + now->reason);
    default:
      break;
  }
  if (now->load_failures > entry_.load_failures) {
    return unavailable("model " + entry_.id + " could not be loaded: " + now->reason);
  }
  if (std::chrono::steady_clock::now() >= deadline_) {
    const int64_t ms = limit_.count();
    return unavailable(
        "model " + entry_.id + " did not finish loading within " +
        (ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms"));
  }
  {
    MutexLock lock(mutex_);
    if (watch_ == 0) {
      // Nothing can load models here (no manager): say so rather than wait.
      return unavailable("model " + entry_.id + " is " +
                         std::string(serving::ModelStateName(now->state)));
    }
  }
  return std::nullopt;
}

void ModelWait::Cancel(std::string_view) { StopWatching(); }

HttpResponse ModelNotReady(serving::ModelRegistry* registry, const serving::ModelEntry& entry,
                           std::chrono::milliseconds load_wait,
                           std::function<HttpResponse()> retry) {
  using serving::ModelState;
  const bool loadable =
      entry.managed &&
      (entry.state == ModelState::kLoading ||
       (entry.state == ModelState::kUnloaded && entry.load == serving::LoadPolicy::kOnDemand));
  HttpResponse response;
  response.model = entry.id;
  if (loadable && load_wait.count() > 0) {
    response.deferred = std::make_shared<ModelWait>(
        registry, entry, std::chrono::steady_clock::now() + load_wait, load_wait, std::move(retry));
    return response;
  }
  std::string message = "model " + entry.id + " is " + std::string(ModelStateName(entry.state));
  if (!entry.reason.empty()) message += ": " + entry.reason;
  if (entry.state == ModelState::kUnloaded && entry.managed) {
    message += " (POST /admin/models/" + entry.id + "/load loads it)";
  }
  response = ErrorResponse(503, message, "model", "model_unavailable");
  response.model = entry.id;
  response.headers.emplace_back("Retry-After", "5");
  return response;
}

}  // namespace pier::api
