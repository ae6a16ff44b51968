// PagedAttention against a float64 softmax attention, and its guarantees: a token's output
// bits do not depend on the batch, the chunking, the slot or thread count, the
// implementation (portable loops for the baseline or AVX2, or AVX-512: each ISA level) or whether
// equal K/V values are stored as f32 or f16. Also the deterministic Exp it uses, against std::exp.
#include "kernels/cpu/paged_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/thread_pool.h"
#include "kernels/cpu/attention_kernel.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/kv_convert.h"
#include "tensor/float16.h"

namespace pier::kernels {
namespace {

// The levels this CPU can run: each picks its own implementation (cpu_isa.h).
std::vector<Isa> Isas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (IsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

// Restores the default level when a test ends.
struct IsaGuard {
  ~IsaGuard() { internal::SetActiveIsaForTesting(std::nullopt); }
};

const char* KvDtypeName(KvDtype dtype) {
  return dtype == KvDtype::kF16 ? "f16" : dtype == KvDtype::kQ8_0 ? "q8_0" : "f32";
}

// A plain paged store: n_blocks blocks of the layout in one buffer.
class PlainStore {
 public:
  PlainStore(const KvLayout& layout, int64_t n_blocks)
      : layout_(layout),
        n_blocks_(n_blocks),
        bytes_(static_cast<size_t>(n_blocks) * layout.bytes_per_block()) {}
  int32_t num_blocks() const { return static_cast<int32_t>(n_blocks_); }
  PagedKvView View() const {
    return PagedKvView(layout_, this, [](const void* store, int32_t block) {
      const auto* self = static_cast<const PlainStore*>(store);
      return const_cast<std::byte*>(self->bytes_.data()) +
             static_cast<size_t>(block) * self->layout_.bytes_per_block();
    });
  }
  std::byte* KeyPlane(int64_t layer, int32_t block) const { return View().KeyPlane(layer, block); }
  std::byte* ValuePlane(int64_t layer, int32_t block) const {
    return View().ValuePlane(layer, block);
  }

 private:
  KvLayout layout_;
  int64_t n_blocks_;
  std::vector<std::byte> bytes_;
};

// A store of random K/V and sequences whose blocks are scattered over it.
class Fixture {
 public:
  Fixture(KvLayout layout, const std::vector<int64_t>& seq_lengths, uint32_t seed)
      : layout_(layout), rng_(seed) {
    int64_t n_blocks = 0;
    for (int64_t len : seq_lengths) n_blocks += (len + layout.block_size - 1) / layout.block_size;
    n_blocks += 3;  // blocks no sequence uses, in between
    store_ = std::make_unique<PlainStore>(layout, n_blocks);
    std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng_);
    size_t next = 0;
    for (int64_t len : seq_lengths) {
      tables_.emplace_back();
      for (int64_t b = 0; b < (len + layout.block_size - 1) / layout.block_size; ++b) {
        tables_.back().push_back(ids[next++]);
      }
      lengths_.push_back(len);
    }
    // Every value of every block, including positions no sequence reaches: NaN there would
    // show any read past a sequence's end.
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    const int64_t plane = layout.plane_elements();
    for (int32_t b = 0; b < n_blocks; ++b) {
      for (int64_t l = 0; l < layout.n_layer; ++l) {
        for (int kv = 0; kv < 2; ++kv) {
          std::vector<float> values(static_cast<size_t>(plane));
          for (float& v : values) v = dist(rng_);
          Write(kv == 0 ? store_->KeyPlane(l, b) : store_->ValuePlane(l, b), values);
        }
      }
    }
    for (size_t s = 0; s < tables_.size(); ++s) {
      const int64_t len = lengths_[s];
      const int64_t last_block = (len - 1) / layout.block_size;
      for (int64_t p = len; p < (last_block + 1) * layout.block_size; ++p) {
        for (int64_t l = 0; l < layout.n_layer; ++l) {
          for (int kv = 0; kv < 2; ++kv) {
            std::vector<float> nan_row(static_cast<size_t>(layout.row_elements()),
                                       std::numeric_limits<float>::quiet_NaN());
            std::byte* plane_ptr = kv == 0 ? store_->KeyPlane(l, tables_[s][last_block])
                                           : store_->ValuePlane(l, tables_[s][last_block]);
            WriteRow(plane_ptr, p % layout.block_size, nan_row);
          }
        }
      }
    }
  }

  // Copies this store's values into another store of the same shape (other dtype): both
  // then hold the same values, exactly when the copy is f32 (or from an f32 store of
  // values that f16 represents).
  void CopyValuesTo(Fixture& other) const {
    for (int32_t b = 0; b < store_->num_blocks(); ++b) {
      for (int64_t l = 0; l < layout_.n_layer; ++l) {
        other.Write(other.store_->KeyPlane(l, b), ReadPlane(store_->KeyPlane(l, b)));
        other.Write(other.store_->ValuePlane(l, b), ReadPlane(store_->ValuePlane(l, b)));
      }
    }
    other.tables_ = tables_;
    other.lengths_ = lengths_;
  }

  // K (kv = 0) or V (kv = 1) at a sequence's position, as f32: [head_dim].
  const float* Row(int kv, int64_t layer, int64_t seq, int64_t pos, int64_t kv_head,
                   std::vector<float>& buf) const {
    const int32_t block = tables_[seq][pos / layout_.block_size];
    const std::byte* plane =
        kv == 0 ? store_->KeyPlane(layer, block) : store_->ValuePlane(layer, block);
    const std::byte* head =
        plane + (pos % layout_.block_size) * layout_.row_bytes() + kv_head * layout_.head_bytes();
    buf.resize(static_cast<size_t>(layout_.head_dim));
    ReadValues(head, layout_.head_dim, buf.data());
    return buf.data();
  }

  PagedKvView store() const { return store_->View(); }
  const KvLayout& layout() const { return layout_; }
  const int32_t* table(int64_t seq) const { return tables_[seq].data(); }
  int64_t length(int64_t seq) const { return lengths_[seq]; }
  std::mt19937& rng() { return rng_; }

 private:
  void Write(std::byte* plane, const std::vector<float>& values) const {
    for (int64_t r = 0; r < layout_.block_size; ++r) {
      WriteRow(plane, r,
               std::vector<float>(values.begin() + r * layout_.row_elements(),
                                  values.begin() + (r + 1) * layout_.row_elements()));
    }
  }
  void WriteRow(std::byte* plane, int64_t r, const std::vector<float>& row) const {
    const int64_t n = layout_.row_elements();
    std::byte* dst = plane + r * layout_.row_bytes();
    switch (layout_.dtype) {
      case KvDtype::kF32:
        std::memcpy(dst, row.data(), n * sizeof(float));
        break;
      case KvDtype::kF16:
        ConvertF32ToF16(row.data(), n, reinterpret_cast<uint16_t*>(dst));
        break;
      case KvDtype::kQ8_0:
        ConvertF32ToQ8_0(row.data(), n, dst);
        break;
    }
  }
  // n stored values from src (a row or a head) as f32.
  void ReadValues(const std::byte* src, int64_t n, float* out) const {
    switch (layout_.dtype) {
      case KvDtype::kF32:
        std::memcpy(out, src, n * sizeof(float));
        break;
      case KvDtype::kF16:
        for (int64_t d = 0; d < n; ++d) {
          uint16_t h;
          std::memcpy(&h, src + 2 * d, 2);
          out[d] = Fp16ToFp32(h);
        }
        break;
      case KvDtype::kQ8_0:
        for (int64_t b = 0; b < n / 32; ++b) {
          uint16_t h;
          std::memcpy(&h, src + 34 * b, 2);
          for (int i = 0; i < 32; ++i) {
            out[32 * b + i] =
                static_cast<float>(static_cast<int8_t>(src[34 * b + 2 + i])) * Fp16ToFp32(h);
          }
        }
        break;
    }
  }
  std::vector<float> ReadPlane(const std::byte* plane) const {
    std::vector<float> values(static_cast<size_t>(layout_.plane_elements()));
    for (int64_t r = 0; r < layout_.block_size; ++r) {
      ReadValues(plane + r * layout_.row_bytes(), layout_.row_elements(),
                 values.data() + r * layout_.row_elements());
    }
    return values;
  }

  KvLayout layout_;
  std::mt19937 rng_;
  std::unique_ptr<PlainStore> store_;
  std::vector<std::vector<int32_t>> tables_;
  std::vector<int64_t> lengths_;
};

// Query rows for tokens: [n_rows, n_head, head_dim], scaled so that softmaxes are peaked
// (scores of several units) as well as flat.
std::vector<float> RandomQueries(std::mt19937& rng, int64_t n_rows, int64_t n_head,
                                 int64_t head_dim) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> q(static_cast<size_t>(n_rows * n_head * head_dim));
  for (int64_t r = 0; r < n_rows; ++r) {
    const float amplitude = r % 2 == 0 ? 3.0f : 0.3f;
    for (int64_t i = 0; i < n_head * head_dim; ++i) {
      q[r * n_head * head_dim + i] = amplitude * dist(rng);
    }
  }
  return q;
}

std::vector<float> Attend(const Fixture& f, int64_t layer, const std::vector<AttentionSpan>& spans,
                          int64_t n_head, const std::vector<float>& q, int64_t n_slots,
                          ThreadPool& pool, int64_t queries_per_task = 8, int64_t window = 0,
                          float softcap = 0.0f) {
  int64_t max_context = 1, n_rows = 0;
  for (const AttentionSpan& s : spans) {
    max_context = std::max(max_context, s.first_position + s.n_tokens);
    n_rows = std::max(n_rows, s.first_row + s.n_tokens);
  }
  std::vector<float> out(static_cast<size_t>(n_rows * n_head * f.layout().head_dim),
                         std::numeric_limits<float>::quiet_NaN());
  std::vector<float> scratch(static_cast<size_t>(
      PagedAttentionScratchFloats(f.layout(), n_head, max_context, n_slots, queries_per_task)));
  PagedAttention(f.store(), layer, spans, n_head, q.data(), out.data(), max_context, scratch.data(),
                 n_slots, queries_per_task, pool, window, softcap);
  return out;
}

// float64 causal softmax attention of one token (position pos of sequence seq, query heads
// [n_head][head_dim] at q), into ref: [n_head][head_dim]. window > 0: only the positions
// pos - window + 1 .. pos.
void Reference(const Fixture& f, int64_t layer, int64_t seq, int64_t pos, int64_t n_head,
               const float* q, std::vector<double>& ref, int64_t window = 0, double softcap = 0.0) {
  const int64_t first = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
  const int64_t hd = f.layout().head_dim, group = n_head / f.layout().n_kv_head;
  ref.assign(static_cast<size_t>(n_head * hd), 0.0);
  std::vector<float> buf;
  for (int64_t h = 0; h < n_head; ++h) {
    std::vector<double> w(static_cast<size_t>(pos + 1));
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t p = first; p <= pos; ++p) {
      const float* k = f.Row(0, layer, seq, p, h / group, buf);
      double dot = 0.0;
      for (int64_t d = 0; d < hd; ++d) dot += static_cast<double>(q[h * hd + d]) * k[d];
      w[p] = dot / std::sqrt(static_cast<double>(hd));
      if (softcap > 0) w[p] = softcap * std::tanh(w[p] / softcap);
      mx = std::max(mx, w[p]);
    }
    double sum = 0.0;
    for (int64_t p = first; p <= pos; ++p) sum += (w[p] = std::exp(w[p] - mx));
    for (int64_t p = first; p <= pos; ++p) {
      const float* v = f.Row(1, layer, seq, p, h / group, buf);
      for (int64_t d = 0; d < hd; ++d) ref[h * hd + d] += w[p] / sum * v[d];
    }
  }
}

