// Scheduler: decides, step by step, which sequences run and with how many tokens.
//
// Iteration-level continuous batching. A sequence is a token list (prompt, then generated
// tokens) of which the first `num_computed` have K/V in the cache. Each step:
//   1. Plan() (const) orders every live sequence by rank -- effective priority class (the
//      request's class raised one class per `aging_steps` steps since arrival, up to high --
//      the top class stays the critical requests' own, so they may always preempt; a sequence
//      Demote()d past its queue deadline comes after every class), then its tenant's virtual
//      time (weighted fair share of tokens between tenants, fair_share.h), then deadline
//      (earliest first), then arrival -- and walks that order under the token budget
//      (max_batched_tokens) and the running limit (max_seqs). With `reserved_share`, a share
//      of the running slots, of the token budget and of the KV blocks is kept for the top
//      class: sequences of other classes are not admitted into it (nor given its tokens), so
//      a critical request starts at the next step without preempting anyone. A critical
//      prompt is read whole (within the budget) even beside decodes, and while one is to be
//      read no other prompt is read that step (decodes go on). A running sequence
//      gets its remaining tokens up to the budget (a decode is 1 token; a prompt is ingested in
//      chunks, at most prefill_chunk_while_decoding tokens while others decode, so running streams
//      keep producing while a long prompt is read). A waiting sequence is admitted when its first
//      chunk's blocks are available, reusing the cached blocks of its longest cached prefix.
//      When blocks run short, running sequences are preempted, lowest rank (latest arrival)
//      first: by swap when a SwapSpace with room is configured, else by recompute; a waiting
//      sequence may preempt only running ones of a strictly lower effective class (no
//      thrashing between equals). A running sequence about to write a block it shares with a
//      forked sibling needs one more block (copy-on-write). The plan is exact (it simulates
//      reference counts): Apply never runs out of blocks.
//   2. Apply(plan) mutates, in this order: swapped-out sequences copy their blocks to host slots
//      and release them (num_computed kept); recompute victims release theirs (full blocks stay
//      in the prefix cache) and go back to waiting with num_computed = 0; admitted ones take
//      their cached blocks; then each scheduled sequence copies the shared blocks it will write,
//      gets its new blocks and, if swapped in, its host slots copied back. It returns the
//      model-runner Batch.
//   3. Commit(plan) after the runner's step: advances num_computed, names newly full blocks in
//      the prefix index and says which sequences reached the end of their tokens (and so
//      sample). The engine then AppendToken()s or Remove()s them.
// A preempted sequence keeps its tokens; recomputing them gives the same K/V (batch
// invariance of the runner), so it resumes with exactly the tokens it would have produced.
//
// Ownership: owns the sequences' block tables and the host-slot assignment; borrows the
// BlockManager, SwapSpace and BlockCopier (which must outlive it). Thread-safety: none; the engine
// thread owns it.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/kv/block_manager.h"
#include "engine/request.h"
#include "engine/runner/batch.h"
#include "engine/scheduler/fair_share.h"

