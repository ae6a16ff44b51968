#include "serving/worker_main.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "ipc/convert.h"
#include "ipc/frame.h"
#include "placement/bind_process.h"
#include "serving/device_set.h"
#include "serving/model_host.h"
#include "serving/model_loader.h"
#include "serving/tensor_worker.h"
#include "serving/worker_spec.h"

namespace pier::serving {
namespace {

// PIER_WORKER_TEST_FAULT=leak: the heartbeat thread allocates memory nobody charges (on
// purpose outside the governor: it is the leak the supervisor must notice).
bool test_leak = false;

using ipc::FrameName;
using ipc::ToProto;
using ipc::proto::Frame;

uint64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0;
  uint64_t resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

// The live requests and the frames that carry their events.
class Worker {
 public:
  // `governor`: the model's device's (the CPU's, or its GPU's), whose budget is the grant.
  Worker(ipc::Channel* channel, std::unique_ptr<DeviceSet> devices, MemoryGovernor* governor,
         std::unique_ptr<ModelHost> host)
      : channel_(channel),
        devices_(std::move(devices)),
        governor_(*governor),
        host_(std::move(host)) {
    // An elastic KV lease short of budget asks the supervisor (which answers with a Budget
    // frame). One question at a time; asked again if no answer came within a second.
    governor_.SetBudgetShortHandler([this](uint64_t bytes, int urgency) {
      const int64_t now = NowMicros();
      int64_t asked = asked_at_us_.load();
      if (asked != 0 && now - asked < 1'000'000) return false;
      if (!asked_at_us_.compare_exchange_strong(asked, now)) return false;
      Frame frame;
      frame.mutable_more_memory()->set_bytes(bytes);
      frame.mutable_more_memory()->set_urgency(urgency);
      return channel_->Send(frame).ok();
    });
  }

  ~Worker() {
    governor_.SetBudgetShortHandler({});
    StopHeartbeat();
    host_.reset();  // ends every request before the handles' listeners go
  }

  void StartHeartbeat(std::chrono::milliseconds every) {
    heartbeat_ = std::thread([this, every] {
      std::vector<std::unique_ptr<char[]>> leaked;
      while (true) {
        {
          MutexLock lock(heartbeat_mutex_);
          if (stopping_) return;
        }
        if (test_leak && leaked.size() < 64) {
          constexpr size_t kChunk = size_t{32} << 20;
          leaked.push_back(std::make_unique<char[]>(kChunk));
          std::memset(leaked.back().get(), 1, kChunk);  // resident, not just reserved
        }
        Frame frame;
        ToProto(host_->client().Stats(), frame.mutable_stats());
        AddMemory(frame.mutable_stats());
        if (!channel_->Send(frame).ok()) return;
        MutexLock lock(heartbeat_mutex_);
        lock.WaitFor(heartbeat_cv_, every,
                     [this]() PIER_REQUIRES(heartbeat_mutex_) { return stopping_; });
      }
    });
  }

  void StopHeartbeat() {
    {
      MutexLock lock(heartbeat_mutex_);
      stopping_ = true;
    }
    heartbeat_cv_.notify_all();
    if (heartbeat_.joinable()) heartbeat_.join();
  }

  // Serves frames until Shutdown (true) or the channel ends (false: the supervisor is gone).
  Status Serve() {
    while (true) {
      Result<Frame> frame = channel_->Receive();
      if (!frame.ok()) return frame.status();
      switch (frame->body_case()) {
        case Frame::kSubmit:
          HandleSubmit(frame->submit());
          break;
        case Frame::kAbort:
          host_->client().Abort(frame->abort().request_id());
          break;
        case Frame::kAbortAll:
          host_->client().AbortAll(frame->abort_all().reason());
          break;
        case Frame::kBudget:
          ApplyBudget(frame->budget());
          break;
        case Frame::kShutdown:
          // Nothing more goes out: requests the engine ends on the way down are the
          // supervisor's to resubmit, not to see aborted.
          channel_->Shutdown();
          return Status::Ok();
        default:
          return InvalidArgumentError("IPC: unexpected " + std::string(FrameName(*frame)) +
                                      " frame from the supervisor");
      }
    }
  }