struct Case {
  KvDtype dtype;
  int64_t group, head_dim, block_size;

  // The case's store layout with `n_layer` layers of kKvHeads K/V heads.
  KvLayout Layout(int64_t n_layer) const;
};

constexpr int64_t kKvHeads = 2;

KvLayout Case::Layout(int64_t n_layer) const {
  return KvLayout{.n_layer = n_layer,
                  .block_size = block_size,
                  .n_kv_head = kKvHeads,
                  .head_dim = head_dim,
                  .dtype = dtype};
}

std::string CaseName(const Case& c) {
  return std::string(KvDtypeName(c.dtype)) + "_group" + std::to_string(c.group) + "_hd" +
         std::to_string(c.head_dim) + "_bs" + std::to_string(c.block_size);
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kQ8_0}) {
    for (int64_t group : {1, 3, 4}) {
      for (int64_t hd : {64, 128}) cases.push_back({dtype, group, hd, 16});
    }
    if (dtype == KvDtype::kQ8_0) {  // whole blocks of 32 per head only
      cases.push_back({dtype, 3, 32, 5});
      continue;
    }
    cases.push_back({dtype, 3, 24, 5});  // head_dim not a multiple of 16, odd block size
    cases.push_back({dtype, 2, 16, 32});
    cases.push_back({dtype, 3, 96, 16});  // 6 chunks of 16: no kernel specialized for it
    if (dtype == KvDtype::kF16) cases.push_back({dtype, 2, 256, 16});  // the largest head
  }
  return cases;
}

