// WorkerClient and RunWorker on the default GGUF: a worker process serves the same tokens as
// the in-process engine, under a grant charged to the supervisor's governor; what cannot start
// says why (a missing binary, a protocol version mismatch, a model that does not load).
#include "serving/worker_client.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>

#include "ipc/frame.h"
#include "memory/lease.h"
#include "serving/model_manager.h"
#include "serving/worker_main.h"
#include "serving/worker_spec.h"

namespace pier::serving {
namespace {

ModelLoadOptions Load(const std::string& id) {
  ModelLoadOptions load;
  load.path = PIER_DEFAULT_MODEL_PATH;
  load.id = id;
  load.settings.ctx = 256;
  load.settings.threads = 1;
  load.settings.max_seqs = 4;
  load.settings.max_batched_tokens = 64;
  load.settings.kv_policy = engine::KvPolicy::kStatic;
  return load;
}

std::unique_ptr<DeviceSet> Devices() {
  DeviceSetOptions options;
  options.cpu_capacity = uint64_t{8} << 30;
  options.cpu_budget = BudgetSpec::Bytes(uint64_t{2} << 30);
  return std::move(DeviceSet::Create(options)).value();
}

engine::Request Greedy(const std::string& id) {
  engine::Request r;
  r.id = id;
  r.prompt_tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  r.max_tokens = 12;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  return r;
}

std::vector<int32_t> Tokens(const std::vector<engine::Event>& events) {
  std::vector<int32_t> tokens;
  for (const engine::Event& e : events) {
    if (e.token >= 0) tokens.push_back(e.token);
  }
  return tokens;
}

// The worker binary is the `pier` built beside the tests.
std::string PierBinary() { return std::string(PIER_BINARY_PATH); }

// A worker of the default model `id` (Load) under its guaranteed grant on `devices`' CPU.
WorkerOptions WorkerOf(DeviceSet& devices, const std::string& id) {
  WorkerOptions options;
  options.load = Load(id);
  options.budget_bytes = *GuaranteedBytes(options.load);
  options.device_governor = &devices.cpu_governor();
  options.binary = PierBinary();
  return options;
}

TEST(WorkerClientTest, AWorkerServesTheSameTokensAsTheEngineInProcess) {
  auto devices = Devices();
  ModelRef local = *OpenModel(Load("local"), *devices);
  auto in_process = *local->client->Submit(Greedy("a"));
  const std::vector<int32_t> want = Tokens(in_process->WaitAll());
  const uint64_t before = devices->cpu_governor().Stats().committed_bytes;

  WorkerOptions options = WorkerOf(*devices, "remote");
  auto worker = WorkerClient::Start(options);
  ASSERT_TRUE(worker.ok()) << worker.status().ToString();
  EXPECT_EQ(devices->cpu_governor().Stats().committed_bytes, before + options.budget_bytes)
      << "the grant is charged to the device";
  auto handle = (*worker)->Submit(Greedy("b"));
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  const std::vector<engine::Event> events = (*handle)->WaitAll();
  EXPECT_EQ(Tokens(events), want);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().finish, engine::FinishReason::kLength);
  EXPECT_EQ(events.back().usage.completion_tokens, 12);
  // The worker's own checks answer through Submit, as in process.
  engine::Request too_long = Greedy("c");
  too_long.max_tokens = 100000;
  auto refused = (*worker)->Submit(too_long);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*worker)->Health().state, "ready");
  EXPECT_GT((*worker)->Health().pid, 0);
  worker->reset();
  EXPECT_EQ(devices->cpu_governor().Stats().committed_bytes, before) << "the grant is back";
}