namespace pier::engine {

// Host memory for swapped-out K/V, in block-sized slots. The engine implements it over the
// KvStore; the scheduler decides which slots hold what.
class SwapSpace {
 public:
  virtual ~SwapSpace() = default;
  virtual int64_t num_slots() const = 0;
  // Queues a copy of KV block `block` into host slot `slot`, and back (in order, on a copy
  // stream of their own on a GPU).
  virtual void CopyOut(int32_t block, int64_t slot) = 0;
  virtual void CopyIn(int64_t slot, int32_t block) = 0;
  // Blocks until every queued copy is done: the scheduler calls it once per step that
  // swapped, before the step's batch (which may write blocks just swapped out, or read blocks
  // just swapped in) goes to the runner.
  virtual void Wait() {}
};

// Copies one KV block's contents to another (copy-on-write of shared blocks).
class BlockCopier {
 public:
  virtual ~BlockCopier() = default;
  virtual void CopyBlock(int32_t from, int32_t to) = 0;
};

struct SchedulerOptions {
  int64_t max_batched_tokens = 512;  // tokens computed per step, all sequences together
  int64_t max_seqs = 64;             // running sequences at once
  int64_t max_prefill_chunk = 0;     // tokens of one prompt per step; 0: up to the budget
  // Tokens of one prompt per step while other sequences decode (0: no other cap), so that a
  // long prompt does not stretch every running stream's step: on 2 cores a 512-token chunk at
  // a 4,000-token context takes about 3 s (4 streams next to a 4,000-token prompt: median gap
  // 1.7 s uncapped, 0.3 s at 64, for a 40% longer time to the prompt's first token). Prompts
  // still share the whole budget among themselves, and a prompt alone gets all of it.
  int64_t prefill_chunk_while_decoding = 64;
  int64_t aging_steps = 256;  // steps a sequence waits per class it is raised; 0: none
  bool enable_prefix_caching = true;
  // Preempt by swapping K/V to the SwapSpace when it has room (else by recompute).
  bool preempt_by_swap = false;
  // Share (0 .. 0.5) of max_seqs, max_batched_tokens and the KV capacity only critical
  // sequences may take, each rounded down but at least one when there is more than one (5% of
  // 16 slots is one). A sequence of another class
  // alone in the engine may still take the reserved blocks, so nothing waits forever.
  double reserved_share = 0;
  // false: first come, first served -- classes, tenants, deadlines and the reserve are
  // ignored (the QoS-off baseline of the benchmarks).
  bool qos = true;
  // The device's fair-share ledger, shared with the other models on the device (fair_share.h);
  // null: this scheduler keeps its own.
  std::shared_ptr<FairShareLedger> fair_share_ledger = nullptr;
  // The model's KV groups (kv_groups.h): block tables hold one entry per group for each
  // block_size positions, and a sliding group's entries wholly before its window are
  // released (kNoBlock) once the sequence has moved past them. Empty: the plain table.
  KvGroups kv_groups = {};
};

struct SequenceSpec {
  int64_t id = 0;               // unique among live sequences
  std::vector<int32_t> tokens;  // [n_prompt] (or prompt plus tokens already generated)
  Priority priority = Priority::kNormal;
  std::optional<TimestampUs> deadline_us;
  // Earlier is served first among equals; the scheduler's own arrival counter breaks ties.
  TimestampUs arrival_us = 0;
  // Every prompt position's logits are wanted (prompt logprobs): spans over the prompt ask
  // for all rows, and the prefix cache is not read.
  bool prompt_logits = false;
  // Fair share: the tenant the tokens are charged to and its weight (> 0).
  std::string tenant = {};
  double tenant_weight = 1;
};

struct ScheduledSequence {
  int64_t id = 0;
  int64_t n_tokens = 0;  // tokens computed this step, from num_computed
  // Of which proposed tokens (SetDraft) after a decode's one token: positions whose logits
  // verify the proposal; their K/V count as computed only once AppendToken(computed) says so.
  int64_t draft_tokens = 0;
  bool admit = false;                  // was waiting
  bool swap_in = false;                // admit: its K/V come back from host slots (no recompute)
  std::vector<int32_t> cached_blocks;  // admit: prefix-cache blocks taken over
  int64_t new_blocks = 0;              // blocks allocated for this step
};

struct StepPlan {
  int64_t step = 0;
  std::vector<ScheduledSequence> sequences;  // in rank order
  std::vector<int64_t> preempted;            // ids, preempted by recompute before the step
  std::vector<int64_t> swapped_out;          // ids, preempted by swap before the step
  int64_t num_tokens() const;
  bool empty() const { return sequences.empty() && preempted.empty() && swapped_out.empty(); }
};

// What a sequence computed in a step (Commit's answer), in plan order.
struct StepResult {
  int64_t id = 0;
  // The span reached the sequence's last token: the logits row(s) give its next token.
  bool samples = false;
  // The proposed tokens the span carried after that token (ScheduledSequence::draft_tokens of
  // them): row j's logits give the token after draft[j - 1]. Empty without speculation.
  std::vector<int32_t> draft;
};

struct SchedulerStats {
  int64_t running = 0;
  int64_t waiting = 0;  // not counting swapped
  int64_t swapped = 0;
  int64_t swap_outs = 0;
  int64_t cow_copies = 0;  // shared blocks copied before a write
  int64_t preemptions = 0;
  int64_t prompt_tokens_admitted = 0;  // counting recomputed ones
  int64_t prompt_tokens_cached = 0;    // of which served by the prefix cache
  int64_t admissions = 0;              // first admissions of sequences (not re-admissions)
  // Waiting sequences (queued, preempted or swapped) per requested class, critical first.
  std::array<int64_t, 4> waiting_by_class = {0, 0, 0, 0};
  int64_t running_critical = 0;  // running critical sequences (the reserve's users)
  int64_t reserved_seqs = 0;     // slots, tokens and blocks kept for the top class
  int64_t reserved_tokens = 0;
  int64_t reserved_blocks = 0;
};

class Scheduler {
 public:
  // `swap` (optional, borrowed) is used when options.preempt_by_swap; `copier` (borrowed) is
  // needed once sequences are forked.
  Scheduler(const SchedulerOptions& options, BlockManager* blocks, SwapSpace* swap = nullptr,
            BlockCopier* copier = nullptr);
  // Leaves the ledger: its live sequences stop counting for their tenants.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a new sequence (waiting). PIER_CHECK: id unused, tokens non-empty.
  void Add(SequenceSpec spec);
  // A new running sequence `child` sharing every block and token of running sequence `parent`
  // (parallel samples of one prompt). A shared block is copied before either writes it.
  void Fork(int64_t parent, int64_t child);
  // Drops a sequence in any state and releases every block it holds. No-op when unknown.
  void Remove(int64_t id);