const std::vector<int64_t> kLengths = {1, 5, 16, 17, 40, 100, 131};

// A batch as the runner builds one: some sequences decode their last token, one prefills a
// chunk of its last positions. Returns the spans; rows follow each other.
std::vector<AttentionSpan> MixedBatch(const Fixture& f) {
  std::vector<AttentionSpan> spans;
  int64_t row = 0;
  for (int64_t s = 0; s < static_cast<int64_t>(kLengths.size()); ++s) {
    const int64_t len = f.length(s);
    const int64_t n = s == 5 ? 37 : 1;  // sequence 5: a chunk of 37 tokens
    spans.push_back(
        {.block_table = f.table(s), .first_position = len - n, .n_tokens = n, .first_row = row});
    row += n;
  }
  return spans;
}

TEST(PagedAttentionTest, MatchesFloat64ReferenceForEveryLayoutAndImplementation) {
  IsaGuard guard;
  ThreadPool pool(2);
  for (const Case& c : Cases()) {
    const KvLayout layout = c.Layout(2);
    Fixture f(layout, kLengths, 11);
    const int64_t n_head = kKvHeads * c.group;
    const std::vector<AttentionSpan> spans = MixedBatch(f);
    const int64_t n_rows = spans.back().first_row + spans.back().n_tokens;
    const std::vector<float> q = RandomQueries(f.rng(), n_rows, n_head, c.head_dim);
    for (Isa isa : Isas()) {
      internal::SetActiveIsaForTesting(isa);
      const std::vector<float> out = Attend(f, 1, spans, n_head, q, 8, pool);
      double max_err = 0.0, max_ref = 0.0;
      std::vector<double> ref;
      for (int64_t s = 0; s < static_cast<int64_t>(spans.size()); ++s) {
        for (int64_t t = 0; t < spans[s].n_tokens; ++t) {
          const int64_t row = spans[s].first_row + t;
          Reference(f, 1, s, spans[s].first_position + t, n_head,
                    q.data() + row * n_head * c.head_dim, ref);
          for (int64_t i = 0; i < n_head * c.head_dim; ++i) {
            const double got = out[row * n_head * c.head_dim + i];
            max_err = std::max(max_err, std::abs(got - ref[i]));
            max_ref = std::max(max_ref, std::abs(ref[i]));
          }
        }
      }
      // Outputs are averages of V values in [-1, 1]; single-precision sums of up to 131
      // terms stay within a few 1e-7 of the float64 result.
      EXPECT_LE(max_err, 1e-5 * max_ref) << CaseName(c) << " " << IsaName(isa);
      EXPECT_GT(max_ref, 0.1) << CaseName(c);
    }
  }
}