TEST(WorkerClientTest, ElasticKvGrowsThroughTheDeviceLedgerAndIsGivenBackForAnotherOwner) {
  auto devices = Devices();
  MemoryGovernor& device = devices->cpu_governor();
  WorkerOptions options;
  options.load = Load("elastic");
  options.load.settings.kv_policy = engine::KvPolicy::kElastic;
  options.load.settings.ctx = 1024;
  options.budget_bytes = *GuaranteedBytes(options.load);  // weights, workspace, KV minimum
  options.device_governor = &device;
  options.binary = PierBinary();
  auto started = WorkerClient::Start(options);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  WorkerClient& worker = **started;
  const uint64_t grant = options.budget_bytes;
  EXPECT_EQ(worker.Health().kv_lent_bytes, 0u);

  // Three 200-token prompts need more KV than the minimum: the worker asks, the mirror grows.
  std::vector<std::shared_ptr<engine::RequestHandle>> handles;
  for (int i = 0; i < 3; ++i) {
    engine::Request r = Greedy("long" + std::to_string(i));
    r.prompt_tokens.clear();
    for (int t = 0; t < 200; ++t) r.prompt_tokens.push_back(100 + (t * 7 + i * 13) % 900);
    r.max_tokens = 8;
    handles.push_back(*worker.Submit(std::move(r)));
  }
  for (auto& h : handles) {
    const std::vector<engine::Event> events = h->WaitAll();
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back().finish, engine::FinishReason::kLength) << events.back().error;
  }
  const uint64_t lent = worker.Health().kv_lent_bytes;
  EXPECT_GT(lent, 0u) << "the KV cache grew past its minimum through the supervisor";
  EXPECT_EQ(worker.Health().granted_bytes, grant + lent);
  Result<OwnerId> owner = device.FindOwner("elastic/worker");
  ASSERT_TRUE(owner.ok());
  EXPECT_EQ(device.StatsFor(*owner)->allocated_bytes, grant + lent) << "the ledger counts it";

  // Another owner needs all that is left and more: the idle worker's chunks come back.
  OwnerId other = *device.AddOwner({.name = "other/kv", .priority = 10});
  LeaseOptions need;
  need.name = "other/kv";
  need.chunk_bytes = lent;
  const uint64_t free = device.budget_bytes() - device.Stats().committed_bytes;
  need.max_chunks = static_cast<size_t>(free / lent) + 2;
  need.accounting_only = true;  // only the ledger matters here
  auto squeezer = std::move(device.CreateLease(other, need)).value();
  const size_t fill = static_cast<size_t>(free / squeezer->chunk_bytes());
  if (fill > 0) {
    MemoryStatus filled = squeezer->Grow(fill);
    ASSERT_TRUE(filled.ok()) << filled.status().ToString();
  }
  MemoryStatus grown =
      squeezer->Grow(1, GrowOptions{.wait = true, .timeout = std::chrono::seconds(10)});
  ASSERT_TRUE(grown.ok()) << grown.status().ToString();
  EXPECT_LT(worker.Health().kv_lent_bytes, lent);
  // The engine's count comes with a heartbeat (the one after the shrink, at the latest).
  for (int i = 0; i < 100 && worker.Stats().kv_shrinks < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GE(worker.Stats().kv_shrinks, 1);
  ASSERT_TRUE(device.CheckInvariants().ok());

  // The worker still serves, within what it holds now.
  auto again = worker.Submit(Greedy("after"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->WaitAll().back().finish, engine::FinishReason::kLength);
  squeezer.reset();
  ASSERT_TRUE(device.RemoveOwner(other).ok());
  started->reset();
  EXPECT_EQ(device.Stats().committed_bytes, 0u) << "the grant and the mirror are back";
}

// Running and waiting as the worker's engine counts them: a sequence preempted after it
// produced tokens waits again (in process too), though the supervisor saw it start.
TEST(WorkerClientTest, PreemptedSequencesCountAsWaiting) {
  auto devices = Devices();
  // A static KV cache of 256 positions, at most 4 sequences.
  WorkerOptions options = WorkerOf(*devices, "tight");
  auto worker = WorkerClient::Start(options);
  ASSERT_TRUE(worker.ok()) << worker.status().ToString();
  // Four sequences of up to 208 positions each cannot all fit: all start, some are preempted.
  std::vector<std::shared_ptr<engine::RequestHandle>> handles;
  for (int i = 0; i < 4; ++i) {
    engine::Request r = Greedy("p" + std::to_string(i));
    r.max_tokens = 200;
    auto handle = (*worker)->Submit(std::move(r));
    ASSERT_TRUE(handle.ok()) << handle.status().ToString();
    handles.push_back(*handle);
  }
  // Until one finishes: every sequence open, and once one was preempted, one waiting.
  engine::EngineStats seen;
  for (int i = 0; i < 500 && !(seen.preemptions > 0 && seen.waiting > 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    seen = (*worker)->Stats();
    if (seen.running + seen.waiting < 4) break;
  }
  EXPECT_GT(seen.preemptions, 0);
  EXPECT_EQ(seen.running + seen.waiting, 4);
  EXPECT_GT(seen.waiting, 0) << "a preempted sequence is waiting, not running";
  (*worker)->AbortAll("the test is done");
  for (auto& handle : handles) handle->WaitAll();
  EXPECT_EQ((*worker)->Stats().running + (*worker)->Stats().waiting, 0);
}

// The device's view (NVML on GPU machines) as a second source beside RSS: device memory past
// the grant plus the margin, or a new critical error on the bound GPU, restarts the worker.
class ScriptedDeviceHealth final : public DeviceHealthProbe {
 public:
  std::optional<uint64_t> DeviceMemoryOf(int64_t pid) const override {
    if (pid <= 0) return std::nullopt;
    return pid == leaking_pid.load() ? leaked_bytes.load() : 0;
  }
  uint64_t ErrorsOn(const std::string& gpu) const override {
    return gpu == "GPU-test" ? errors.load() : 0;
  }
  std::atomic<int64_t> leaking_pid{0};  // only this process holds leaked_bytes
  std::atomic<uint64_t> leaked_bytes{0};
  std::atomic<uint64_t> errors{0};
};

std::string WaitForRestart(WorkerClient& worker) {
  for (int i = 0; i < 300; ++i) {
    const WorkerHealth h = worker.Health();
    if (h.restarts >= 1 && h.state == "ready") return h.last_failure;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return "no restart: " + worker.Health().state;
}

TEST(WorkerClientTest, DeviceMemoryPastTheGrantOrAGpuErrorRestartsTheWorker) {
  auto devices = Devices();
  auto probe = std::make_shared<ScriptedDeviceHealth>();
  probe->errors = 2;  // before the instance existed: not its own
  WorkerOptions options = WorkerOf(*devices, "gpu-watched");
  options.leak_margin_bytes = uint64_t{64} << 20;
  options.drain_grace = std::chrono::milliseconds(100);
  options.binding.gpu = "GPU-test";
  options.device_health = probe;
  auto worker = WorkerClient::Start(options);
  ASSERT_TRUE(worker.ok()) << worker.status().ToString();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ((*worker)->Health().restarts, 0) << (*worker)->Health().last_failure;
  EXPECT_EQ((*worker)->Health().device_bytes, 0u);

  probe->errors = 3;
  std::string why = WaitForRestart(**worker);
  EXPECT_NE(why.find("GPU GPU-test reported a critical error (XID, 1 new)"), std::string::npos)
      << why;

  // The restarted worker leaks on the device; the one after it does not.
  probe->leaked_bytes = options.budget_bytes + (uint64_t{1} << 30);
  probe->leaking_pid = (*worker)->Health().pid;
  for (int i = 0; i < 300 && (*worker)->Health().restarts < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  why = (*worker)->Health().last_failure;
  EXPECT_EQ((*worker)->Health().restarts, 2) << why;
  EXPECT_NE(why.find("leaking: device memory"), std::string::npos) << why;
  EXPECT_NE(why.find("(NVML)"), std::string::npos) << why;
  // It serves after both restarts.
  auto handle = (*worker)->Submit(Greedy("after"));
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  EXPECT_EQ((*handle)->WaitAll().back().usage.completion_tokens, 12);
}

// An operator's drains restart the process but are no failures: more of them than
// max_failures never quarantine the instance, and a crash after them is the first failure.
TEST(WorkerClientTest, OperatorDrainsRestartTheWorkerWithoutCountingTowardQuarantine) {
  auto devices = Devices();
  WorkerOptions options = WorkerOf(*devices, "drained");
  options.drain_grace = std::chrono::milliseconds(100);
  options.max_failures = 2;
  auto worker = WorkerClient::Start(options);
  ASSERT_TRUE(worker.ok()) << worker.status().ToString();
  for (int64_t i = 1; i <= 3; ++i) {
    ASSERT_TRUE((*worker)->Drain("drained by a test"));
    for (int j = 0; j < 300; ++j) {
      const WorkerHealth h = (*worker)->Health();
      if ((h.restarts >= i && h.state == "ready") || h.state == "failed") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const WorkerHealth h = (*worker)->Health();
    ASSERT_EQ(h.state, "ready") << "drain " << i << ": " << h.last_failure;
    EXPECT_EQ(h.restarts, i);
    EXPECT_NE(h.last_failure.find("drained by a test; drained and restarted"), std::string::npos)
        << h.last_failure;
  }
  // A crash is a failure: one of two, so it restarts.
  ASSERT_EQ(::kill(static_cast<pid_t>((*worker)->Health().pid), SIGKILL), 0);
  for (int j = 0; j < 300 && (*worker)->Health().restarts < 4; ++j) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int j = 0; j < 300 && (*worker)->Health().state != "ready"; ++j) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ((*worker)->Health().state, "ready") << (*worker)->Health().last_failure;
  auto handle = (*worker)->Submit(Greedy("after-drains"));
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  EXPECT_EQ((*handle)->WaitAll().back().usage.completion_tokens, 12);
}

TEST(WorkerClientTest, WhatCannotStartSaysWhy) {
  auto devices = Devices();
  WorkerOptions options;
  options.load = Load("m");
  options.budget_bytes = *GuaranteedBytes(options.load);
  options.device_governor = &devices->cpu_governor();
  options.binary = "/nonexistent/pier";
  auto missing = WorkerClient::Start(options);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("exited with status 127"), std::string::npos)
      << missing.status().message();

  options.binary = PierBinary();
  options.budget_bytes = 1 << 20;  // far too small for the model
  auto small = WorkerClient::Start(options);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("memory budget"), std::string::npos)
      << small.status().message();

  options.budget_bytes = uint64_t{64} << 30;  // more than the device's budget
  auto greedy = WorkerClient::Start(options);
  ASSERT_FALSE(greedy.ok());
  EXPECT_EQ(greedy.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(devices->cpu_governor().Stats().committed_bytes, 0u) << "nothing left charged";
}

TEST(WorkerClientTest, AWorkerThatNeverAnswersTheHandshakeIsKilledAtTheLoadTimeout) {
  auto devices = Devices();
  const std::string script = testing::TempDir() + "/silent-worker.sh";
  {
    std::ofstream out(script);
    out << "#!/bin/sh\nexec sleep 60\n";  // reads nothing, answers nothing
  }
  ASSERT_EQ(::chmod(script.c_str(), 0755), 0);
  WorkerOptions options;
  options.load = Load("m");
  options.budget_bytes = *GuaranteedBytes(options.load);
  options.device_governor = &devices->cpu_governor();
  options.binary = script;
  options.load_timeout = std::chrono::milliseconds(300);
  const auto started = std::chrono::steady_clock::now();
  auto silent = WorkerClient::Start(options);
  const auto took = std::chrono::steady_clock::now() - started;
  ASSERT_FALSE(silent.ok());
  EXPECT_NE(silent.status().message().find("300 ms"), std::string::npos)
      << silent.status().message();
  EXPECT_LT(took, std::chrono::seconds(10));
  EXPECT_EQ(devices->cpu_governor().Stats().committed_bytes, 0u) << "nothing left charged";
}

// The worker's side of the handshake, in this process over a socketpair.
TEST(WorkerSpecTest, TheSettingsReachTheWorker) {
  ModelLoadOptions load = Load("m");
  load.settings.prefill_chunk_while_decoding = 0;
  load.settings.max_queued = 9;
  Result<ModelLoadOptions> back = FromLoadSpec(ToLoadSpec(load, 1, uint64_t{1} << 30));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->settings, load.settings);
  EXPECT_EQ(back->settings.prefill_chunk_while_decoding, 0);
  EXPECT_EQ(back->settings.max_batched_tokens, 64);
  EXPECT_EQ(back->settings.max_queued, 9);
  EXPECT_FALSE(back->settings.weights_dtype.has_value());
  EXPECT_TRUE(back->settings.qos_stop_steps);
  load.settings.prefill_chunk_while_decoding = 48;
  load.settings.qos_stop_steps = false;
  load.settings.weights_dtype = DType::kQ4_0;
  load.settings.kv_max = engine::KvSize::Bytes((uint64_t{96} << 20) + 7);
  load.settings.kv_idle_release_seconds = 0.125;
  load.settings.qos_reserve = 0.1;
  back = FromLoadSpec(ToLoadSpec(load, 1, 1));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->settings, load.settings);
  EXPECT_EQ(back->settings.weights_dtype, DType::kQ4_0);
  EXPECT_EQ(back->device, "cpu");
  EXPECT_EQ(back->path, load.path);
  EXPECT_EQ(back->id, "m");
  // A GPU worker's device as it sees it (its one visible GPU); anything else is refused.
  load.device = "cuda:0";
  back = FromLoadSpec(ToLoadSpec(load, 1, 1));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->device, "cuda:0");
  ipc::proto::LoadSpec spec = ToLoadSpec(load, 1, 1);
  spec.set_device("tpu:0");
  back = FromLoadSpec(spec);
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(back.status().message().find("tpu:0"), std::string::npos);
}

