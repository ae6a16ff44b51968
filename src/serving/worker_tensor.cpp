// WorkerClient's side of a tensor (ONNX) model's worker (worker_client.h: SubmitTensor,
// tensor_info, TensorStats; worker.proto's TensorSubmit, TensorResult, TensorCancel): the
// requests it holds, what happens to them when the worker ends, and the grant grown to what
// the worker measured at load. The worker's process and LLM requests are worker_client.cpp's.
#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "ipc/tensor_convert.h"
#include "memory/byte_size.h"
#include "serving/worker_client.h"

namespace pier::serving {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

uint64_t WorkerClient::LoadBudgetBytes() const {
  if (tensor_info_ == nullptr && options_.load_budget_bytes > 0) return options_.load_budget_bytes;
  return options_.budget_bytes + (measured_.has_value() ? measured_->bytes() : 0);
}

Status WorkerClient::AdoptTensorReady(const ipc::proto::Ready& ready, ipc::Channel& channel) {
  PIER_ASSIGN_OR_RETURN(tensor_models::TensorModelInfo info, ipc::FromProto(ready.tensor_model()));
  const ipc::proto::TensorModel& model = ready.tensor_model();
  const uint64_t needed = ready.committed_bytes() + options_.tensor_headroom_bytes;
  const uint64_t granted = options_.budget_bytes + (measured_.has_value() ? measured_->bytes() : 0);
  if (needed > granted) {
    // Charged first, then the old charge goes: the grant never dips below what is held.
    MemoryResult<ExternalCharge> more =
        options_.device_governor->ChargeExternal(owner_, needed - options_.budget_bytes);
    if (!more.ok()) {
      return ResourceExhaustedError(
          "does not fit: loaded, it holds " + FormatBytes(ready.committed_bytes()) + " (weights " +
          FormatBytes(model.weights_bytes()) + ", working memory " +
          FormatBytes(model.workspace_peak_bytes()) + ", ONNX Runtime's own " +
          FormatBytes(model.overhead_bytes()) + "): " + more.status().message());
    }
    measured_ = std::move(more).value();
  }
  // Its own budget now stops where its grant does.
  ipc::proto::Frame budget;
  budget.mutable_budget()->set_seq(1);
  budget.mutable_budget()->set_budget_bytes(options_.budget_bytes +
                                            (measured_.has_value() ? measured_->bytes() : 0));
  if (tensor_info_ == nullptr) {
    tensor_info_ = std::make_unique<const tensor_models::TensorModelInfo>(std::move(info));
  }
  PIER_RETURN_IF_ERROR(channel.Send(budget));
  MutexLock lock(mutex_);
  tensor_memory_.weights_bytes = model.weights_bytes();
  tensor_memory_.workspace_peak = model.workspace_peak_bytes();
  tensor_memory_.overhead_bytes = model.overhead_bytes();
  tensor_memory_.warmed = model.warmed();
  return Status::Ok();
}

TensorRunnerMemory WorkerClient::tensor_memory() const {
  MutexLock lock(mutex_);
  return tensor_memory_;
}

tensor_models::TensorRunnerStats WorkerClient::TensorStats() const {
  MutexLock lock(mutex_);
  tensor_models::TensorRunnerStats stats = tensor_stats_;
  // This side's count: what waits here for a restart is queued too.
  for (const auto& [id, live] : tensors_) {
    if (!live.sent) ++stats.queued_items;
  }
  return stats;
}

ipc::proto::Frame WorkerClient::TensorFrame(uint64_t id, LiveTensor& live) {
  ipc::proto::Frame frame;
  ipc::proto::TensorSubmit* submit = frame.mutable_tensor_submit();
  submit->set_id(id);
  for (const HostTensor& t : live.request.inputs) ipc::ToProto(t, submit->add_inputs());
  for (const std::string& name : live.request.outputs) submit->add_outputs(name);
  submit->set_priority(live.request.priority);
  if (live.request.deadline != std::chrono::steady_clock::time_point::max()) {
    const auto left =
        std::chrono::duration_cast<std::chrono::microseconds>(live.request.deadline - Clock::now())
            .count();
    submit->set_deadline_in_us(std::max<int64_t>(1, left));  // past: the worker refuses it
  }
  live.sent = true;
  live.cancel_sent = false;
  return frame;
}

Status WorkerClient::SubmitTensor(tensor_models::TensorRequest request, TensorDone done) {
  if (tensor_info_ == nullptr) {
    return InvalidArgumentError(name_ + " is not a tensor model");
  }
  uint64_t bytes = 0;
  for (const HostTensor& t : request.inputs) bytes += t.bytes.size() + t.name.size() + 64;
  if (bytes + 4096 > ipc::kMaxFrameBytes) {
    return ResourceExhaustedError(name_ + ": the request's " + FormatBytes(bytes) +
                                  " of tensors are more than one message to its worker process "
                                  "carries (" +
                                  FormatBytes(ipc::kMaxFrameBytes) + "); send smaller batches");
  }
  ipc::proto::Frame frame;
  std::shared_ptr<ipc::Channel> channel;
  {
    MutexLock lock(mutex_);
    if (state_ == State::kFailed) {
      return UnavailableError(name_ + " is quarantined: " + last_failure_);
    }
    if (state_ == State::kStopping) return UnavailableError(name_ + " is stopping");
    const uint64_t id = next_tensor_id_++;
    LiveTensor& live = tensors_[id];
    live.request = std::move(request);
    live.done = std::move(done);
    if (state_ != State::kReady || channel_ == nullptr) return Status::Ok();  // after restart
    frame = TensorFrame(id, live);
    channel = channel_;
  }
  // A send that fails means the worker ended: its reader fails or replays the request.
  (void)channel->Send(frame);
  return Status::Ok();
}

void WorkerClient::OnTensorResult(const ipc::proto::TensorResult& result) {
  TensorDone done;
  {
    MutexLock lock(mutex_);
    auto it = tensors_.find(result.id());
    if (it == tensors_.end()) return;
    done = std::move(it->second.done);
    tensors_.erase(it);
  }
  if (done) done(ipc::FromProto(result));
}

void WorkerClient::FailSentTensors(const std::string& message) {
  std::vector<TensorDone> failed;
  {
    MutexLock lock(mutex_);
    for (auto it = tensors_.begin(); it != tensors_.end();) {
      LiveTensor& live = it->second;
      if (live.sent && ++live.deaths >= 2) {
        failed.push_back(std::move(live.done));
        it = tensors_.erase(it);
        continue;
      }
      live.sent = false;  // sent again to the restarted worker
      ++it;
    }
  }
  for (TensorDone& done : failed) {
    tensor_models::TensorResult result;
    result.status = UnavailableError(message);
    if (done) done(std::move(result));
  }
}

void WorkerClient::FailAllTensors(const Status& status) {
  std::vector<TensorDone> failed;
  {
    MutexLock lock(mutex_);
    for (auto& [id, live] : tensors_) failed.push_back(std::move(live.done));
    tensors_.clear();
  }
  for (TensorDone& done : failed) {
    tensor_models::TensorResult result;
    result.status = status;
    if (done) done(std::move(result));
  }
}

void WorkerClient::ForwardTensorCancels() {
  std::vector<ipc::proto::Frame> cancels;
  std::vector<TensorDone> dropped;
  std::shared_ptr<ipc::Channel> channel;
  {
    MutexLock lock(mutex_);
    channel = channel_;
    for (auto it = tensors_.begin(); it != tensors_.end();) {
      LiveTensor& live = it->second;
      const bool gone = live.request.cancelled != nullptr && live.request.cancelled->load();
      if (gone && !live.sent) {
        dropped.push_back(std::move(live.done));
        it = tensors_.erase(it);
        continue;
      }
      if (gone && !live.cancel_sent && channel != nullptr) {
        live.cancel_sent = true;
        ipc::proto::Frame frame;
        frame.mutable_tensor_cancel()->set_id(it->first);
        cancels.push_back(std::move(frame));
      }
      ++it;
    }
  }
  for (const ipc::proto::Frame& frame : cancels) (void)channel->Send(frame);
  for (TensorDone& done : dropped) {
    tensor_models::TensorResult result;
    result.status = UnavailableError("cancelled: nobody waits for the answer any more");
    if (done) done(std::move(result));
  }
}

}  // namespace pier::serving