TEST(PagedAttentionTest, TokenBitsDoNotDependOnBatchChunkingSlotsThreadsOrImplementation) {
  IsaGuard guard;
  for (const Case& c : Cases()) {
    const KvLayout layout = c.Layout(1);
    Fixture f(layout, kLengths, 23);
    const int64_t n_head = kKvHeads * c.group, row_floats = n_head * c.head_dim;
    const std::vector<AttentionSpan> batch = MixedBatch(f);
    const int64_t n_rows = batch.back().first_row + batch.back().n_tokens;
    const std::vector<float> q = RandomQueries(f.rng(), n_rows, n_head, c.head_dim);

    // Every token of the batch attended alone (one span of one token, one slot, one thread,
    // the portable loops): the bits every other way must reproduce.
    internal::SetActiveIsaForTesting(Isa::kScalar);
    ThreadPool single(1);
    std::vector<float> alone(static_cast<size_t>(n_rows * row_floats));
    for (const AttentionSpan& span : batch) {
      for (int64_t t = 0; t < span.n_tokens; ++t) {
        const int64_t row = span.first_row + t;
        const std::vector<float> q_row(q.begin() + row * row_floats,
                                       q.begin() + (row + 1) * row_floats);
        const AttentionSpan one{.block_table = span.block_table,
                                .first_position = span.first_position + t,
                                .n_tokens = 1,
                                .first_row = 0};
        const std::vector<float> out = Attend(f, 0, {one}, n_head, q_row, 1, single);
        std::copy(out.begin(), out.end(), alone.begin() + row * row_floats);
      }
    }
    for (Isa isa : Isas()) {
      internal::SetActiveIsaForTesting(isa);
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        for (int64_t n_slots : {1, 2, 7}) {
          for (int64_t queries : {1, 3, 8}) {  // query tokens per task
            const std::vector<float> out = Attend(f, 0, batch, n_head, q, n_slots, pool, queries);
            EXPECT_EQ(std::memcmp(out.data(), alone.data(), out.size() * sizeof(float)), 0)
                << CaseName(c) << " " << IsaName(isa) << " threads " << threads << " slots "
                << n_slots << " queries " << queries;
          }
        }
      }
      // The prefill chunk split in two chunks, in reverse order in the batch.
      std::vector<AttentionSpan> split = batch;
      AttentionSpan& chunk = split[5];
      AttentionSpan second = chunk;
      chunk.n_tokens = 20;
      second.first_position += 20;
      second.first_row += 20;
      second.n_tokens -= 20;
      split.insert(split.begin(), second);
      ThreadPool pool(2);
      const std::vector<float> out = Attend(f, 0, split, n_head, q, 5, pool);
      EXPECT_EQ(std::memcmp(out.data(), alone.data(), out.size() * sizeof(float)), 0)
          << CaseName(c) << " " << IsaName(isa) << " split chunk";
    }
  }
}