 private:
  static int64_t NowMicros() {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // The governor's side of a heartbeat: what it holds, its budget, its KV lease's state.
  void AddMemory(ipc::proto::Stats* stats) {
    // The seq before the budget: a Budget applied in between then shows a newer budget
    // under an older seq (the supervisor skips it), never an older budget under its seq
    // (the supervisor would take back chunks the worker was just granted).
    const uint64_t seq = budget_seq_.load();
    const GovernorStats g = governor_.Stats();
    stats->set_committed_bytes(g.committed_bytes);
    stats->set_rss_bytes(ResidentBytes());
    stats->set_budget_bytes(g.budget_bytes);
    stats->set_budget_pending(g.pending_budget_bytes.has_value());
    stats->set_budget_seq(seq);
    bool idle = true;
    bool waiting_only = false;
    int urgency = 0;
    int64_t chunks = 0;
    for (const LeaseStats& lease : g.leases) {
      chunks += static_cast<int64_t>(lease.chunks);
      idle = idle && lease.idle;
      urgency = std::max(urgency, lease.urgency);
      waiting_only = waiting_only || lease.waiting_only;
    }
    stats->set_kv_idle(idle);
    stats->set_kv_urgency(urgency);
    stats->set_kv_waiting_only(waiting_only);
    if (!g.leases.empty()) stats->set_kv_lease_chunks(chunks);
  }

  // The supervisor's answer: more budget (granted from the device's), the same (not granted
  // now; the lease retries), or less (the device's governor wants some back: the KV lease is
  // asked to shrink and the budget drops once it has).
  void ApplyBudget(const ipc::proto::Budget& budget) {
    // The supervisor sends from several threads: a frame older than one applied is stale.
    if (budget.seq() != 0 && budget.seq() <= budget_seq_.load()) return;
    Status set = governor_.SetBudget(budget.budget_bytes());
    if (!set.ok()) spdlog::warn("worker: budget from the supervisor: {}", set.message());
    budget_seq_ = budget.seq();
    asked_at_us_ = 0;
  }

  void HandleSubmit(const ipc::proto::Submit& submit) {
    Frame reply;
    Result<engine::Request> request = ipc::FromProto(submit.request());
    const std::string id = submit.request().id();
    if (!request.ok()) {
      ToProto(request.status(), id, reply.mutable_submit_reply());
      (void)channel_->Send(reply);
      return;
    }
    Result<std::shared_ptr<engine::RequestHandle>> handle =
        host_->client().Submit(std::move(request).value());
    // The reply goes before any event of the request (the listener below sends those).
    ToProto(handle.ok() ? Status::Ok() : handle.status(), id, reply.mutable_submit_reply());
    if (!channel_->Send(reply).ok() || !handle.ok()) return;
    std::shared_ptr<engine::RequestHandle> h = *handle;
    std::weak_ptr<engine::RequestHandle> weak = h;
    {
      MutexLock lock(handles_mutex_);
      handles_[id] = h;
    }
    h->SetListener([this, weak, id] {
      std::shared_ptr<engine::RequestHandle> handle = weak.lock();
      if (handle == nullptr) return;
      SendEvents(*handle, id);
    });
  }

  void SendEvents(engine::RequestHandle& handle, const std::string& id) {
    // One sender per request at a time, so its events keep their order on the wire.
    MutexLock send_lock(send_order_mutex_);
    std::vector<engine::Event> events = handle.Drain();
    if (events.empty()) return;
    Frame frame;
    for (const engine::Event& e : events) {
      ToProto(e, id, frame.mutable_events()->add_events());
    }
    (void)channel_->Send(frame);
    if (handle.finished()) {
      MutexLock lock(handles_mutex_);
      handles_.erase(id);
    }
  }

  ipc::Channel* const channel_;
  std::unique_ptr<DeviceSet> devices_;
  MemoryGovernor& governor_;  // one of devices_'s
  std::unique_ptr<ModelHost> host_;
  Mutex handles_mutex_;
  std::map<std::string, std::shared_ptr<engine::RequestHandle>> handles_
      PIER_GUARDED_BY(handles_mutex_);
  Mutex send_order_mutex_;
  Mutex heartbeat_mutex_;
  std::condition_variable heartbeat_cv_;
  bool stopping_ PIER_GUARDED_BY(heartbeat_mutex_) = false;
  std::thread heartbeat_;
  std::atomic<uint64_t> budget_seq_{0};  // of the last Budget frame applied
  std::atomic<int64_t> asked_at_us_{0};  // when MoreMemory went out unanswered (0: none)
};

Status Refuse(ipc::Channel& channel, const std::string& reason) {
  Frame frame;
  frame.mutable_refused()->set_protocol_version(ipc::kProtocolVersion);
  frame.mutable_refused()->set_reason(reason);
  return channel.Send(frame);
}

}  // namespace

int RunWorker(int fd) {
  ipc::Channel channel(fd);
  Result<Frame> hello = channel.Receive();
  if (!hello.ok()) {
    spdlog::error("worker: no hello from the supervisor: {}", hello.status().ToString());
    return 2;
  }
  if (!hello->has_hello()) {
    spdlog::error("worker: expected a hello, got a {} frame", ipc::FrameName(*hello));
    return 2;
  }
  const ipc::proto::Hello& h = hello->hello();
  if (h.protocol_version() != ipc::kProtocolVersion) {
    const std::string reason = "protocol version mismatch: the supervisor speaks version " +
                               std::to_string(h.protocol_version()) + ", this worker version " +
                               std::to_string(ipc::kProtocolVersion);
    (void)Refuse(channel, reason);
    spdlog::error("worker: {}", reason);
    return 2;
  }
  Result<ModelLoadOptions> load = FromLoadSpec(h.load());
  if (!load.ok()) {
    (void)Refuse(channel, load.status().message());
    return 2;
  }
  // Bound before anything loads: every thread and page of the model inherits it.
  const std::vector<int> cpus(h.load().bind_cpus().begin(), h.load().bind_cpus().end());
  const int numa_node = h.load().bind_memory() ? h.load().numa_node() : -1;
  if (Status bound = placement::BindThisProcess(cpus, numa_node); !bound.ok()) {
    (void)Refuse(channel, "binding: " + bound.message());
    return 3;
  }
  const auto started = std::chrono::steady_clock::now();
  // Test-only: a GPU worker computing on the CPU, so the supervisor's side of GPU workers (the
  // GPU's books, the worker's CUDA_VISIBLE_DEVICES, its grant) is tested without a GPU.
  if (load->device != "cpu" && std::getenv("PIER_WORKER_TEST_GPU_ON_CPU") != nullptr) {
    spdlog::warn("worker {}: test hook: computing on the CPU in place of {}", load->id,
                 load->device);
    load->device = "cpu";
  }
  DeviceSetOptions device_options;
  // The grant is the budget of the device the model runs on: the CPU's, or its GPU's (the
  // host then holds no governed memory of the model's; its resident memory is checked by the
  // supervisor against a host allowance).
  device_options.cpu_budget =
      load->device == "cpu" ? BudgetSpec::Bytes(h.load().budget_bytes()) : BudgetSpec::Percent(100);
  device_options.swap_space_bytes = load->settings.swap_space;
  // On a GPU the grant is the GPU's budget (what admission sized there).
  device_options.gpu_budget = BudgetSpec::Bytes(h.load().budget_bytes());
  Result<std::unique_ptr<DeviceSet>> devices = DeviceSet::Create(device_options);
  if (!devices.ok()) {
    (void)Refuse(channel, devices.status().message());
    return 3;
  }
  Result<MemoryGovernor*> governor = (*devices)->GovernorFor(load->device);
  if (!governor.ok()) {
    (void)Refuse(channel, governor.status().message());
    return 3;
  }
  if (IsOnnxPath(load->path)) {
    return ServeTensorWorker(channel, h, *load, std::move(devices).value(), *governor, started);
  }
  ModelHostOptions host_options = HostOptionsOf(*load, load->id);
  host_options.swap_pool = &(*devices)->swap_pool();
  // This governor's budget is a grant that grows on request: the supervisor checks requests
  // against what the device's ledger could ever lend (WorkerClient::Submit).
  host_options.engine.check_kv_ceiling = false;
  Result<std::unique_ptr<ModelHost>> host = ModelHost::Open(host_options, *governor);
  if (!host.ok()) {
    (void)Refuse(channel, host.status().message());
    return 3;
  }
  Frame ready;
  ready.mutable_ready()->set_protocol_version(ipc::kProtocolVersion);
  ready.mutable_ready()->set_pid(::getpid());
  ready.mutable_ready()->set_max_request_tokens((*host)->max_request_tokens());
  ready.mutable_ready()->set_committed_bytes((*governor)->Stats().committed_bytes);
  for (const LeaseStats& lease : (*governor)->Stats().leases) {
    // The KV cache's elastic lease: the supervisor mirrors its growth in the device's ledger.
    ready.mutable_ready()->set_kv_chunk_bytes(lease.chunk_bytes);
    ready.mutable_ready()->set_kv_chunks(static_cast<int64_t>(lease.chunks));
    ready.mutable_ready()->set_kv_min_chunks(static_cast<int64_t>(lease.min_chunks));
    ready.mutable_ready()->set_kv_max_chunks(static_cast<int64_t>(lease.max_chunks));
    ready.mutable_ready()->set_kv_chunk_tokens((*host)->engine().KvChunkTokens());
  }
  ready.mutable_ready()->set_load_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  if (!channel.Send(ready).ok()) return 0;
  // Test-only faults, for the supervisor's tests: misbehave right after the handshake (only
  // the workers of PIER_WORKER_TEST_FAULT_MODEL, when that is set).
  const char* fault_model = std::getenv("PIER_WORKER_TEST_FAULT_MODEL");
  const char* fault = std::getenv("PIER_WORKER_TEST_FAULT");
  if (fault_model != nullptr && load->id != fault_model) fault = nullptr;
  if (fault != nullptr) {
    const std::string what = fault;
    if (what == "exit-after-ready") return 9;
    if (what == "leak") test_leak = true;
    if (what == "garbage-after-ready") {
      const char garbage[] = "\x05\x00\x00\x00garbage";
      (void)::write(fd, garbage, sizeof(garbage) - 1);
      std::this_thread::sleep_for(std::chrono::seconds(30));
      return 0;
    }
  }

  Worker worker(&channel, std::move(devices).value(), *governor, std::move(host).value());
  worker.StartHeartbeat(std::chrono::milliseconds(std::max<uint32_t>(h.heartbeat_ms(), 10)));
  const Status served = worker.Serve();
  if (!served.ok() && served.code() != StatusCode::kUnavailable) {
    spdlog::error("worker {}: {}", load->id, served.ToString());
    return 2;
  }
  return 0;
}

}  // namespace pier::serving
