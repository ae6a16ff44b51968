// WorkerClient's process start (worker_client.h): the worker's environment, fork and exec of
// `pier worker`, and the handshake up to its Ready frame; and how an ended worker is described.
#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "ipc/convert.h"
#include "serving/worker_client.h"
#include "serving/worker_kv_mirror.h"
#include "serving/worker_spec.h"

extern char** environ;

namespace pier::serving {
namespace {

using ipc::proto::Frame;
using Clock = std::chrono::steady_clock;

}  // namespace

Status WorkerClient::Launch() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return IoError(name_ + ": socketpair failed: " + std::strerror(errno));
  }
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  const std::string model_arg = options_.load.id;
  const std::string instance_arg = std::to_string(options_.instance);
  std::vector<std::string> args = {"pier",       "worker",     "--model",  model_arg,
                                   "--instance", instance_arg, "--ipc-fd", "3"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The server's environment, then the options', then the binding's, each entry replacing
  // one of the same name: getenv returns the first match, so a CUDA_VISIBLE_DEVICES the server
  // itself was started with (Slurm, Ray) must not hide the binding's.
  std::vector<std::string> env_strings;
  auto put = [&env_strings](const std::string& entry) {
    const std::string_view name = std::string_view(entry).substr(0, entry.find('='));
    for (std::string& existing : env_strings) {
      if (std::string_view(existing).substr(0, existing.find('=')) == name) {
        existing = entry;
        return;
      }
    }
    env_strings.push_back(entry);
  };
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  for (const std::string& e : options_.environment) put(e);
  for (const std::string& e : options_.binding.environment) put(e);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const std::string binary = options_.binary;

  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return IoError(name_ + ": fork failed: " + std::strerror(errno));
  }
  if (pid == 0) {
    // The worker dies with the supervisor, also when that is killed with SIGKILL.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the supervisor died before prctl took effect
    // The supervisor blocks SIGTERM/SIGINT in every thread; the worker takes them as usual.
    sigset_t none;
    sigemptyset(&none);
    ::pthread_sigmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_IGN);
    // dup2 clears close-on-exec on fd 3 (and when it is fd 3 already, fcntl does).
    if (fds[1] == 3 ? ::fcntl(3, F_SETFD, 0) < 0 : ::dup2(fds[1], 3) < 0) ::_exit(127);
    ::execve(binary.c_str(), argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  auto channel = std::make_shared<ipc::Channel>(fds[0]);
  {
    MutexLock lock(mutex_);
    pid_ = pid;
    launching_ = channel;
    last_heartbeat_ = Clock::now();
  }
  auto fail = [&](const std::string& why) {
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    {
      MutexLock lock(mutex_);
      pid_ = 0;
      launching_.reset();
    }
    return UnavailableError(name_ + " did not start: " + why);
  };

  Frame hello;
  hello.mutable_hello()->set_protocol_version(ipc::kProtocolVersion);
  *hello.mutable_hello()->mutable_load() =
      ToLoadSpec(options_.load, options_.instance, LoadBudgetBytes());
  for (int cpu : options_.binding.cpus) hello.mutable_hello()->mutable_load()->add_bind_cpus(cpu);
  hello.mutable_hello()->mutable_load()->set_bind_memory(options_.binding.numa_node >= 0);
  hello.mutable_hello()->mutable_load()->set_numa_node(std::max(0, options_.binding.numa_node));
  hello.mutable_hello()->set_heartbeat_ms(static_cast<uint32_t>(options_.heartbeat.count()));
  if (Status sent = channel->Send(hello); !sent.ok()) {
    // The worker is gone already (a missing binary exits 127): say how it ended.
    int status = 0;
    bool exited = false;
    for (int i = 0; i < 100 && !exited; ++i) {
      exited = ::waitpid(pid, &status, WNOHANG) == pid;
      if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!exited) return fail(sent.message());
    MutexLock lock(mutex_);
    pid_ = 0;
    launching_.reset();
    return UnavailableError(name_ + " did not start: " + DescribeExit(status));
  }
  // The load may take a while; a worker that never answers is killed at load_timeout.
  std::thread timer;
  // `answered` is guarded by timer_mutex (a local: the analysis checks fields only).
  Mutex timer_mutex;
  std::condition_variable timer_cv;
  bool answered = false;
  timer = std::thread([&] {
    MutexLock lock(timer_mutex);
    if (!lock.WaitFor(timer_cv, options_.load_timeout, [&] { return answered; })) {
      channel->Shutdown();
    }
  });
  Result<Frame> first = channel->Receive();
  {
    MutexLock lock(timer_mutex);
    answered = true;
  }
  timer_cv.notify_all();
  timer.join();
  if (!first.ok()) {
    int status = 0;
    for (int i = 0; i < 50; ++i) {  // a worker that closed its socket is exiting
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        MutexLock lock(mutex_);
        pid_ = 0;
        launching_.reset();
        return UnavailableError(name_ + " did not start: " + DescribeExit(status));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return fail(first.status().code() == StatusCode::kUnavailable
                    ? "no answer to the handshake within " +
                          std::to_string(options_.load_timeout.count()) + " ms"
                    : first.status().message());
  }
  if (first->has_refused()) {
    const std::string reason = first->refused().reason();
    (void)fail(reason);
    return UnavailableError(name_ + ": " + reason);
  }
  if (!first->has_ready()) {
    return fail("the worker answered the handshake with a " + std::string(ipc::FrameName(*first)) +
                " frame");
  }
  if (first->ready().protocol_version() != ipc::kProtocolVersion) {
    return fail("protocol version mismatch: this supervisor speaks version " +
                std::to_string(ipc::kProtocolVersion) + ", the worker version " +
                std::to_string(first->ready().protocol_version()));
  }
  if (first->ready().has_tensor_model()) {
    if (Status adopted = AdoptTensorReady(first->ready(), *channel); !adopted.ok()) {
      (void)fail(adopted.message());
      return Status(adopted.code(), name_ + ": " + adopted.message());
    }
  }
  if (Status mirrored = MirrorKv(first->ready(), channel); !mirrored.ok()) {
    return fail(mirrored.message());
  }
  MutexLock lock(mutex_);
  max_request_tokens_ = first->ready().max_request_tokens();
  stats_.max_request_tokens = max_request_tokens_;
  committed_bytes_ = first->ready().committed_bytes();
  launching_.reset();
  channel_ = std::move(channel);
  last_heartbeat_ = Clock::now();
  spdlog::info("{} runs in worker process {} (loaded in {:.2f} s)", name_, pid,
               first->ready().load_seconds());
  return Status::Ok();
}

std::string WorkerClient::DescribeExit(int wait_status) const {
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    const char* name = ::sigabbrev_np(sig);
    return "the worker was killed by signal " + std::to_string(sig) +
           (name != nullptr ? std::string(" (SIG") + name + ")" : std::string());
  }
  if (WIFEXITED(wait_status)) {
    return "the worker exited with status " + std::to_string(WEXITSTATUS(wait_status));
  }
  return "the worker ended";
}

}  // namespace pier::serving