// A whole prompt in one span, as a prefill's first chunk: its tokens are attended in tasks of
// up to 8 queries whose contexts start at 1 and end inside, at and past tile boundaries. Every
// token's bits must be those it has attended alone.
TEST(PagedAttentionTest, WholePromptInOneSpanGivesEveryTokenItsBitsAlone) {
  IsaGuard guard;
  for (const Case& c : Cases()) {
    Fixture f(c.Layout(1), kLengths, 31);
    const int64_t n_head = kKvHeads * c.group, row_floats = n_head * c.head_dim;
    const int64_t seq = static_cast<int64_t>(kLengths.size()) - 1;
    const int64_t len = f.length(seq);
    const std::vector<float> q = RandomQueries(f.rng(), len, n_head, c.head_dim);
    internal::SetActiveIsaForTesting(Isa::kScalar);
    ThreadPool single(1);
    std::vector<float> alone(static_cast<size_t>(len * row_floats));
    for (int64_t t = 0; t < len; ++t) {
      const std::vector<float> q_row(q.begin() + t * row_floats, q.begin() + (t + 1) * row_floats);
      const AttentionSpan one{
          .block_table = f.table(seq), .first_position = t, .n_tokens = 1, .first_row = 0};
      const std::vector<float> out = Attend(f, 0, {one}, n_head, q_row, 1, single);
      std::copy(out.begin(), out.end(), alone.begin() + t * row_floats);
    }
    const AttentionSpan whole{
        .block_table = f.table(seq), .first_position = 0, .n_tokens = len, .first_row = 0};
    for (Isa isa : Isas()) {
      internal::SetActiveIsaForTesting(isa);
      ThreadPool pool(2);
      for (int64_t n_slots : {1, 3}) {
        const std::vector<float> out = Attend(f, 0, {whole}, n_head, q, n_slots, pool);
        EXPECT_EQ(std::memcmp(out.data(), alone.data(), out.size() * sizeof(float)), 0)
            << CaseName(c) << " " << IsaName(isa) << " slots " << n_slots;
      }
    }
  }
}

