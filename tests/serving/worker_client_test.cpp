// WorkerClient and RunWorker on the default GGUF: a worker process serves the same tokens as
// the in-process engine, under a grant charged to the supervisor's governor; what cannot start
// says why (a missing binary, a protocol version mismatch, a model that does not load).
#include "serving/worker_client.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "ipc/frame.h"
#include "serving/model_manager.h"
#include "serving/worker_main.h"
#include "serving/worker_spec.h"

namespace pier::serving {
namespace {

ModelLoadOptions Load(const std::string& id) {
  ModelLoadOptions load;
  load.path = PIER_DEFAULT_MODEL_PATH;
  load.id = id;
  load.ctx = 256;
  load.threads = 1;
  load.max_seqs = 4;
  load.max_batched_tokens = 64;
  load.kv_policy = engine::KvPolicy::kStatic;
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

TEST(WorkerClientTest, AWorkerServesTheSameTokensAsTheEngineInProcess) {
  auto devices = Devices();
  ModelRef local = *OpenModel(Load("local"), *devices);
  auto in_process = *local->client->Submit(Greedy("a"));
  const std::vector<int32_t> want = Tokens(in_process->WaitAll());
  const uint64_t before = devices->cpu_governor().Stats().committed_bytes;

  WorkerOptions options;
  options.load = Load("remote");
  options.budget_bytes = *GuaranteedBytes(options.load);
  options.device_governor = &devices->cpu_governor();
  options.binary = PierBinary();
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
  EXPECT_NE(reason.find("version " + std::to_string(ipc::kProtocolVersion + 41)),
            std::string::npos)
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
