#include "serving/tensor_worker.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <thread>

#include "common/mutex.h"
#include "ipc/convert.h"
#include "ipc/tensor_convert.h"
#include "serving/tensor_host.h"
#include "tensor_models/onnx/onnx_session.h"

namespace pier::serving {
namespace {

using ipc::proto::Frame;

class TensorWorker {
 public:
  TensorWorker(ipc::Channel& channel, std::unique_ptr<DeviceSet> devices, MemoryGovernor& governor,
               std::unique_ptr<TensorHost> host)
      : channel_(channel),
        devices_(std::move(devices)),
        governor_(governor),
        host_(std::move(host)) {}

  ~TensorWorker() {
    {
      MutexLock lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (heartbeat_.joinable()) heartbeat_.join();
    host_.reset();  // fails what still waits; the results go nowhere once the channel is shut
  }

  void StartHeartbeat(std::chrono::milliseconds every) {
    heartbeat_ = std::thread([this, every] {
      while (true) {
        Frame frame;
        ipc::proto::Stats* stats = frame.mutable_stats();
        ipc::ToProto(host_->client().Stats(), stats);
        ipc::ToProto(host_->Stats(), stats->mutable_tensor());
        const GovernorStats g = governor_.Stats();
        stats->set_committed_bytes(g.committed_bytes);
        stats->set_budget_bytes(g.budget_bytes);
        stats->set_budget_seq(budget_seq_.load());
        stats->set_rss_bytes(tensor_models::ProcessResidentBytes());
        stats->set_kv_idle(true);
        if (!channel_.Send(frame).ok()) return;
        MutexLock lock(mutex_);
        if (lock.WaitFor(cv_, every, [this]() PIER_REQUIRES(mutex_) { return stopping_; })) {
          return;
        }
      }
    });
  }

  Status Serve() {
    while (true) {
      Result<Frame> frame = channel_.Receive();
      if (!frame.ok()) return frame.status();
      switch (frame->body_case()) {
        case Frame::kTensorSubmit:
          HandleSubmit(frame->tensor_submit());
          break;
        case Frame::kTensorCancel: {
          MutexLock lock(mutex_);
          auto it = cancelled_.find(frame->tensor_cancel().id());
          if (it != cancelled_.end()) it->second->store(true);
          break;
        }
        case Frame::kAbortAll:
          host_->client().AbortAll(frame->abort_all().reason());
          break;
        case Frame::kBudget:
          if (frame->budget().seq() > budget_seq_.load()) {
            if (Status set = governor_.SetBudget(frame->budget().budget_bytes()); !set.ok()) {
              spdlog::warn("worker: budget from the supervisor: {}", set.message());
            }
            budget_seq_ = frame->budget().seq();
          }
          break;
        case Frame::kShutdown:
          channel_.Shutdown();
          return Status::Ok();
        default:
          return InvalidArgumentError("IPC: unexpected " + std::string(ipc::FrameName(*frame)) +
                                      " frame for a tensor model's worker");
      }
    }
  }

 private:
  void SendResult(uint64_t id, const TensorResult& result) {
    Frame frame;
    ipc::ToProto(result, id, frame.mutable_tensor_result());
    (void)channel_.Send(frame);  // a supervisor gone: its reader sees why
  }

  void HandleSubmit(const ipc::proto::TensorSubmit& submit) {
    const uint64_t id = submit.id();
    TensorRequest request;
    for (const ipc::proto::Tensor& wire : submit.inputs()) {
      Result<HostTensor> tensor = ipc::FromProto(wire);
      if (!tensor.ok()) {
        TensorResult refused;
        refused.status = tensor.status();
        SendResult(id, refused);
        return;
      }
      request.inputs.push_back(std::move(tensor).value());
    }
    request.outputs.assign(submit.outputs().begin(), submit.outputs().end());
    request.priority = submit.priority();
    if (submit.deadline_in_us() > 0) {
      request.deadline =
          std::chrono::steady_clock::now() + std::chrono::microseconds(submit.deadline_in_us());
    }
    auto cancelled = std::make_shared<std::atomic<bool>>(false);
    request.cancelled = cancelled;
    {
      MutexLock lock(mutex_);
      cancelled_[id] = cancelled;
    }
    Status queued = host_->Submit(std::move(request), [this, id](TensorResult result) {
      {
        MutexLock lock(mutex_);
        cancelled_.erase(id);
      }
      SendResult(id, result);
    });
    if (!queued.ok()) {
      {
        MutexLock lock(mutex_);
        cancelled_.erase(id);
      }
      TensorResult refused;
      refused.status = queued;
      SendResult(id, refused);
    }
  }

  ipc::Channel& channel_;
  std::unique_ptr<DeviceSet> devices_;
  MemoryGovernor& governor_;  // one of devices_'s
  std::unique_ptr<TensorHost> host_;
  std::atomic<uint64_t> budget_seq_{0};
  Mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ PIER_GUARDED_BY(mutex_) = false;
  std::map<uint64_t, std::shared_ptr<std::atomic<bool>>> cancelled_ PIER_GUARDED_BY(mutex_);
  std::thread heartbeat_;
};

}  // namespace

int ServeTensorWorker(ipc::Channel& channel, const ipc::proto::Hello& hello,
                      const ModelLoadOptions& load, std::unique_ptr<DeviceSet> devices,
                      MemoryGovernor* governor, std::chrono::steady_clock::time_point started) {
  Result<std::unique_ptr<TensorHost>> host =
      TensorHost::Open(TensorOptionsOf(load, load.id), governor);
  if (!host.ok()) {
    Frame refused;
    refused.mutable_refused()->set_protocol_version(ipc::kProtocolVersion);
    refused.mutable_refused()->set_reason(host.status().message());
    (void)channel.Send(refused);
    return 3;
  }
  Frame ready;
  ipc::proto::Ready* r = ready.mutable_ready();
  r->set_protocol_version(ipc::kProtocolVersion);
  r->set_pid(::getpid());
  r->set_committed_bytes(governor->Stats().committed_bytes);
  ipc::ToProto((*host)->info(), r->mutable_tensor_model());
  const TensorHostMemory& memory = (*host)->memory();
  r->mutable_tensor_model()->set_weights_bytes(memory.weights_bytes);
  r->mutable_tensor_model()->set_workspace_peak_bytes(memory.workspace_peak);
  r->mutable_tensor_model()->set_overhead_bytes(memory.overhead_bytes);
  r->mutable_tensor_model()->set_warmed(memory.warmed);
  r->set_load_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  if (!channel.Send(ready).ok()) return 0;
  TensorWorker worker(channel, std::move(devices), *governor, std::move(host).value());
  worker.StartHeartbeat(std::chrono::milliseconds(std::max<uint32_t>(hello.heartbeat_ms(), 10)));
  const Status served = worker.Serve();
  if (!served.ok() && served.code() != StatusCode::kUnavailable) {
    spdlog::error("worker {}: {}", load.id, served.ToString());
    return 2;
  }
  return 0;
}

}  // namespace pier::serving