// Sliding windows shorter than, across and longer than a tile of 16 and the block size, with and
// without Gemma 2's score soft-capping: every implementation matches the float64 reference of
// the window alone, and every token has the bits it has attended alone (one query, one slot,
// the portable loops).
TEST(PagedAttentionTest, SlidingWindowMatchesFloat64ReferenceAndEachTokensBitsAlone) {
  IsaGuard guard;
  const Case cases[] = {
      {KvDtype::kF16, 4, 256, 16}, {KvDtype::kF32, 3, 24, 5}, {KvDtype::kQ8_0, 1, 64, 16}};
  for (const Case& c : cases) {
    Fixture f(c.Layout(1), kLengths, 41);
    const int64_t n_head = kKvHeads * c.group, row_floats = n_head * c.head_dim;
    const std::vector<AttentionSpan> batch = MixedBatch(f);
    const int64_t n_rows = batch.back().first_row + batch.back().n_tokens;
    const std::vector<float> q = RandomQueries(f.rng(), n_rows, n_head, c.head_dim);
    for (const auto& [window, softcap] : std::vector<std::pair<int64_t, float>>{
             {1, 0.0f}, {7, 0.0f}, {16, 0.0f}, {33, 0.0f}, {1000, 0.0f}, {7, 2.5f}, {1000, 2.5f}}) {
      internal::SetActiveIsaForTesting(Isa::kScalar);
      ThreadPool single(1);
      std::vector<float> alone(static_cast<size_t>(n_rows * row_floats));
      double max_err = 0.0;
      std::vector<double> ref;
      for (int64_t s = 0; s < static_cast<int64_t>(batch.size()); ++s) {
        for (int64_t t = 0; t < batch[s].n_tokens; ++t) {
          const int64_t row = batch[s].first_row + t;
          const std::vector<float> q_row(q.begin() + row * row_floats,
                                         q.begin() + (row + 1) * row_floats);
          const AttentionSpan one{.block_table = batch[s].block_table,
                                  .first_position = batch[s].first_position + t,
                                  .n_tokens = 1,
                                  .first_row = 0};
          const std::vector<float> out =
              Attend(f, 0, {one}, n_head, q_row, 1, single, 1, window, softcap);
          std::copy(out.begin(), out.end(), alone.begin() + row * row_floats);
          Reference(f, 0, s, one.first_position, n_head, q_row.data(), ref, window, softcap);
          for (int64_t i = 0; i < row_floats; ++i) {
            max_err = std::max(max_err, std::abs(out[i] - ref[i]));
          }
        }
      }
      EXPECT_LE(max_err, 1e-5) << CaseName(c) << " window " << window << " softcap " << softcap;
      for (Isa isa : Isas()) {
        internal::SetActiveIsaForTesting(isa);
        ThreadPool pool(2);
        for (int64_t queries : {1, 8}) {
          const std::vector<float> out =
              Attend(f, 0, batch, n_head, q, 3, pool, queries, window, softcap);
          EXPECT_EQ(std::memcmp(out.data(), alone.data(), out.size() * sizeof(float)), 0)
              << CaseName(c) << " " << IsaName(isa) << " window " << window << " softcap "
              << softcap << " queries " << queries;
        }
      }
    }
  }
}

