#include "serving/worker_client.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "engine/core/kv_ceiling.h"
#include "engine/runner/local_model.h"
#include "ipc/convert.h"
#include "ipc/tensor_convert.h"
#include "memory/byte_size.h"
#include "memory/lease.h"
#include "serving/worker_kv_mirror.h"
#include "serving/worker_spec.h"

extern char** environ;

namespace pier::serving {
namespace {

using ipc::proto::Frame;
using Clock = std::chrono::steady_clock;

}  // namespace

WorkerClient::WorkerClient(WorkerOptions options)
    : options_(std::move(options)),
      name_("model " + options_.load.id + " instance " + std::to_string(options_.instance)) {}

Result<std::unique_ptr<WorkerClient>> WorkerClient::Start(WorkerOptions options) {
  if (options.device_governor == nullptr) {
    return InvalidArgumentError("a worker needs its device's governor");
  }
  std::unique_ptr<WorkerClient> client(new WorkerClient(std::move(options)));
  const WorkerOptions& o = client->options_;
  // "<id>/worker", "<id>#2/worker", ... as in-process instances' owners: the first name free,
  // so a reload's new version starts beside the old one, whose owners stay until it drains.
  client->owner_name_ = engine::UniqueOwnerPrefix(*o.device_governor, o.load.id) + "/worker";
  PIER_ASSIGN_OR_RETURN(client->owner_, o.device_governor->AddOwner({.name = client->owner_name_,
                                                                     .priority = o.load.priority}));
  // Other models' KV lent beyond their minimum (their workers' mirror leases) comes back
  // first; when it cannot, the charge below says why.
  (void)o.device_governor->MakeRoom(client->owner_, o.budget_bytes + o.device_overhead_bytes,
                                    std::chrono::seconds(5));
  MemoryResult<ExternalCharge> grant =
      o.device_governor->ChargeExternal(client->owner_, o.budget_bytes);
  if (!grant.ok()) {
    (void)o.device_governor->RemoveOwner(client->owner_);
    return ResourceExhaustedError(client->name_ + " does not fit: " + grant.status().message());
  }
  client->grant_ = std::move(grant).value();
  if (o.device_overhead_bytes > 0) {
    MemoryResult<ExternalCharge> overhead =
        o.device_governor->ChargeExternal(client->owner_, o.device_overhead_bytes);
    if (!overhead.ok()) {
      client->grant_.reset();
      (void)o.device_governor->RemoveOwner(client->owner_);
      return ResourceExhaustedError(client->name_ + " does not fit with its process's " +
                                    FormatBytes(o.device_overhead_bytes) +
                                    " on the device: " + overhead.status().message());
    }
    client->overhead_ = std::move(overhead).value();
  }
  // Errors its GPU reported before this instance existed are not its own.
  if (o.device_health != nullptr && !o.binding.gpu.empty()) {
    MutexLock lock(client->mutex_);
    client->gpu_errors_seen_ = o.device_health->ErrorsOn(o.binding.gpu);
  }
  if (Status launched = client->Launch(); !launched.ok()) {
    client->grant_.reset();
    client->overhead_.reset();
    (void)o.device_governor->RemoveOwner(client->owner_);
    return launched;
  }
  {
    MutexLock lock(client->mutex_);
    client->state_ = State::kReady;
  }
  WorkerClient* self = client.get();
  client->supervisor_ = std::thread([self] { self->Supervise(/*launch_first=*/false); });
  client->watchdog_ = std::thread([self] { self->Watch(); });
  return client;
}

WorkerClient::~WorkerClient() {
  std::shared_ptr<ipc::Channel> channel;
  std::shared_ptr<ipc::Channel> launching;
  int64_t pid = 0;
  {
    MutexLock lock(mutex_);
    state_ = State::kStopping;
    pid = pid_;
    channel = channel_;
    launching = launching_;
  }
  changed_.notify_all();
  if (channel != nullptr) {
    Frame shutdown;
    shutdown.mutable_shutdown();
    (void)channel->Send(shutdown);
  }
  // Give it a moment to exit by itself; its requests end with the process.
  bool reaped = false;
  for (int i = 0; i < 200 && pid > 0 && !reaped; ++i) {
    int status = 0;
    const pid_t r = ::waitpid(static_cast<pid_t>(pid), &status, WNOHANG);
    reaped = r == pid || (r < 0 && errno == ECHILD);
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (pid > 0 && !reaped) ::kill(static_cast<pid_t>(pid), SIGKILL);
  if (channel != nullptr) channel->Shutdown();
  if (launching != nullptr) launching->Shutdown();  // a restart's handshake gives up
  if (supervisor_.joinable()) supervisor_.join();
  if (watchdog_.joinable()) watchdog_.join();
  if (replayer_.joinable()) replayer_.join();
  MutexLock lock(mutex_);
  // A worker launched while this was stopping, or one not reaped above.
  if (pid_ > 0 && (pid_ != pid || !reaped)) {
    ::kill(static_cast<pid_t>(pid_), SIGKILL);
    int status = 0;
    ::waitpid(static_cast<pid_t>(pid_), &status, 0);
  }
  pid_ = 0;
  for (auto& [id, live] : live_) EndChoices(live, engine::FinishReason::kAbort, name_ + " stopped");
  live_.clear();
  lock.Unlock();
  FailAllTensors(UnavailableError(name_ + " stopped"));
  lock.Lock();
  channel_.reset();
  DropKvMirror();
  grant_.reset();
  overhead_.reset();
  if (options_.device_governor != nullptr) (void)options_.device_governor->RemoveOwner(owner_);
}

void WorkerClient::Supervise(bool launch_first) {
  bool launch = launch_first;
  while (true) {
    if (launch && !Relaunch()) return;
    launch = true;
    const std::string how = ReadFrames();
    {
      MutexLock lock(mutex_);
      if (state_ == State::kStopping) return;
    }
    OnWorkerEnded(how);
  }
}

bool WorkerClient::Relaunch() {
  // Restart with backoff, or quarantine (and wait there for Revive).
  auto backoff = options_.restart_backoff;
  while (true) {
    {
      MutexLock lock(mutex_);
      if (state_ == State::kStopping) return false;
      const auto now = Clock::now();
      const bool planned = std::exchange(planned_restart_, false);
      if (!planned) failures_.push_back(now);
      std::erase_if(failures_, [&](auto t) { return now - t > options_.failure_window; });
      if (!planned && static_cast<int>(failures_.size()) >= options_.max_failures) {
        state_ = State::kFailed;
        spdlog::error("{} quarantined after {} failures within {} s: {}", name_, failures_.size(),
                      options_.failure_window.count() / 1000, last_failure_);
        for (auto& [id, live] : live_) {
          EndChoices(live, engine::FinishReason::kError,
                     name_ + " failed " + std::to_string(failures_.size()) +
                         " times and is quarantined: " + last_failure_);
        }
        live_.clear();
        changed_.notify_all();
        const Status quarantined =
            UnavailableError(name_ + " failed " + std::to_string(failures_.size()) +
                             " times and is quarantined: " + last_failure_);
        lock.Unlock();
        FailAllTensors(quarantined);
        lock.Lock();
        if (state_ != State::kFailed) continue;  // revived or stopping meanwhile
        lock.Wait(changed_, [this]() PIER_REQUIRES(mutex_) { return state_ != State::kFailed; });
        if (state_ == State::kStopping) return false;
        backoff = options_.restart_backoff;  // revived: failures_ was cleared
        continue;
      }
      state_ = State::kRestarting;
      if (!planned && lock.WaitFor(changed_, backoff, [this]() PIER_REQUIRES(mutex_) {
            return state_ == State::kStopping;
          })) {
        return false;
      }
    }
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(5));
    const Status launched = Launch();
    std::vector<Frame> replay;
    std::shared_ptr<ipc::Channel> channel;
    {
      MutexLock lock(mutex_);
      if (state_ == State::kStopping) return false;  // the destructor reaps what was launched
      if (!launched.ok()) {
        last_failure_ = launched.message();
        spdlog::warn("{}: restart failed: {}", name_, last_failure_);
        continue;
      }
      ++restarts_;
      state_ = State::kReady;
      // The new process starts with fresh device figures; errors its GPU reported while the
      // old one died (often because it died) are not the new one's.
      device_baseline_.reset();
      if (options_.device_health != nullptr && !options_.binding.gpu.empty()) {
        gpu_errors_seen_ = options_.device_health->ErrorsOn(options_.binding.gpu);
      }
      spdlog::info("{} restarted (restart {})", name_, restarts_);
      // Requests that had not started go to the new worker.
      for (auto& [id, live] : live_) {
        if (!live.sent) replay.push_back(SubmitFrame(live));
      }
      for (auto& [id, live] : tensors_) {
        if (!live.sent) replay.push_back(TensorFrame(id, live));
      }
      channel = channel_;
      changed_.notify_all();
    }
    // Sent by another thread: this one must start reading, or a worker answering a long
    // replay could fill the socket and wait for us while we wait for it.
    if (replayer_.joinable()) replayer_.join();
    if (!replay.empty()) {
      replayer_ = std::thread([channel, replay = std::move(replay)] {
        for (const Frame& frame : replay) {
          if (!channel->Send(frame).ok()) return;  // it ended: the reader sees why
        }
      });
    }
    return true;
  }
}

bool WorkerClient::Revive() {
  MutexLock lock(mutex_);
  if (state_ != State::kFailed) return false;
  failures_.clear();
  state_ = State::kRestarting;
  spdlog::info("{} leaves quarantine (asked to load)", name_);
  changed_.notify_all();
  return true;
}

bool WorkerClient::Drain(const std::string& why) {
  MutexLock lock(mutex_);
  if (state_ != State::kReady) return false;
  kill_reason_ = why + "; drained and restarted";
  operator_drain_ = true;
  spdlog::info("{}: {}", name_, kill_reason_);
  state_ = State::kDraining;
  drain_deadline_ = Clock::now() + options_.drain_grace;
  changed_.notify_all();
  return true;
}

std::string WorkerClient::ReadFrames() {
  std::shared_ptr<ipc::Channel> channel;
  {
    MutexLock lock(mutex_);
    channel = channel_;
  }
  if (channel == nullptr) return "no channel";
  while (true) {
    Result<Frame> frame = channel->Receive();
    if (!frame.ok()) {
      if (frame.status().code() == StatusCode::kUnavailable) return "";
      return "it sent a bad frame (" + frame.status().message() + ")";
    }
    if (frame->body_case() == Frame::kMoreMemory) {
      OnMoreMemory(frame->more_memory());
      continue;
    }
    if (frame->body_case() == Frame::kTensorResult) {
      OnTensorResult(frame->tensor_result());
      continue;
    }
    uint64_t granted = 0;
    if (frame->body_case() == Frame::kStats) {
      ReconcileKv(frame->stats());
      granted = GrantedBytes();
    }
    MutexLock lock(mutex_);
    switch (frame->body_case()) {
      case Frame::kStats:
        stats_ = ipc::FromProto(frame->stats());
        rss_bytes_ = frame->stats().rss_bytes();
        committed_bytes_ = frame->stats().committed_bytes();
        if (frame->stats().has_tensor()) tensor_stats_ = ipc::FromProto(frame->stats().tensor());
        last_heartbeat_ = Clock::now();
        CheckHealthLocked(granted);
        break;
      case Frame::kSubmitReply: {
        auto it = live_.find(frame->submit_reply().request_id());
        if (it == live_.end()) break;
        const Status status = ipc::FromProto(frame->submit_reply());
        it->second.reply = status;
        if (!status.ok() && !it->second.caller_waiting) {
          // A resubmission the new worker (or a sibling) refused: the request ends with the
          // reason, and a full queue answers as a full queue does at Submit (engine_client.h).
          EndChoices(it->second, engine::FinishReason::kError, status.message(),
                     status.code() == StatusCode::kResourceExhausted);
          live_.erase(it);
        }
        changed_.notify_all();
        break;
      }
      case Frame::kEvents:
        for (const ipc::proto::Event& wire : frame->events().events()) {
          auto it = live_.find(wire.request_id());
          if (it == live_.end()) continue;
          Result<engine::Event> event = ipc::FromProto(wire);
          if (!event.ok()) return "it sent a bad event (" + event.status().message() + ")";
          Live& live = it->second;
          // A choice out of range, or one finishing twice, would break the handle's count.
          if (event->choice >= live.request.n ||
              (event->finish.has_value() && live.finished_choices.contains(event->choice))) {
            return "it sent a bad event (choice " + std::to_string(event->choice) + " of " +
                   wire.request_id() + ")";
          }
          live.started = true;
          if (event->finish.has_value()) live.finished_choices.insert(event->choice);
          live.handle->Push(std::move(event).value());
          if (static_cast<int32_t>(live.finished_choices.size()) >= live.request.n) {
            live_.erase(it);
          }
        }
        break;
      default:
        return "it sent an unexpected " + std::string(ipc::FrameName(*frame)) + " frame";
    }
  }
}

void WorkerClient::CheckHealthLocked(uint64_t granted) {
  const DeviceHealthProbe* probe = options_.device_health.get();
  if (probe != nullptr && pid_ > 0) device_bytes_ = probe->DeviceMemoryOf(pid_);
  std::string why;
  const uint64_t margin = options_.leak_margin_bytes;
  const uint64_t host_allowance = options_.host_allowance_bytes;
  if (margin > 0 && rss_bytes_ > (host_allowance > 0 ? host_allowance : granted) + margin) {
    why = "leaking: resident memory " + FormatBytes(rss_bytes_) + " is more than its " +
          (host_allowance > 0 ? "host allowance of " + FormatBytes(host_allowance)
                              : "grant of " + FormatBytes(granted)) +
          " plus the margin of " + FormatBytes(margin);
  } else if (margin > 0 && device_bytes_.has_value() && state_ == State::kReady) {
    // Device memory is measured against what the worker held at its first reading once ready
    // (its CUDA context, weights, workspace: not in a host grant), plus what its grant has
    // grown by since (elastic KV lent to it), plus the margin.
    if (!device_baseline_.has_value()) {
      device_baseline_ = *device_bytes_;
      granted_baseline_ = granted;
    } else {
      const uint64_t growth = granted > granted_baseline_ ? granted - granted_baseline_ : 0;
      if (*device_bytes_ > *device_baseline_ + growth + margin) {
        why = "leaking: device memory " + FormatBytes(*device_bytes_) +
              " (NVML) is more than the " + FormatBytes(*device_baseline_) +
              " it held when ready, plus its grant's growth of " + FormatBytes(growth) +
              ", plus the margin of " + FormatBytes(margin);
      }
    }
  }
  if (probe != nullptr && !options_.binding.gpu.empty()) {
    const uint64_t errors = probe->ErrorsOn(options_.binding.gpu);
    if (errors > gpu_errors_seen_) {
      if (why.empty()) {
        why = "its GPU " + options_.binding.gpu + " reported a critical error (XID, " +
              std::to_string(errors - gpu_errors_seen_) + " new)";
      }
      gpu_errors_seen_ = errors;
    }
  }
  if (why.empty() || state_ != State::kReady) return;
  kill_reason_ = why + "; drained and restarted";
  spdlog::warn("{}: {}", name_, kill_reason_);
  state_ = State::kDraining;
  drain_deadline_ = Clock::now() + options_.drain_grace;
  changed_.notify_all();
}

void WorkerClient::OnWorkerEnded(const std::string& why) {
  int64_t pid = 0;
  {
    MutexLock lock(mutex_);
    pid = pid_;
    pid_ = 0;  // nobody signals a pid that is about to be reaped
  }
  std::string how = "the worker vanished";
  if (pid > 0) {
    int status = 0;
    pid_t reaped = 0;
    // A worker that sent garbage is killed at once: its state cannot be trusted. One that
    // closed its socket is exiting (or, if it lingers, killed after a second).
    if (!why.empty()) ::kill(static_cast<pid_t>(pid), SIGKILL);
    for (int i = 0; i < 100 && reaped == 0; ++i) {
      reaped = ::waitpid(static_cast<pid_t>(pid), &status, WNOHANG);
      if (reaped == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (reaped == 0) {
      ::kill(static_cast<pid_t>(pid), SIGKILL);
      reaped = ::waitpid(static_cast<pid_t>(pid), &status, 0);
    }
    if (reaped == pid) how = DescribeExit(status);
  }
  if (replayer_.joinable()) replayer_.join();  // its sends fail now that the worker is gone
  ReleaseKvOfEndedWorker();
  // Tensor requests the worker held end once this function's lock is released (their
  // callbacks may not run under it); those not sent wait for the restart.
  std::string tensor_message;
  struct FailTensorsAtExit {
    WorkerClient* self;
    std::string* message;
    ~FailTensorsAtExit() {
      if (!message->empty()) self->FailSentTensors(*message);
    }
  } fail_tensors{this, &tensor_message};
  MutexLock lock(mutex_);
  if (!why.empty()) how = "the supervisor dropped it: " + why;
  if (!kill_reason_.empty()) how = kill_reason_;
  kill_reason_.clear();
  planned_restart_ = operator_drain_;
  operator_drain_ = false;
  last_failure_ = how;
  spdlog::warn("{} ended: {}", name_, last_failure_);
  channel_.reset();
  // Nothing runs until the restarted worker's first heartbeat says so.
  stats_.running = 0;
  stats_.waiting = 0;
  if (state_ != State::kStopping && state_ != State::kFailed) state_ = State::kRestarting;
  const std::string message = name_ + " ended: " + last_failure_;
  tensor_message = message + " while it held the request";
  for (auto& [id, live] : tensors_) live.cancel_sent = false;
  for (auto it = live_.begin(); it != live_.end();) {
    Live& live = it->second;
    if (live.started) {
      // It produced events: replaying it would show the client tokens twice; it ends here.
      EndChoices(live, engine::FinishReason::kError, message);
      it = live_.erase(it);
      continue;
    }
    if (live.aborted) {
      EndChoices(live, engine::FinishReason::kAbort, "");
      it = live_.erase(it);
      continue;
    }
    live.sent = false;  // submitted again after the restart (or now, to another instance)
    live.reply.reset();
    ++it;
  }
  changed_.notify_all();
  if (rehome_ == nullptr || state_ == State::kStopping) return;
  // Requests that had not started go to another instance of the model now, if one takes
  // them; the rest wait for the restart. Called unlocked: the other instance has its own lock.
  std::vector<Live> orphans;
  for (auto it = live_.begin(); it != live_.end();) {
    orphans.push_back(std::move(it->second));
    it = live_.erase(it);
  }
  const Rehome rehome = rehome_;
  lock.Unlock();
  std::vector<Live> kept;
  for (Live& orphan : orphans) {
    if (!rehome(orphan.request, orphan.handle)) kept.push_back(std::move(orphan));
  }
  if (orphans.size() > kept.size()) {
    spdlog::info("{}: {} request(s) that had not started went to another instance", name_,
                 orphans.size() - kept.size());
  }
  lock.Lock();
  for (Live& live : kept) {
    const std::string id = live.request.id;
    live_.emplace(id, std::move(live));
  }
  changed_.notify_all();
}

bool WorkerClient::Serving() const {
  MutexLock lock(mutex_);
  return state_ == State::kReady && channel_ != nullptr;
}

void WorkerClient::SetRehome(Rehome rehome) {
  MutexLock lock(mutex_);
  rehome_ = std::move(rehome);
}

bool WorkerClient::Adopt(const engine::Request& request,
                         const std::shared_ptr<engine::RequestHandle>& handle) {
  MutexLock lock(mutex_);
  if (state_ != State::kReady || channel_ == nullptr || live_.contains(request.id)) return false;
  Live& live = live_[request.id];
  live.request = request;
  live.handle = handle;
  const Frame frame = SubmitFrame(live);  // its answer: a refusal ends it with the reason
  std::shared_ptr<ipc::Channel> channel = channel_;
  lock.Unlock();
  (void)channel->Send(frame);
  return true;
}

void WorkerClient::EndChoices(Live& live, engine::FinishReason finish, const std::string& message,
                              bool queue_full) {
  if (live.handle == nullptr) return;
  for (int32_t c = 0; c < live.request.n; ++c) {
    if (live.finished_choices.contains(c)) continue;
    engine::Event event;
    event.choice = c;
    event.finish = finish;
    event.error = message;
    event.instance_lost = finish == engine::FinishReason::kError && !queue_full;
    event.queue_full = finish == engine::FinishReason::kError && queue_full;
    event.times.finished_us = engine::NowUs();
    live.finished_choices.insert(c);
    live.handle->Push(std::move(event));
  }
}

Frame WorkerClient::SubmitFrame(Live& live) {
  Frame frame;
  ipc::ToProto(live.request, frame.mutable_submit()->mutable_request());
  live.sent = true;
  live.reply.reset();
  return frame;
}

void WorkerClient::Watch() {
  MutexLock lock(mutex_);
  bool shutdown_sent = false;
  while (state_ != State::kStopping) {
    lock.WaitUntil(changed_, Clock::now() + options_.heartbeat);  // as cv.wait_for does
    if ((state_ != State::kReady && state_ != State::kDraining) || pid_ <= 0) {
      shutdown_sent = false;
      continue;
    }
    const auto silent = Clock::now() - last_heartbeat_;
    if (silent > options_.heartbeat_timeout) {
      kill_reason_ =
          "missed heartbeats for " +
          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(silent).count()) +
          " ms (hung or stopped; timeout " + std::to_string(options_.heartbeat_timeout.count()) +
          " ms): killed";
      spdlog::warn("{}: {}", name_, kill_reason_);
      ::kill(static_cast<pid_t>(pid_), SIGKILL);
      last_heartbeat_ = Clock::now();  // once per worker
      continue;
    }
    if (!tensors_.empty()) {
      lock.Unlock();
      ForwardTensorCancels();
      lock.Lock();
    }
    if (state_ == State::kDraining && !shutdown_sent && channel_ != nullptr) {
      bool in_flight = false;
      for (const auto& [id, live] : live_) in_flight = in_flight || live.sent;
      for (const auto& [id, live] : tensors_) in_flight = in_flight || live.sent;
      if (!in_flight || Clock::now() >= drain_deadline_) {
        std::shared_ptr<ipc::Channel> channel = channel_;
        shutdown_sent = true;
        lock.Unlock();
        Frame shutdown;
        shutdown.mutable_shutdown();
        (void)channel->Send(shutdown);
        lock.Lock();
      }
    }
  }
}

Result<std::shared_ptr<engine::RequestHandle>> WorkerClient::Submit(engine::Request request) {
  if (tensor_info_ != nullptr) {
    return InvalidArgumentError("model '" + options_.load.id +
                                "' is a tensor (ONNX) model: it serves KServe v2 infer, not "
                                "text generation");
  }
  if (request.arrival_us == 0) request.arrival_us = engine::NowUs();
  const int64_t ceiling = KvCeilingTokens(max_request_tokens_.load());
  MutexLock lock(mutex_);
  // Memory the device's ledger can never lend is refused here, as the engine does in process.
  if (std::optional<std::string> refusal = engine::KvCeilingRefusal(
          static_cast<int64_t>(request.prompt_tokens.size()) + request.max_tokens, ceiling,
          stats_.kv_bytes_per_token)) {
    return InvalidArgumentError(*refusal);
  }
  if (state_ == State::kFailed) {
    return UnavailableError(name_ + " is quarantined: " + last_failure_);
  }
  if (state_ == State::kStopping) return UnavailableError(name_ + " is stopping");
  const std::string id = request.id;
  if (live_.contains(id)) return InvalidArgumentError("request id " + id + " is already live");
  auto handle = std::make_shared<engine::RequestHandle>(id, request.n);
  Live& live = live_[id];
  live.request = std::move(request);
  live.handle = handle;
  // Not ready (restarting, draining): sent when the worker is back.
  if (state_ != State::kReady || channel_ == nullptr) return handle;
  const Frame frame = SubmitFrame(live);
  live.caller_waiting = true;
  std::shared_ptr<ipc::Channel> channel = channel_;
  lock.Unlock();
  (void)channel->Send(frame);  // a failure: the reader sees the worker end
  lock.Lock();
  // The worker validates and queues: its answer comes back quickly.
  const bool answered =
      lock.WaitFor(changed_, std::chrono::seconds(30), [&]() PIER_REQUIRES(mutex_) {
        auto it = live_.find(id);
        return it == live_.end() || it->second.reply.has_value() || !it->second.sent;
      });
  auto it = live_.find(id);
  if (it != live_.end()) it->second.caller_waiting = false;
  if (!answered || it == live_.end() || !it->second.sent || it->second.started) {
    return handle;  // ended, or going to the restarted worker
  }
  const Status status = *it->second.reply;
  if (!status.ok()) {
    it->second.handle = nullptr;  // the caller gets the error, not a handle
    live_.erase(it);
    return status;
  }
  return handle;
}

void WorkerClient::Abort(const std::string& id) {
  MutexLock lock(mutex_);
  auto it = live_.find(id);
  if (it == live_.end()) return;
  if (!it->second.sent || channel_ == nullptr) {
    EndChoices(it->second, engine::FinishReason::kAbort, "");
    live_.erase(it);
    return;
  }
  it->second.aborted = true;
  std::shared_ptr<ipc::Channel> channel = channel_;
  lock.Unlock();
  Frame frame;
  frame.mutable_abort()->set_request_id(id);
  (void)channel->Send(frame);
}

void WorkerClient::AbortAll(std::string reason) {
  MutexLock lock(mutex_);
  for (auto it = live_.begin(); it != live_.end();) {
    if (!it->second.sent || channel_ == nullptr) {
      EndChoices(it->second, engine::FinishReason::kAbort, reason);
      it = live_.erase(it);
    } else {
      it->second.aborted = true;
      ++it;
    }
  }
  std::shared_ptr<ipc::Channel> channel = channel_;
  lock.Unlock();
  if (channel != nullptr) {
    Frame frame;
    frame.mutable_abort_all()->set_reason(reason);
    (void)channel->Send(frame);
  }
}

engine::EngineStats WorkerClient::Stats() const {
  // The worker's own governor knows only its grant: the ceiling is the device ledger's.
  const int64_t ceiling = KvCeilingTokens(max_request_tokens_.load());
  MutexLock lock(mutex_);
  engine::EngineStats stats = stats_;
  stats.kv_ceiling_tokens = ceiling;
  // The open sequences are counted here, not taken from the last heartbeat: a pool balancing
  // requests must see a request it just sent (and one just finished) at once, not up to a
  // heartbeat later. How many of them run is the worker's figure (capped by that count): a
  // request that produced events may be waiting again (preempted), and one just sent waits
  // until the worker's engine schedules it, as in process.
  int64_t open = 0;
  for (const auto& [id, live] : live_) {
    open += live.request.n - static_cast<int64_t>(live.finished_choices.size());
  }
  stats.running = std::clamp<int64_t>(stats_.running, 0, open);
  stats.waiting = open - stats.running;
  return stats;
}

WorkerHealth WorkerClient::Health() const {
  MutexLock lock(mutex_);
  WorkerHealth h;
  switch (state_) {
    case State::kStarting:
      h.state = "starting";
      break;
    case State::kReady:
      h.state = "ready";
      break;
    case State::kDraining:
      h.state = "draining";
      break;
    case State::kRestarting:
      h.state = "restarting";
      break;
    case State::kFailed:
      h.state = "failed";
      break;
    case State::kStopping:
      h.state = "stopping";
      break;
  }
  h.pid = pid_;
  h.restarts = restarts_;
  h.binding = options_.binding;
  h.last_failure = last_failure_;
  h.rss_bytes = rss_bytes_;
  h.device_bytes = device_bytes_;
  h.committed_bytes = committed_bytes_;
  h.granted_bytes = grant_.has_value() ? GrantedBytes() : 0;
  h.kv_lent_bytes = h.granted_bytes -
                    std::min(h.granted_bytes, options_.budget_bytes +
                                                  (measured_.has_value() ? measured_->bytes() : 0));
  return h;
}

}  // namespace pier::serving
