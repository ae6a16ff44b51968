// WorkerClient: the EngineClient of one model instance that runs in its own `pier worker`
// process (serving/worker_main.h), started, watched and restarted by this (the supervisor's)
// side. A crash, hang or exit of the worker touches only its own requests: every other model
// keeps serving.
//
// Process: the worker is this binary re-executed (`pier worker --model ID --instance N
// --ipc-fd 3`, so `ps` tells instances apart) with one end of a socketpair as fd 3 and
// PR_SET_PDEATHSIG(SIGKILL), so it dies with the supervisor even when the supervisor is
// killed with SIGKILL. The handshake sends the load spec; Start returns once the worker has
// loaded the model (Ready) or with its reason (Refused, or how it exited).
//
// Failures: the worker's end of the socket closing, a bad frame (the worker is killed: nothing
// after it can be trusted), or heartbeats missing for `heartbeat_timeout` (a hung or stopped
// worker: killed with SIGKILL) all end the worker. Then its requests that had produced events
// end at once (each unfinished choice gets a final event with finish kError and a message
// naming the model, the instance and how the worker ended); requests that had not started are
// kept and submitted again to the restarted worker, and so are requests submitted while it
// restarts. Restarts back off exponentially (restart_backoff, doubling, at most 5 s); after
// `max_failures` failures within `failure_window` the instance is quarantined: state failed,
// every request refused with the last reason, until the instance is loaded again. A worker
// whose resident memory exceeds its grant by more than `leak_margin_bytes` is drained (new
// requests wait, those in flight finish within `drain_grace`) and restarted; so is one whose
// device memory (DeviceHealthProbe: NVML) grows past its first reading once ready by more than
// its grant's growth plus that margin, or whose bound GPU reports a device-level error.
//
// Memory: the worker gets its own device set whose budget is `budget_bytes`, granted from the
// supervisor's device governor, where the grant is reserved under the owner "<id>/worker"
// ("<id>#N/worker" for instance N > 1, or while another version of the model still holds the
// name: a reload starts the new version beside the old) for as long as the instance exists
// (across restarts).
// With an elastic KV cache the grant holds its minimum, and what the worker's KV lease grows
// beyond it is mirrored here by an accounting-only lease of the same chunks ("<owner> kv"):
// the worker asks for budget (MoreMemory), the mirror grows in the device's governor (which
// may ask other models to shrink) and the worker is told its new budget; when the device's
// governor asks the mirror to shrink, the worker is told a lower budget, its own governor
// makes its KV lease shrink, and the mirror gives the chunks back once the worker reports it
// has. So elastic KV lends memory between models in different processes as it does within one.
//
// Thread-safety: every method may be called from any thread. One supervisor thread per worker
// reads its frames and restarts it; a watchdog thread checks its heartbeats.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "engine/engine_client.h"
#include "ipc/frame.h"
#include "memory/memory_governor.h"
#include "placement/binding.h"
#include "serving/device_health.h"
#include "serving/model_loader.h"
#include "serving/tensor_runner.h"
#include "tensor_models/tensor_request.h"