  [[nodiscard]] StepPlan Plan() const;
  // Mutates per the plan (preempt, take cached blocks, allocate) and returns the batch the
  // runner computes: one span per scheduled sequence, in plan order.
  [[nodiscard]] Batch Apply(const StepPlan& plan);
  // The runner computed `plan`'s batch.
  std::vector<StepResult> Commit(const StepPlan& plan);
  // The runner failed `plan`'s batch: the step ends with no position computed and no block
  // named in the prefix index (their K/V may never have been written; a later prompt must not
  // reuse them). The caller then removes or retries the sequences.
  void CommitFailed(const StepPlan& plan);
  // With QoS: `plan` reads no prompt of the top class, so it may stop early for a critical
  // request arriving while it runs (Batch::stop_early; the caller then ends it with
  // CommitFailed). A step reading a critical prompt runs to its end: stopping it would only
  // delay one critical request for another; so does every step while a critical sequence
  // waits, or while every slot is held by critical ones (a newcomer would not start sooner).
  bool MayStopForTopClass(const StepPlan& plan) const;
  // Between steps: preempts (by recompute) every running sequence holding a block with id >=
  // first_block, so a KV arena can drop its last chunks. Returns their ids.
  std::vector<int64_t> PreemptHoldingBlocksFrom(int32_t first_block);
  // Waiting sequences.
  int64_t NumWaiting() const;
  // Blocks the first-ranked waiting sequence lacks to hold its whole table (every token it
  // has) beyond the blocks free or cached now; 0 when none waits. An elastic cache grows by
  // this much at once, so that a grant lets it start rather than leave it holding part of
  // what it needs (two models each holding part would take chunks from each other in turn).
  int64_t BlocksLackedByFirstWaiting() const;
  // The most urgent class (as requested, before aging) among running sequences, and among
  // waiting ones (queued, preempted or swapped); nullopt when there are none.
  std::optional<Priority> MostUrgentRunning() const;
  std::optional<Priority> MostUrgentWaiting() const;
  // A waiting sequence past its queue deadline that is to wait on rather than be refused
  // (the delay action): it now ranks after every sequence not demoted. No-op when unknown.
  void Demote(int64_t id);
  // Whether the sequence has been admitted at least once (its work started).
  bool EverAdmitted(int64_t id) const { return Get(id).ever_admitted; }
  // The fair-share clock of class `priority` (the device's, when its ledger is shared).
  double FairShareClock(Priority priority) const { return ledger_->Clock(priority); }
  // The ledger itself: set at construction, thread-safe, so other threads may read it.
  const std::shared_ptr<FairShareLedger>& ledger() const { return ledger_; }
  // Every known tenant of every class with its waiting sequences counted.
  std::vector<TenantShare> TenantShares() const;
  // Appends the token sampled for sequence `id` (to be computed next step). `computed`: the
  // token equals the next proposed token its latest step verified, so its K/V are already
  // written (speculative decoding): it counts as computed at once. PIER_CHECK for `computed`
  // when every token before it is not computed.
  void AppendToken(int64_t id, int32_t token, bool computed = false);
  // Speculative decoding: tokens proposed to follow a decoding sequence's last token, computed
  // beside it in the next step (as far as the step's token budget and the free KV blocks
  // allow: a proposal never preempts anyone nor takes the last blocks another sequence's one
  // token needs) with a logits row each. Cleared by the step's Commit/CommitFailed. Ignored
  // for a sequence that does not decode at the next step.
  void SetDraft(int64_t id, std::vector<int32_t> draft);
  // After a verified step's AppendToken calls: gives back the blocks past the sequence's last
  // token, which held only rejected proposals' K/V.
  void ReleaseBlocksPastEnd(int64_t id);