// Settings a supervisor of another build (or a corrupt frame) could send: refused, naming what.
TEST(WorkerSpecTest, SettingsThatDoNotParseAreRefused) {
  const auto refused = [](const std::string& json) {
    ipc::proto::LoadSpec spec = ToLoadSpec(Load("m"), 1, 1);
    spec.set_settings_json(json);
    Result<ModelLoadOptions> back = FromLoadSpec(spec);
    EXPECT_FALSE(back.ok()) << json;
    EXPECT_EQ(back.status().code(), StatusCode::kInvalidArgument) << json;
    return back.ok() ? std::string() : back.status().message();
  };
  EXPECT_NE(refused("{\"ctx\": ").find("not JSON"), std::string::npos);
  EXPECT_NE(refused("[1, 2]").find("object"), std::string::npos);
  EXPECT_NE(refused("{\"no_such_key\": \"1\"}").find("no_such_key"), std::string::npos);
  EXPECT_NE(refused("{\"ctx\": \"1\"}").find("ctx"), std::string::npos);
  EXPECT_NE(refused("{\"max_seqs\": {\"a\": 1}}").find("single value"), std::string::npos);
  EXPECT_NE(refused("{\"kv_policy\": \"sometimes\"}").find("sometimes"), std::string::npos);
}

TEST(WorkerMainTest, AnotherProtocolVersionIsRefusedNamingBoth) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  int exit_code = -1;
  std::thread worker([&] { exit_code = RunWorker(fds[1]); });
  ipc::Channel supervisor(fds[0]);
  ipc::proto::Frame hello;
  hello.mutable_hello()->set_protocol_version(ipc::kProtocolVersion + 41);
  *hello.mutable_hello()->mutable_load() = ToLoadSpec(Load("m"), 1, uint64_t{1} << 30);
  ASSERT_TRUE(supervisor.Send(hello).ok());
  Result<ipc::proto::Frame> answer = supervisor.Receive();
  worker.join();
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  ASSERT_TRUE(answer->has_refused());
  const std::string& reason = answer->refused().reason();
  EXPECT_NE(reason.find("version " + std::to_string(ipc::kProtocolVersion + 41)), std::string::npos)
      << reason;
  EXPECT_NE(reason.find("this worker version " + std::to_string(ipc::kProtocolVersion)),
            std::string::npos)
      << reason;
  EXPECT_EQ(exit_code, 2);
}

TEST(WorkerMainTest, AFrameOtherThanHelloFirstEndsTheWorker) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  int exit_code = -1;
  std::thread worker([&] { exit_code = RunWorker(fds[1]); });
  ipc::Channel supervisor(fds[0]);
  ipc::proto::Frame abort;
  abort.mutable_abort()->set_request_id("x");
  ASSERT_TRUE(supervisor.Send(abort).ok());
  worker.join();
  EXPECT_EQ(exit_code, 2);
}

}  // namespace
}  // namespace pier::serving