namespace pier::serving {

struct WorkerOptions {
  ModelLoadOptions load;  // one instance's (instances is ignored)
  int instance = 1;       // from 1
  uint64_t budget_bytes = 0;
  // The worker's own budget while it loads, when it differs from the grant (0: budget_bytes).
  // A tensor (ONNX) model's memory is only known once loaded: it loads under this, reports
  // what it holds, and its grant grows to that (plus tensor_headroom_bytes) or the start fails.
  uint64_t load_budget_bytes = 0;
  uint64_t tensor_headroom_bytes = uint64_t{16} << 20;
  MemoryGovernor* device_governor = nullptr;  // where the grant is reserved (borrowed)
  // Charged beside the grant, never part of the worker's budget: what the worker's process
  // holds on the device outside its governor (a GPU worker's CUDA context).
  uint64_t device_overhead_bytes = 0;
  std::string binary = "/proc/self/exe";
  std::chrono::milliseconds heartbeat{100};
  std::chrono::milliseconds heartbeat_timeout{5000};
  std::chrono::milliseconds load_timeout{300'000};
  std::chrono::milliseconds restart_backoff{100};
  // A worker whose resident memory exceeds its grant by more than this is leaking: it gets
  // no new requests, those in flight may finish for `drain_grace`, then it is restarted
  // (0: not checked).
  uint64_t leak_margin_bytes = 0;
  // What its resident memory is measured against instead of the grant (0: the grant). A GPU
  // worker's grant is GPU memory; on the host it holds the mapped file and the CUDA runtime.
  uint64_t host_allowance_bytes = 0;
  // A second source beside RSS (null: none): the worker's device memory, which may grow past
  // what it held at its first reading once ready by its grant's growth plus the leak margin,
  // and device-level errors of its bound GPU; either drains and restarts it.
  std::shared_ptr<const DeviceHealthProbe> device_health = nullptr;
  std::chrono::milliseconds drain_grace{30'000};
  int max_failures = 5;
  std::chrono::milliseconds failure_window{60'000};
  // Extra "NAME=value" entries for the worker's environment (tests' knobs).
  std::vector<std::string> environment;
  // Where the worker runs (placement/placer.h): it binds its CPUs and memory before loading,
  // and the binding's environment (CUDA_VISIBLE_DEVICES, MPS limits) is added to its own. A
  // binding the worker cannot apply fails its start with the reason.
  placement::Binding binding;
};

// How a worker instance is doing, for /admin/models and /metrics.
struct WorkerHealth {
  std::string state;  // "starting", "ready", "restarting", "failed"
  int64_t pid = 0;
  int64_t restarts = 0;
  std::string last_failure;              // how the worker ended last ("killed by signal 9", ...)
  uint64_t rss_bytes = 0;                // the worker's resident memory, from its last heartbeat
  std::optional<uint64_t> device_bytes;  // its device memory (device_health), when known
  uint64_t committed_bytes = 0;          // what its own governor holds
  uint64_t granted_bytes = 0;            // its grant, with the KV chunks lent to it now
  uint64_t kv_lent_bytes = 0;            // of which elastic KV above its minimum
  placement::Binding binding;
};

class WorkerClient final : public engine::EngineClient {
 public:
  using TensorDone = std::function<void(tensor_models::TensorResult)>;

  // Reserves the grant, starts the worker and waits for its load. RESOURCE_EXHAUSTED when the
  // grant does not fit the device's budget; the worker's reason when it refused or died while
  // loading.
  [[nodiscard]] static Result<std::unique_ptr<WorkerClient>> Start(WorkerOptions options);
  // Asks the worker to shut down, kills it if it has not within 2 s; requests still open end
  // with kAbort.
  ~WorkerClient() override;

  Result<std::shared_ptr<engine::RequestHandle>> Submit(engine::Request request) override;
  void Abort(const std::string& id) override;
  void AbortAll(std::string reason) override;
  // From the latest heartbeat, except running and waiting: this side's count of the open
  // choices of requests that have produced events (running) or not yet (waiting, also those
  // waiting for a restart), exact at once where a heartbeat would be up to one interval old.
  engine::EngineStats Stats() const override;

  bool Serving() const override;

  // Where requests that had not started go when this worker ends, instead of waiting for its
  // restart: the callback gets each and returns whether another instance took it (with the
  // same handle). Those it does not take wait for the restart. Set by the model's pool.
  using Rehome =
      std::function<bool(const engine::Request&, const std::shared_ptr<engine::RequestHandle>&)>;
  void SetRehome(Rehome rehome);
  // Takes over a request another instance could not run, keeping its handle (events go to the
  // same client). False unless this worker is ready.
  bool Adopt(const engine::Request& request, const std::shared_ptr<engine::RequestHandle>& handle);

  // A tensor (ONNX) model's worker (worker.proto's TensorSubmit): what it serves (null for an
  // LLM's worker; set by Start, then fixed), what its load measured, and its batcher's figures
  // from the latest heartbeat.
  const tensor_models::TensorModelInfo* tensor_info() const { return tensor_info_.get(); }
  TensorRunnerMemory tensor_memory() const;
  tensor_models::TensorRunnerStats TensorStats() const;
  // Sends a tensor request to the worker. UNAVAILABLE when the instance is quarantined or
  // stopping; RESOURCE_EXHAUSTED when it is larger than one IPC frame. `done` is called once,
  // never under this client's lock: with the worker's answer, or UNAVAILABLE naming the
  // instance when a second worker ended while it held the request (a tensor request has no
  // effect outside its answer, so the first time it is sent again to the restarted worker; a
  // request that kills its worker twice is not tried a third time). Requests not sent yet
  // (the worker restarting) wait and go to the new worker; a request whose `cancelled` flag
  // is set is cancelled in the worker at its next heartbeat.
  [[nodiscard]] Status SubmitTensor(tensor_models::TensorRequest request, TensorDone done);

  WorkerHealth Health() const;
  // A quarantined instance starts again (its failure count cleared); false when it was not
  // quarantined. For `POST /admin/models/NAME/load` on a model whose instances failed.
  bool Revive();
  // An operator's drain (POST /admin/models/NAME/drain): the instance takes no new requests,
  // those in flight may finish for `drain_grace`, then its process is restarted, as for a
  // leak, but at once and without counting toward quarantine (it is no failure); `why`
  // becomes its last failure. False unless it was ready.
  bool Drain(const std::string& why);
  int64_t max_request_tokens() const { return max_request_tokens_.load(); }
  // "model chat instance 2" (for messages).
  const std::string& name() const { return name_; }

 private:
  struct Live {
    engine::Request request;  // kept until it has started, to submit it again after a restart
    std::shared_ptr<engine::RequestHandle> handle;
    bool sent = false;     // submitted to the current worker process
    bool started = false;  // an event arrived: it cannot be replayed
    std::set<int32_t> finished_choices;
    std::optional<Status> reply;  // the worker's answer to Submit, for a waiting Submit
    bool caller_waiting = false;  // a Submit call waits for `reply` (and takes a refusal)
    bool aborted = false;         // Abort/AbortAll asked: never submitted again
  };
  struct LiveTensor {
    tensor_models::TensorRequest request;
    TensorDone done;
    bool sent = false;         // to the current worker process
    bool cancel_sent = false;  // its TensorCancel went out
    int deaths = 0;            // workers that ended while they held it
  };
  enum class State { kStarting, kReady, kDraining, kRestarting, kFailed, kStopping };

  explicit WorkerClient(WorkerOptions options);
  // Spawns and handshakes; on success the channel is ready. Called on the supervisor thread
  // (and by Start for the first process).
  Status Launch();
  // The supervisor thread: reads frames, restarts the worker when it ends.
  void Supervise(bool launch_first);
  // Launches again with backoff; false once quarantined or stopping.
  bool Relaunch();
  void Watch();  // the watchdog thread
  // Reads frames until the channel fails; returns why.
  std::string ReadFrames();
  // The worker ended (`how`): reap it, end started requests, keep the others.
  void OnWorkerEnded(const std::string& how);
  // Ends the unfinished choices of `live` with `finish` and `message`; a kError is the
  // instance's failure (HTTP 503), or with `queue_full` a full queue's refusal (429).
  void EndChoices(Live& live, engine::FinishReason finish, const std::string& message,
                  bool queue_full = false) PIER_REQUIRES(mutex_);
  // The Submit frame of `live`, marked sent; the caller sends it after unlocking (no frame is
  // ever sent under mutex_: a full socket must not stop the reader or the watchdog).
  ipc::proto::Frame SubmitFrame(Live& live) PIER_REQUIRES(mutex_);
  std::string DescribeExit(int wait_status) const;
  // The TensorSubmit frame of `live` (marked sent); sent by the caller after unlocking.
  ipc::proto::Frame TensorFrame(uint64_t id, LiveTensor& live) PIER_REQUIRES(mutex_);
  void OnTensorResult(const ipc::proto::TensorResult& result);
  // The tensor requests the ended worker held (sent): replayed after the restart the first
  // time, failed with `message` the second; those not sent wait.
  void FailSentTensors(const std::string& message);
  // Every tensor request, sent or not, fails with `status` (quarantine, shutdown).
  void FailAllTensors(const Status& status);
  // The watchdog's: TensorCancel for sent requests whose caller gave up; unsent ones end now.
  void ForwardTensorCancels();
  // The budget a launching worker gets: the grant (with what a tensor worker measured), or
  // load_budget_bytes for a tensor worker's first load.
  uint64_t LoadBudgetBytes() const;
  // A tensor worker's Ready: its model, and its grant grown to what it measured.
  Status AdoptTensorReady(const ipc::proto::Ready& ready, ipc::Channel& channel);
  // Elastic KV (see Memory above). Called on the supervisor thread, without mutex_ held: a
  // mirror's Grow may call other models' shrink handlers.
  // From the worker's Ready: the mirror (created at the first elastic Ready) talks to `channel`.
  Status MirrorKv(const ipc::proto::Ready& ready, const std::shared_ptr<ipc::Channel>& channel);
  void ReleaseKvOfEndedWorker();  // every lent chunk back: the worker's memory is gone
  void DropKvMirror();            // the destructor's, after the threads are joined
  void OnMoreMemory(const ipc::proto::MoreMemory& ask);
  void ReconcileKv(const ipc::proto::Stats& stats);
  // The grant plus the KV chunks lent now.
  uint64_t GrantedBytes() const;
  // The longest sequence the worker's KV cache could ever hold: its grant's chunks plus all
  // the device's ledger could lend the mirror (every other owner at its minimum), capped by
  // `max_request_tokens`; 0 without an elastic mirror.
  int64_t KvCeilingTokens(int64_t max_request_tokens) const;
  // At each heartbeat (mutex_ held): a worker whose resident or device memory passes its
  // `granted` bytes plus the leak margin, or whose GPU reported a critical error since the last
  // look, is drained and restarted.
  void CheckHealthLocked(uint64_t granted) PIER_REQUIRES(mutex_);

  const WorkerOptions options_;
  const std::string name_;
  // Not guarded by mutex_: set by Start before the threads begin (kv_ at a worker's first
  // elastic Ready, by Launch) and reset by the destructor after they are joined.
  std::optional<ExternalCharge> grant_;
  std::optional<ExternalCharge> overhead_;  // device_overhead_bytes, with the grant
  // A tensor worker's: what its first Ready measured beyond the grant (not guarded: set by
  // Start before the threads begin; a restart keeps it).
  std::optional<ExternalCharge> measured_;
  std::unique_ptr<const tensor_models::TensorModelInfo> tensor_info_;  // likewise
  struct KvMirror;
  std::shared_ptr<KvMirror> kv_;  // with an elastic KV cache, from the first Ready on
  OwnerId owner_;
  std::string owner_name_;  // owner_'s: "<id>/worker", or "<id>#N/worker" beside another
  std::atomic<int64_t> max_request_tokens_{0};

  mutable Mutex mutex_;
  std::condition_variable changed_;
  State state_ PIER_GUARDED_BY(mutex_) = State::kStarting;
  // The ready worker's; senders copy it.
  std::shared_ptr<ipc::Channel> channel_ PIER_GUARDED_BY(mutex_);
  // During a handshake (the destructor shuts it).
  std::shared_ptr<ipc::Channel> launching_ PIER_GUARDED_BY(mutex_);
  int64_t pid_ PIER_GUARDED_BY(mutex_) = 0;
  std::map<std::string, Live> live_ PIER_GUARDED_BY(mutex_);
  std::map<uint64_t, LiveTensor> tensors_ PIER_GUARDED_BY(mutex_);
  uint64_t next_tensor_id_ PIER_GUARDED_BY(mutex_) = 1;
  TensorRunnerMemory tensor_memory_ PIER_GUARDED_BY(mutex_);
  tensor_models::TensorRunnerStats tensor_stats_ PIER_GUARDED_BY(mutex_);
  engine::EngineStats stats_ PIER_GUARDED_BY(mutex_);
  uint64_t rss_bytes_ PIER_GUARDED_BY(mutex_) = 0;
  std::optional<uint64_t> device_bytes_ PIER_GUARDED_BY(mutex_);
  // device_health's count for the bound GPU, last looked at.
  uint64_t gpu_errors_seen_ PIER_GUARDED_BY(mutex_) = 0;
  // Device memory at the first reading once ready, and the grant then.
  std::optional<uint64_t> device_baseline_ PIER_GUARDED_BY(mutex_);
  uint64_t granted_baseline_ PIER_GUARDED_BY(mutex_) = 0;
  uint64_t committed_bytes_ PIER_GUARDED_BY(mutex_) = 0;
  std::chrono::steady_clock::time_point last_heartbeat_ PIER_GUARDED_BY(mutex_);
  int64_t restarts_ PIER_GUARDED_BY(mutex_) = 0;
  std::string last_failure_ PIER_GUARDED_BY(mutex_);
  // Why this side ended the worker (missed heartbeats, a leak), for OnWorkerEnded.
  std::string kill_reason_ PIER_GUARDED_BY(mutex_);
  // The process being stopped, or just stopped, was drained by an operator (Drain): its
  // restart is no failure (it counts toward no quarantine and waits no backoff).
  bool operator_drain_ PIER_GUARDED_BY(mutex_) = false;
  bool planned_restart_ PIER_GUARDED_BY(mutex_) = false;
  std::chrono::steady_clock::time_point drain_deadline_ PIER_GUARDED_BY(mutex_);
  std::vector<std::chrono::steady_clock::time_point> failures_ PIER_GUARDED_BY(mutex_);
  Rehome rehome_ PIER_GUARDED_BY(mutex_);
  std::thread replayer_;  // sends the requests a restarted worker takes over (supervisor's)
  std::thread supervisor_;
  std::thread watchdog_;
};

}  // namespace pier::serving
