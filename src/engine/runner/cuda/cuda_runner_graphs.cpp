// The CUDA runner's decode steps through CUDA graphs: a graph per batch bucket and context
// tier, captured at first use into memory that never moves, replayed with padded inputs
// (cuda_runner_internal.h, cuda_runner.h's CudaRunnerOptions::use_graphs).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <vector>

#include "engine/runner/cuda/cuda_runner_internal.h"
#include "kernels/cuda/attention_math.h"

namespace pier::engine::cuda_runner {

int64_t CudaLlamaRunner::Bucket(int64_t n) {
  if (n <= 1) return 1;
  if (n <= 2) return 2;
  if (n <= 4) return 4;
  return (n + 7) / 8 * 8;
}

int64_t CudaLlamaRunner::ContextTier(int64_t max_context) const {
  for (int64_t tier : {int64_t{512}, int64_t{2048}}) {
    if (max_context <= tier && tier < graph_max_context_) return tier;
  }
  return graph_max_context_;
}

bool CudaLlamaRunner::GraphEligible(const Batch& batch, int64_t n_tok, int64_t max_context) const {
  if (!options_.use_graphs || graphs_disabled_ || n_tok > kMaxGraphBatch ||
      max_context > graph_max_context_) {
    return false;
  }
  for (const SequenceSpan& seq : batch.sequences) {
    if (seq.tokens.size() != 1 || seq.logits != LogitsWanted::kLast) return false;
  }
  return !eager_keys_.contains({Bucket(n_tok), ContextTier(max_context)});
}

// A decode batch padded to its bucket in the fixed shapes a captured graph reads: every row's
// block table gets tier / 16 entries, the split index SplitsFor(tier - 1) slots per row
// (unused ones -1), and padding rows sit at position -1 (they write no K/V, attend nothing, and
// their logits are dropped).
CudaLlamaRunner::StepInputs CudaLlamaRunner::GraphInputs(const Batch& batch, int64_t bucket,
                                                         int64_t tier) const {
  const int64_t max_blocks = tier / cuda::attn::kBlockPositions;
  const int64_t max_splits = cuda::attn::SplitsFor(tier - 1);
  StepInputs in;
  in.ids.assign(static_cast<size_t>(bucket), 0);
  in.positions.assign(static_cast<size_t>(bucket), -1);
  in.offsets.resize(static_cast<size_t>(bucket));
  in.tables.assign(static_cast<size_t>(bucket * max_blocks), 0);
  for (int64_t r = 0; r < bucket; ++r) in.offsets[r] = static_cast<int32_t>(r * max_blocks);
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceSpan& seq = batch.sequences[s];
    in.ids[s] = seq.tokens[0];
    in.positions[s] = static_cast<int32_t>(seq.first_position);
    const int64_t n_blocks = seq.first_position / cuda::attn::kBlockPositions + 1;
    std::copy(seq.block_table.begin(), seq.block_table.begin() + n_blocks,
              in.tables.begin() + static_cast<int64_t>(s) * max_blocks);
  }
  FillCosSin(in);
  in.split_first.resize(static_cast<size_t>(bucket));
  in.split_query.assign(static_cast<size_t>(bucket * max_splits), -1);
  cuda::attn::IndexSplits(in.positions.data(), bucket, in.split_first.data(),
                          in.split_query.data());
  return in;
}

bool CudaLlamaRunner::SetUpGraphMemory() {
  if (graph_workspace_ && graph_host_.ptr != nullptr) return true;
  const StepLayout largest = GraphWorkspaceLayout(dims_);
  const size_t up_bytes = AlignUp(InputBytes(largest));  // every bucket's inputs fit
  const size_t host_bytes = up_bytes + static_cast<size_t>(kMaxGraphBatch * n_vocab_) * 4;
  MemoryResult<Block> workspace =
      options_.governor->Allocate(options_.workspace_owner, largest.bytes, {stream_});
  Result<HostAllocation> host = workspace.ok() ? device_.AllocatePinnedHost(host_bytes)
                                               : Result<HostAllocation>(workspace.status());
  std::string why;
  if (!workspace.ok()) {
    why = workspace.status().ToString();
  } else if (!host.ok()) {
    why = host.status().ToString();
  } else if (!host->locked) {
    // A capture may only copy from pinned memory.
    why = "no page-locked host memory for the graphs' inputs";
    device_.FreePinnedHost(*host);
  }
  if (!why.empty()) {
    graphs_disabled_ = true;
    ++graph_stats_.fallbacks;
    spdlog::warn("CUDA runner: decode steps run without graphs: {}", why);
    return false;
  }
  graph_workspace_ = std::move(workspace).value();
  graph_host_ = *host;
  graph_up_bytes_ = up_bytes;
  return true;
}