TEST(PagedAttentionTest, QueriesPerTaskFollowTheSpansAndBoundTheScratch) {
  // Small contexts: as many as the longest span has, up to 8.
  EXPECT_EQ(kernels::PagedAttentionQueriesPerTask(9, 8192, 8, 1), 1);
  EXPECT_EQ(kernels::PagedAttentionQueriesPerTask(9, 8192, 8, 3), 3);
  EXPECT_EQ(kernels::PagedAttentionQueriesPerTask(9, 8192, 8, 512), 8);
  // 32 heads, 32k positions, 64 slots: one query's scores already take 268 MB, so no more.
  EXPECT_EQ(kernels::PagedAttentionQueriesPerTask(32, 32768, 64, 512), 1);
  // In between, the scratch grows by at most 32 MiB over one query's.
  const KvLayout layout{
      .n_layer = 1, .block_size = 16, .n_kv_head = 8, .head_dim = 128, .dtype = KvDtype::kF16};
  for (int64_t ctx : {4096, 8192, 16384, 32768}) {
    const int64_t queries = kernels::PagedAttentionQueriesPerTask(32, ctx, 8, 512);
    EXPECT_GE(queries, 1);
    EXPECT_LE(queries, 8);
    const int64_t growth = (PagedAttentionScratchFloats(layout, 32, ctx, 8, queries) -
                            PagedAttentionScratchFloats(layout, 32, ctx, 8, 1)) *
                           static_cast<int64_t>(sizeof(float));
    EXPECT_LE(growth, int64_t{32} << 20) << ctx;
    if (queries < 8) {  // one more would pass the bound
      EXPECT_GT((PagedAttentionScratchFloats(layout, 32, ctx, 8, queries + 1) -
                 PagedAttentionScratchFloats(layout, 32, ctx, 8, 1)) *
                    static_cast<int64_t>(sizeof(float)),
                int64_t{32} << 20)
          << ctx;
    }
  }
}

TEST(PagedAttentionTest, F16AndF32StoresOfEqualValuesGiveEqualBits) {
  IsaGuard guard;
  ThreadPool pool(2);
  for (const auto& [hd, dtype] : {std::pair<int64_t, KvDtype>{64, KvDtype::kF16},
                                  {24, KvDtype::kF16},
                                  {64, KvDtype::kQ8_0},
                                  {128, KvDtype::kQ8_0}}) {
    // f16 (q8_0) store, f32 copy of its values: the widening is exact, so equal bits.
    const KvLayout f16_layout{
        .n_layer = 1, .block_size = 16, .n_kv_head = kKvHeads, .head_dim = hd, .dtype = dtype};
    KvLayout f32_layout = f16_layout;
    f32_layout.dtype = KvDtype::kF32;
    Fixture f16(f16_layout, kLengths, 5);
    Fixture f32(f32_layout, kLengths, 6);
    f16.CopyValuesTo(f32);  // f32 now holds the f16 store's values, exactly
    const int64_t n_head = 3 * kKvHeads;
    const std::vector<AttentionSpan> batch = MixedBatch(f16);
    const int64_t n_rows = batch.back().first_row + batch.back().n_tokens;
    const std::vector<float> q = RandomQueries(f16.rng(), n_rows, n_head, hd);
    for (Isa isa : Isas()) {
      internal::SetActiveIsaForTesting(isa);
      const std::vector<float> a = Attend(f16, 0, batch, n_head, q, 4, pool);
      const std::vector<float> b = Attend(f32, 0, batch, n_head, q, 4, pool);
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << KvDtypeName(dtype) << " hd " << hd << " " << IsaName(isa);
    }
  }
}

