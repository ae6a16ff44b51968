// `pier run --memory-budget/--device-memory` and `pier inspect --memory` on the default model,
// run as a user would (the built binary, in a child process), against engine::EstimateMemory
// and the governor of an in-process LocalModel: admission refuses a model that does not fit
// with the numbers, runs one that does within its budget, rejects bad values, inspect shows
// what the governor then charges, and the process RSS stays within the governor's peak plus
// a stated fixed overhead.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/runner/local_model.h"
#include "memory/byte_size.h"
#include "model/gguf_file.h"
#include "serving/device_set.h"

namespace pier::engine {
namespace {

struct ChildResult {
  int exit_code = -1;
  std::string out;
  std::string err;
  uint64_t max_rss_bytes = 0;  // the child's peak resident set (wait4's ru_maxrss)
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs PIER_BINARY with `args`, stdout and stderr to files, and waits for it with wait4 so
// that its own peak RSS comes back.
ChildResult RunPier(const std::vector<std::string>& args) {
  const std::string out_path = ::testing::TempDir() + "/memory_budget_stdout.txt";
  const std::string err_path = ::testing::TempDir() + "/memory_budget_stderr.txt";
  std::vector<std::string> argv_strings = {PIER_BINARY};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  ChildResult result;
  const pid_t pid = fork();
  if (pid == 0) {
    const int in = open("/dev/null", O_RDONLY);
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || err < 0) _exit(127);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  if (pid < 0) return result;
  int status = 0;
  struct rusage usage {};
  if (wait4(pid, &status, 0, &usage) != pid) return result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.max_rss_bytes = static_cast<uint64_t>(usage.ru_maxrss) * 1024;  // KiB on Linux
  result.out = ReadAll(out_path);
  result.err = ReadAll(err_path);
  return result;
}

// The "memory: {json}" line of --memory-stats.
nlohmann::json MemoryStats(const std::string& err) {
  const size_t at = err.find("memory: {");
  if (at == std::string::npos) return nullptr;
  const size_t end = err.find('\n', at);
  return nlohmann::json::parse(err.substr(at + 8, end - at - 8), nullptr, false);
}

std::unique_ptr<model::GgufFile> OpenDefault() {
  auto file = model::GgufFile::Open(PIER_DEFAULT_MODEL_PATH);
  PIER_CHECK(file.ok(), file.status().ToString());
  return std::move(file).value();
}

// The options `pier run --threads 2` (default --ctx 4096) and `pier inspect --memory
// --threads 2` use.
LocalModelOptions RunOptions(int64_t ctx = 4096) {
  LocalModelOptions options;
  options.threads = 2;
  options.kv_tokens = ctx;
  options.max_step_tokens = 512;
  options.max_logit_rows = 1;
  return options;
}

std::vector<std::string> RunArgs(std::vector<std::string> extra) {
  std::vector<std::string> args = {"run", "--threads",     "2", "-p", "Hello there", "-n",
                                   "4",   "--temperature", "0"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(MemoryBudgetTest, InspectMemoryShowsTheEstimate) {
  auto file = OpenDefault();
  for (int64_t ctx : {4096, 1000}) {
    auto estimate = EstimateMemory(*file, RunOptions(ctx));
    ASSERT_TRUE(estimate.ok()) << estimate.status().ToString();
    const ChildResult r = RunPier({"inspect", "--memory", "--json", "--threads", "2", "--ctx",
                                   std::to_string(ctx), PIER_DEFAULT_MODEL_PATH});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["context_tokens"], estimate->kv_tokens);
    EXPECT_EQ(j["mapped_weight_bytes"], estimate->mapped_weight_bytes);
    EXPECT_EQ(j["packed_weight_bytes"], estimate->packed_weight_bytes);
    EXPECT_EQ(j["converted_weight_bytes"], estimate->small_weight_bytes);
    EXPECT_EQ(j["kv_bytes_per_token"], estimate->kv_bytes_per_token);
    EXPECT_EQ(j["kv_bytes"], estimate->kv_bytes);
    EXPECT_EQ(j["workspace_bytes"], estimate->workspace_bytes);
    EXPECT_EQ(j["total_bytes"], estimate->total_bytes());
    EXPECT_EQ(estimate->total_bytes(),
              estimate->weight_bytes() + estimate->kv_bytes + estimate->workspace_bytes);
    // KV for the context is at least the per-token bytes times the (block-rounded) tokens.
    EXPECT_GE(estimate->kv_bytes, estimate->kv_bytes_per_token * estimate->kv_tokens);
    EXPECT_GE(estimate->kv_tokens, ctx);

    const ChildResult text =
        RunPier({"inspect", "--memory", "--threads", "2", "--ctx", std::to_string(ctx)});
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_NE(text.out.find("total:"), std::string::npos) << text.out;
    EXPECT_NE(text.out.find(std::to_string(estimate->total_bytes()) + " bytes"), std::string::npos)
        << text.out;
  }
  // 1000 tokens need less KV than 4096.
  EXPECT_LT(EstimateMemory(*file, RunOptions(1000))->kv_bytes,
            EstimateMemory(*file, RunOptions(4096))->kv_bytes);
}

TEST(MemoryBudgetTest, InspectMemorySaysWhetherRunWouldFit) {
  auto file = OpenDefault();
  const MemoryEstimate e = *EstimateMemory(*file, RunOptions());
  for (uint64_t budget : {e.total_bytes() - 1, e.total_bytes()}) {
    const std::string flag = std::to_string(budget);
    const ChildResult inspect =
        RunPier({"inspect", "--memory", "--json", "--threads", "2", "--memory-budget", flag});
    ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
    const nlohmann::json j = nlohmann::json::parse(inspect.out);
    EXPECT_EQ(j["budget_bytes"], budget);
    const bool fits = j["fits"].get<bool>();
    EXPECT_EQ(fits, budget >= e.total_bytes());
    const ChildResult run = RunPier(RunArgs({"--memory-budget", flag}));
    EXPECT_EQ(run.exit_code, fits ? 0 : 1) << run.err;
  }
  const ChildResult bad =
      RunPier({"inspect", "--memory", "--memory-budget", "2GiB", "--device-memory", "1GiB"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("more than the device's capacity"), std::string::npos) << bad.err;
}

// The default model's options for a `ctx`-token context.
LocalModelOptions DefaultModelOptions(int64_t ctx) {
  LocalModelOptions options = RunOptions(ctx);
  options.path = PIER_DEFAULT_MODEL_PATH;
  return options;
}

// A device set of its own whose CPU budget is `bytes`.
Result<std::unique_ptr<serving::DeviceSet>> DevicesWithBudget(uint64_t bytes) {
  serving::DeviceSetOptions options;
  options.cpu_budget = BudgetSpec::Bytes(bytes);
  return serving::DeviceSet::Create(options);
}

TEST(MemoryBudgetTest, GovernorChargesWhatInspectShows) {
  // A 512-token context filled by one 512-token step: the largest step the estimate plans
  // for, attending over the whole context.
  const LocalModelOptions options = DefaultModelOptions(512);
  auto estimate = EstimateMemory(*OpenDefault(), options);
  ASSERT_TRUE(estimate.ok()) << estimate.status().ToString();
  // A device set of its own: a budget of exactly the estimate.
  auto devices = DevicesWithBudget(estimate->total_bytes());
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  auto model = LocalModel::Open(options, &(*devices)->cpu_governor());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  MemoryGovernor& governor = (*model)->governor();

  SequenceSpan span;
  for (int32_t i = 0; i < 512; ++i) span.tokens.push_back(1 + (i * 37) % 1000);
  for (int32_t b = 0; b < 512 / 16; ++b) span.block_table.push_back(b);
  span.logits = LogitsWanted::kLast;
  auto out = (*model)->runner().Step(Batch{{span}});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->logits.size(), static_cast<size_t>(out->n_vocab));

  const GovernorStats stats = governor.Stats();
  ASSERT_EQ(stats.owners.size(), 3u);
  for (const OwnerStats& o : stats.owners) {
    SCOPED_TRACE(o.name);
    if (o.name.ends_with("/weights")) {
      // The mapped tensors as an external charge, plus blocks: the packed matrices and the
      // f32 copies of the small tensors.
      EXPECT_EQ(o.external_bytes, estimate->mapped_weight_bytes);
      EXPECT_GE(o.block_bytes, estimate->tensor_bytes - estimate->mapped_weight_bytes);
      EXPECT_LE(o.peak_allocated_bytes, estimate->weight_bytes());
      EXPECT_GT(o.block_bytes, 0u);
      EXPECT_EQ(o.reserved_bytes, estimate->weight_bytes());
    } else if (o.name.ends_with("/kv")) {
      EXPECT_EQ(o.allocated_bytes, estimate->kv_bytes_per_token * estimate->kv_tokens);
      EXPECT_LE(o.peak_allocated_bytes, estimate->kv_bytes);
      EXPECT_EQ(o.reserved_bytes, estimate->kv_bytes);
    } else {
      ASSERT_TRUE(o.name.ends_with("/workspace"));
      // The estimate lays the step out as the runner does: the same bytes, rounded to the
      // pool's 256-byte granularity.
      EXPECT_EQ(o.peak_allocated_bytes, (estimate->workspace_step_bytes + 255) / 256 * 256);
      EXPECT_LE(o.peak_allocated_bytes, estimate->workspace_bytes);
      EXPECT_EQ(o.reserved_bytes, estimate->workspace_bytes);
    }
  }
  EXPECT_LE(stats.peak_reserved_bytes, estimate->total_bytes());
  EXPECT_LE(stats.peak_reserved_bytes, stats.budget_bytes);
  EXPECT_EQ(stats.failure_count, 0u);
}

TEST(MemoryBudgetTest, ModelsOnOneDeviceShareItsBudget) {
  // One device set, room for one model but not two: the second is refused with the numbers,
  // and once the first is gone its budget is free again.
  const LocalModelOptions options = DefaultModelOptions(512);
  auto estimate = EstimateMemory(*OpenDefault(), options);
  ASSERT_TRUE(estimate.ok()) << estimate.status().ToString();
  auto devices = DevicesWithBudget(estimate->total_bytes() * 3 / 2);
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  MemoryGovernor& governor = (*devices)->cpu_governor();

  auto first = LocalModel::Open(options, &governor);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = LocalModel::Open(options, &governor);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(second.status().message().find("is free"), std::string::npos)
      << second.status().message();
  EXPECT_EQ(governor.Stats().owners.size(), 3u) << "the refused model left no owner behind";

  first->reset();
  EXPECT_EQ(governor.Stats().owners.size(), 0u);
  EXPECT_EQ(governor.Stats().committed_bytes, 0u);
  auto again = LocalModel::Open(options, &governor);
  ASSERT_TRUE(again.ok()) << again.status().ToString();

  // Two instances that fit get owners of distinct names.
  auto big = DevicesWithBudget(estimate->total_bytes() * 5 / 2);
  ASSERT_TRUE(big.ok());
  auto a = LocalModel::Open(options, &(*big)->cpu_governor());
  auto b = LocalModel::Open(options, &(*big)->cpu_governor());
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<std::string> names;
  for (const OwnerStats& o : (*big)->cpu_governor().Stats().owners) names.push_back(o.name);
  ASSERT_EQ(names.size(), 6u);
  EXPECT_NE(names[0], names[3]);
  EXPECT_TRUE(names[3].find("#2/") != std::string::npos) << names[3];
}

TEST(MemoryBudgetTest, TooSmallBudgetExitsWithTheNumbers) {
  auto file = OpenDefault();
  const MemoryEstimate e = *EstimateMemory(*file, RunOptions());
  const uint64_t budget = e.total_bytes() - 1;
  const ChildResult r =
      RunPier(RunArgs({"--memory-budget", std::to_string(budget), "--memory-stats"}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.out, "");
  for (const std::string& needed :
       {std::string("RESOURCE_EXHAUSTED"), std::to_string(e.total_bytes()) + " bytes",
        "weights " + FormatBytes(e.mapped_weight_bytes) + " mapped + " +
            FormatBytes(e.packed_weight_bytes) + " packed",
        "KV cache for 4096 tokens " + FormatBytes(e.kv_bytes),
        FormatBytes(e.kv_bytes_per_token) + " per token",
        "workspace " + FormatBytes(e.workspace_bytes), std::to_string(budget) + " bytes",
        std::string("--memory-budget")}) {
    EXPECT_NE(r.err.find(needed), std::string::npos) << "missing '" << needed << "' in " << r.err;
  }
  EXPECT_EQ(r.err.find("memory: {"), std::string::npos) << "it must not have run";

  // A percentage of a small device: the message names the device's capacity.
  const ChildResult small =
      RunPier(RunArgs({"--device-memory", "200MiB", "--memory-budget", "90%"}));
  EXPECT_EQ(small.exit_code, 1) << small.err;
  EXPECT_NE(small.err.find("90% of a device of 200.0 MiB"), std::string::npos) << small.err;
  EXPECT_NE(small.err.find(std::to_string(e.total_bytes())), std::string::npos) << small.err;

  // A shorter context fits the same budget.
  const ChildResult shorter =
      RunPier(RunArgs({"--memory-budget", std::to_string(budget), "--ctx", "2048"}));
  EXPECT_EQ(shorter.exit_code, 0) << shorter.err;
}

TEST(MemoryBudgetTest, EnoughBudgetRunsWithinIt) {
  auto file = OpenDefault();
  const MemoryEstimate e = *EstimateMemory(*file, RunOptions());
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--memory-budget", std::to_string(e.total_bytes())},
        std::vector<std::string>{"--device-memory", "1GiB", "--memory-budget", "50%"},
        std::vector<std::string>{"--device-memory", std::to_string(e.total_bytes())}}) {
    const ChildResult r = RunPier(RunArgs([&] {
      std::vector<std::string> args = flags;
      args.push_back("--memory-stats");
      return args;
    }()));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_FALSE(r.out.empty());
    const nlohmann::json stats = MemoryStats(r.err);
    ASSERT_TRUE(stats.is_object()) << r.err;
    EXPECT_LE(stats["peak_reserved_bytes"].get<uint64_t>(), stats["budget_bytes"].get<uint64_t>());
    EXPECT_LE(stats["peak_reserved_bytes"].get<uint64_t>(), e.total_bytes());
    EXPECT_EQ(stats["estimate_bytes"].get<uint64_t>(), e.total_bytes());
  }
}

TEST(MemoryBudgetTest, BadValuesExitOneWithAReason) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--memory-budget", "-5"}, "negative"},
      {{"--memory-budget", "0"}, "zero"},
      {{"--memory-budget", "garbage"}, "expected a positive size"},
      {{"--memory-budget", "120%"}, "(0, 100]"},
      {{"--memory-budget", "0%"}, "(0, 100]"},
      {{"--memory-budget", "12 parsecs"}, "--memory-budget"},
      {{"--memory-budget", "2GiB", "--device-memory", "1GiB"}, "more than the device's capacity"},
      {{"--device-memory", "0"}, "zero"},
      {{"--memory-budget", ""}, "--memory-budget"},
      {{"--device-memory", ""}, "--device-memory"},
      {{"--device-memory", "-1GiB"}, "negative"},
      {{"--device-memory", "50%"}, "--device-memory"},
      {{"--device-memory", "lots"}, "--device-memory"},
  };
  for (const auto& [flags, reason] : cases) {
    const ChildResult r = RunPier(RunArgs(flags));
    EXPECT_EQ(r.exit_code, 1) << flags[1] << ": " << r.err;
    EXPECT_NE(r.err.find(reason), std::string::npos) << flags[1] << ": " << r.err;
    EXPECT_EQ(r.out, "") << flags[1];
  }
}

// The process's peak RSS stays within the governor's peak held bytes plus a fixed overhead.
// What the governor does not count, and the overhead covers:
//   - the GGUF file's metadata pages (header, tokenizer vocabulary and merges): the file
//     size minus its tensor bytes, read while loading the tokenizer (the pages of packed
//     tensors are released as they are packed, a few MiB at a time);
//   - kFixedOverhead: the binary's code and data and the shared libraries (libstdc++, fmt,
//     PCRE2, utf8proc; `pier inspect` alone peaks at about 7 MiB), the tokenizer's tables
//     and the chat template on the C++ heap, the sampler's vocabulary-sized vectors, thread
//     stacks and glibc's per-thread malloc arenas (touched pages only). Measured at about
//     6-15 MiB on SmolLM2-135M; 32 MiB leaves room for allocator variation.
// Mapped weights and pool segments count in RSS only as touched pages, so RSS can be below
// the governor's total (a KV cache never filled), never legitimately far above it.
TEST(MemoryBudgetTest, ProcessRssStaysWithinTheGovernorPeakPlusOverhead) {
  constexpr uint64_t kFixedOverhead = uint64_t{32} << 20;
  auto file = OpenDefault();
  const MemoryEstimate e = *EstimateMemory(*file, RunOptions());
  const uint64_t metadata_bytes = file->file_size() - e.tensor_bytes;
  std::string prompt;
  for (int i = 0; i < 60; ++i) prompt += "The quick brown fox jumps over the lazy dog. ";
  const ChildResult r =
      RunPier({"run", "--threads", "2", "-p", prompt, "-n", "16", "--temperature", "0",
               "--memory-budget", std::to_string(e.total_bytes()), "--memory-stats"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json stats = MemoryStats(r.err);
  ASSERT_TRUE(stats.is_object()) << r.err;
  const uint64_t peak = stats["peak_reserved_bytes"].get<uint64_t>();
  const uint64_t limit = peak + metadata_bytes + kFixedOverhead;
  std::cout << "pier run peak RSS " << r.max_rss_bytes << " bytes (" << FormatBytes(r.max_rss_bytes)
            << "); governor peak held " << peak << " (" << FormatBytes(peak) << "), budget "
            << stats["budget_bytes"] << "; file metadata " << metadata_bytes << "; limit " << limit
            << "; RSS - governor peak = "
            << static_cast<int64_t>(r.max_rss_bytes) - static_cast<int64_t>(peak) << "\n";
  EXPECT_LE(peak, stats["budget_bytes"].get<uint64_t>());
  EXPECT_GT(r.max_rss_bytes, 0u);
  EXPECT_LE(r.max_rss_bytes, limit);
  // The forward pass reads every weight: the mapped ones and the packed copies (as many
  // bytes as the tensors they came from) are resident.
  EXPECT_GT(e.packed_weight_bytes, 0u);
  EXPECT_GE(r.max_rss_bytes, e.tensor_bytes);
}

}  // namespace
}  // namespace pier::engine