namespace {

// Ends a capture that an early return would otherwise leave open (the stream would refuse
// everything after it).
class CaptureGuard {
 public:
  CaptureGuard(cuda::CudaDevice& device, Stream stream) : device_(device), stream_(stream) {}
  ~CaptureGuard() {
    if (!open_) return;
    Result<PierCudaGraph> graph = device_.EndCapture(stream_);
    if (graph.ok()) device_.DestroyGraph(*graph);
  }
  void Opened() { open_ = true; }
  Result<PierCudaGraph> End() {
    open_ = false;
    return device_.EndCapture(stream_);
  }

 private:
  cuda::CudaDevice& device_;
  Stream stream_;
  bool open_ = false;
};

}  // namespace

Result<std::optional<StepOutput>> CudaLlamaRunner::StepWithGraph(const Batch& batch, int64_t n_tok,
                                                                 int64_t max_context) {
  // One workspace and one pinned buffer for every graph, sized for the largest, at fixed
  // addresses for as long as the graphs live; without them every step runs eagerly.
  if (!SetUpGraphMemory()) return std::optional<StepOutput>();
  const int64_t bucket = Bucket(n_tok);
  const int64_t tier = ContextTier(max_context);
  const int64_t max_blocks = tier / cuda::attn::kBlockPositions;
  const int64_t max_splits = cuda::attn::SplitsFor(tier - 1);
  const StepInputs in = GraphInputs(batch, bucket, tier);
  const StepLayout L = LayOut(bucket, bucket, bucket * max_blocks, bucket * max_splits);
  auto* base = static_cast<uint8_t*>(graph_workspace_.data());
  auto* staging = static_cast<uint8_t*>(graph_host_.ptr);
  uint8_t* host_logits = staging + graph_up_bytes_;
  PIER_RETURN_IF_ERROR(device_.Synchronize(stream_));  // the staging buffer is free again
  WriteStaging(in, L, staging);

  const std::pair<int64_t, int64_t> key{bucket, tier};
  auto found = graphs_.find(key);
  if (found == graphs_.end()) {
    std::vector<int64_t> all_rows(static_cast<size_t>(bucket));
    for (int64_t r = 0; r < bucket; ++r) all_rows[r] = r;
    CaptureGuard guard(device_, stream_);
    Status captured = device_.BeginCapture(stream_);
    if (captured.ok()) {
      guard.Opened();
      captured = QueueUploads(L, base, staging);
    }
    if (captured.ok())
      captured = EnqueueLayers(L, base, bucket, bucket * max_splits, nullptr).status();
    if (captured.ok()) captured = EnqueueHead(L, base, bucket, all_rows, host_logits);
    Result<PierCudaGraph> graph = captured.ok() ? guard.End() : Result<PierCudaGraph>(captured);
    if (!graph.ok()) {
      ++graph_stats_.fallbacks;
      eager_keys_.insert(key);
      spdlog::warn(
          "CUDA runner: capturing the graph of decode batch {} (contexts to {}) failed ({}); "
          "that size runs without a graph",
          bucket, tier, graph.status().ToString());
      return std::optional<StepOutput>();
    }
    ++graph_stats_.captures;
    found = graphs_.emplace(key, *graph).first;
  }
  PIER_RETURN_IF_ERROR(device_.LaunchGraph(found->second, stream_));
  ++graph_stats_.launches;
  PIER_RETURN_IF_ERROR(device_.Synchronize(stream_));
  StepOutput output;
  output.n_vocab = n_vocab_;
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    output.rows.push_back({static_cast<int32_t>(s), batch.sequences[s].first_position});
  }
  output.logits = std::span<const float>(reinterpret_cast<const float*>(host_logits),
                                         static_cast<size_t>(n_tok * n_vocab_));
  return std::optional<StepOutput>(std::move(output));
}

}  // namespace pier::engine::cuda_runner