// Every `step`-th float in [lo, hi] (lo < hi <= 0), by bit pattern.
std::vector<float> NegativeSweep(float lo, float hi, uint32_t step) {
  std::vector<float> x;
  const uint32_t first = std::bit_cast<uint32_t>(hi), last = std::bit_cast<uint32_t>(lo);
  for (uint64_t bits = first; bits <= last; bits += step) {
    x.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits)));
  }
  return x;
}

TEST(AttentionExpTest, WithinTwoUlpOfStdExpOverTheSoftmaxRange) {
  // -0 .. kExpMin: about 1.1e9 floats; every 61st (18 million) of them.
  const std::vector<float> x = NegativeSweep(-87.3f, -0.0f, 61);
  std::vector<float> y(x.size());
  internal::ExpPortable(x.data(), static_cast<int64_t>(x.size()), y.data());
  // Error in units in the last place of the correctly rounded result.
  double max_ulp = 0.0, max_rel = 0.0;
  float worst = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
    const double err = std::abs(y[i] - want);
    max_rel = std::max(max_rel, err / want);
    if (err / ulp > max_ulp) {
      max_ulp = err / ulp;
      worst = x[i];
    }
  }
  std::printf("Exp: %zu inputs in [-87.3, 0]: max error %.3f ulp (at %.9g), max relative %.3g\n",
              x.size(), max_ulp, worst, max_rel);
  EXPECT_LE(max_ulp, 2.0);
  EXPECT_LE(max_rel, 2.4e-7);
  float one = 0.0f;
  const float zero_in = 0.0f;
  internal::ExpPortable(&zero_in, 1, &one);
  EXPECT_EQ(one, 1.0f);
}

TEST(AttentionExpTest, VeryNegativeInputsGiveZeroAndNanStaysNan) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {
      -87.31f, -88.0f, -103.0f, -1e4f, -3.4e38f, -inf, std::numeric_limits<float>::quiet_NaN()};
  std::vector<float> y(x.size(), 1.0f);
  internal::ExpPortable(x.data(), static_cast<int64_t>(x.size()), y.data());
  for (size_t i = 0; i + 1 < x.size(); ++i) EXPECT_EQ(y[i], 0.0f) << x[i];
  EXPECT_TRUE(std::isnan(y.back()));
  // The smallest input that is not flushed gives a positive normal value.
  const float lo = -87.3f;
  float y_lo = 0.0f;
  internal::ExpPortable(&lo, 1, &y_lo);
  EXPECT_GE(y_lo, std::numeric_limits<float>::min());
  EXPECT_NEAR(y_lo, std::exp(static_cast<double>(lo)), 3e-7 * y_lo);
}

TEST(AttentionExpTest, EveryImplementationGivesTheSameBits) {
  if (!IsaSupported(Isa::kAvx2)) GTEST_SKIP() << "scalar-only CPU: one implementation";
  std::vector<float> x = NegativeSweep(-100.0f, -0.0f, 997);
  const float inf = std::numeric_limits<float>::infinity();
  x.insert(x.end(),
           {0.0f, -inf, std::numeric_limits<float>::quiet_NaN(), -87.3f, -87.29999f, 1.0f, 10.0f});
  std::vector<float> a(x.size()), b(x.size());
  internal::ExpPortable(x.data(), static_cast<int64_t>(x.size()), a.data());
  std::vector<void (*)(const float*, int64_t, float*)> others = {internal::ExpPortableAvx2,
                                                                 internal::ExpAvx2};
  if (IsaSupported(Isa::kAvx512)) others.push_back(internal::ExpAvx512);
  for (auto exp : others) {
    exp(x.data(), static_cast<int64_t>(x.size()), b.data());
    int64_t mismatches = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(a[i]) && std::isnan(b[i])) continue;
      if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) {
        if (mismatches++ < 5) ADD_FAILURE() << x[i] << ": " << a[i] << " vs " << b[i];
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

}  // namespace
}  // namespace pier::kernels