  bool HasWork() const { return !sequences_.empty(); }
  bool IsRunning(int64_t id) const;
  bool Contains(int64_t id) const { return sequences_.contains(id); }
  std::span<const int32_t> Tokens(int64_t id) const;
  int64_t NumComputed(int64_t id) const;
  std::span<const int32_t> BlockTable(int64_t id) const;
  // Prompt tokens served from the prefix cache at the sequence's latest admission.
  int64_t CachedTokens(int64_t id) const;
  SchedulerStats Stats() const;
  int64_t step() const { return step_; }
  const SchedulerOptions& options() const { return options_; }
  // Adaptive batching (the engine, between steps): this step's token budget for every class but
  // the top one (which keeps max_batched_tokens) and the prompt chunk beside decodes.
  void SetStepLimits(int64_t max_batched_tokens, int64_t prefill_chunk_while_decoding);
  // The step's token budget (SetStepLimits; else max_batched_tokens).
  int64_t step_budget() const {
    return step_budget_ > 0 ? step_budget_ : options_.max_batched_tokens;
  }
  // Whether some running sequence decodes (its prompt is in the cache).
  bool AnyDecoding() const;

 private:
  struct Sequence {
    SequenceSpec spec;
    std::vector<int32_t> tokens;
    int64_t num_prompt = 0;
    int64_t arrival_order = 0;
    int64_t arrival_step = 0;
    int64_t num_computed = 0;
    bool running = false;
    // n_groups entries per block_size positions (kv_groups.h), kNoBlock where released.
    std::vector<int32_t> block_table;
    std::vector<BlockHash> hashes;  // chained hashes of the full blocks of tokens
    int64_t num_registered = 0;     // leading block_size-position blocks named in the index
    int64_t num_trimmed = 0;        // leading ones whose sliding groups' entries are released
    int64_t cached_tokens = 0;
    // Swapped out: entry i of the table is in host_slots[i] (-1 for a released entry).
    std::vector<int64_t> host_slots;
    bool ever_admitted = false;
    bool demoted = false;
    std::vector<int32_t> draft;  // SetDraft: proposed tokens for the next step
  };
  struct RankKey {
    int effective_class;
    double virtual_time;
    TimestampUs deadline;
    TimestampUs arrival_us;
    int64_t arrival_order;
    auto operator<=>(const RankKey&) const = default;
  };
  // What the top class keeps (SchedulerOptions::reserved_share), now.
  struct Reserve {
    int64_t seqs = 0;
    int64_t tokens = 0;
    int64_t blocks = 0;
  };
  Reserve ReserveNow() const;
  RankKey Rank(const Sequence& s) const;
  int EffectiveClass(const Sequence& s) const;
  // Table entries (all groups) of a sequence's first n_tokens positions, released or not.
  int64_t BlocksFor(int64_t n_tokens) const;
  // Blocks a swapped-out sequence takes back to compute up to `end`.
  int64_t SwapInBlocks(const Sequence& s, int64_t end) const;
  // The table of the longest cached prefix of s (at most max_blocks of block_size positions)
  // every group can resume from: a full group's blocks from position 0, a sliding group's
  // from its window on (kNoBlock before).
  std::vector<int32_t> MatchCachedPrefix(const Sequence& s, int64_t max_blocks) const;
  // Releases the sliding groups' entries that a sequence at num_computed no longer reads.
  void TrimToWindows(Sequence& s);
  // Names the sequence's newly full computed blocks in the prefix index.
  void RegisterFullBlocks(Sequence& s);
  // The end of every step: the fair-share clocks advance over the backlogged tenants.
  void EndStep();
  int64_t n_groups() const { return std::max<int64_t>(1, options_.kv_groups.n_groups()); }
  Sequence& Get(int64_t id);
  const Sequence& Get(int64_t id) const;
  void Preempt(Sequence& s);
  void SwapOut(Sequence& s);

  SchedulerOptions options_;
  BlockManager* blocks_;             // not owned
  SwapSpace* swap_;                  // not owned; may be null
  BlockCopier* copier_;              // not owned; may be null
  std::vector<int64_t> free_slots_;  // host slots not holding a swapped block
  std::map<int64_t, Sequence> sequences_;
  int64_t next_arrival_ = 0;
  int64_t step_ = 0;
  int64_t preemptions_ = 0;
  int64_t swap_outs_ = 0;
  int64_t cow_copies_ = 0;
  int64_t prompt_tokens_admitted_ = 0;
  int64_t prompt_tokens_cached_ = 0;
  int64_t admissions_ = 0;
  int64_t step_budget_ = 0;                  // 0: options_.max_batched_tokens
  std::shared_ptr<FairShareLedger> ledger_;  // per requested class; maybe the device's
  int ledger_id_ = 0;
};

}  // namespace pier::engine
