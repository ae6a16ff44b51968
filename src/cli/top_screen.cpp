#include "cli/top_screen.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

namespace pier::cli {
namespace {

using metrics::ExpositionRead;
using metrics::ExpositionSample;

// The samples of one scrape by name.
class Scrape {
 public:
  explicit Scrape(const ExpositionRead* read) {
    if (read == nullptr) return;
    for (const ExpositionSample& s : read->samples) by_name_[s.name].push_back(&s);
  }
  const std::vector<const ExpositionSample*>& Of(const std::string& name) const {
    static const std::vector<const ExpositionSample*> kNone;
    auto it = by_name_.find(name);
    return it == by_name_.end() ? kNone : it->second;
  }
  // The value of `name` whose labels include every (label, value) of `match`.
  std::optional<double> Value(const std::string& name,
                              const std::vector<std::pair<std::string, std::string>>& match) const {
    for (const ExpositionSample* s : Of(name)) {
      bool all = true;
      for (const auto& [label, value] : match) all = all && s->Label(label) == value;
      if (all) return s->value;
    }
    return std::nullopt;
  }

 private:
  std::map<std::string, std::vector<const ExpositionSample*>> by_name_;
};

// `text` cut to `width` columns, "~" marking the cut. Control characters from the server
// (a model name or an error with "\n" or an escape sequence) become '?', so nothing it sends
// moves the cursor; a cut never splits a UTF-8 sequence. Columns are counted as bytes, so
// non-ASCII text is cut early rather than late.
std::string Fit(const std::string& text, size_t width) {
  std::string clean = text;
  for (char& c : clean) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  if (clean.size() <= width) return clean;
  if (width == 0) return "";
  size_t cut = width - 1;
  while (cut > 0 && (static_cast<unsigned char>(clean[cut]) & 0xC0) == 0x80) --cut;
  return clean.substr(0, cut) + "~";
}

std::string Bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, units[u]);
}

std::string OrDash(const std::optional<double>& v, const char* format) {
  if (!v.has_value() || !std::isfinite(*v)) return "-";
  return fmt::format(fmt::runtime(format), *v);
}

// Rate of a counter between the scrapes (nullopt without a previous scrape or on a reset).
std::optional<double> Rate(const Scrape& now, const Scrape& before, double seconds,
                           const std::string& name,
                           const std::vector<std::pair<std::string, std::string>>& match) {
  const std::optional<double> a = before.Value(name, match), b = now.Value(name, match);
  if (!a.has_value() || !b.has_value() || seconds <= 0 || *b < *a) return std::nullopt;
  return (*b - *a) / seconds;
}

// Mean of a histogram's observations made between the scrapes (its _sum and _count deltas);
// nullopt without a previous scrape or when nothing was observed.
std::optional<double> MeanBetween(const Scrape& now, const Scrape& before, const std::string& name,
                                  const std::vector<std::pair<std::string, std::string>>& match) {
  const auto sum_now = now.Value(name + "_sum", match);
  const auto count_now = now.Value(name + "_count", match);
  const auto sum_before = before.Value(name + "_sum", match);
  const auto count_before = before.Value(name + "_count", match);
  if (!sum_now || !count_now || !sum_before || !count_before || *count_now <= *count_before) {
    return std::nullopt;
  }
  return (*sum_now - *sum_before) / (*count_now - *count_before);
}

// The figures of a model that runs batches rather than an engine: a tensor model's (items:
// rows along the batch dimension) or an embedding model's (items: texts).
struct BatcherNames {
  const char* queue;    // gauge
  const char* running;  // gauge; null: not exported
  const char* items;    // counter
  const char* batch;    // histogram of items per batch
  const char* queue_seconds;
  const char* compute_seconds;
};
constexpr BatcherNames kTensorBatcher = {
    "pier_tensor_queue_items", "pier_tensor_running_items", "pier_tensor_items_total",
    "pier_tensor_batch_items", "pier_tensor_queue_seconds", "pier_tensor_compute_seconds"};
constexpr BatcherNames kEmbeddingBatcher = {
    "pier_embedding_queue_texts",   nullptr,
    "pier_embedding_texts_total",   "pier_embedding_batch_texts",
    "pier_embedding_queue_seconds", "pier_embedding_compute_seconds"};

// The model's batcher names, or null when it has no batcher figures (an LLM).
const BatcherNames* BatcherOf(const Scrape& now, const std::string& model) {
  for (const BatcherNames* names : {&kTensorBatcher, &kEmbeddingBatcher}) {
    if (now.Value(names->queue, {{"model", model}}).has_value()) return names;
  }
  return nullptr;
}

}  // namespace

std::string Bar(double fraction, int cells) {
  if (!std::isfinite(fraction)) fraction = 0;
  const int filled =
      static_cast<int>(std::lround(std::clamp(fraction, 0.0, 1.0) * static_cast<double>(cells)));
  return "[" + std::string(static_cast<size_t>(filled), '#') +
         std::string(static_cast<size_t>(cells - filled), ' ') + "]";
}

std::vector<std::string> RenderTopScreen(const TopScreenInput& in) {
  const Scrape now(in.now), before(in.before);
  const size_t width = static_cast<size_t>(std::max(in.width, 40));
  std::vector<std::string> lines;
  auto add = [&](const std::string& line) { lines.push_back(Fit(line, width)); };

  const std::string left = "pier top  " + in.url;
  const std::string right = in.clock;
  add(left.size() + right.size() + 1 <= width
          ? left + std::string(width - left.size() - right.size(), ' ') + right
          : left);

  // Models: every model pier_model_state names, in its order.
  std::vector<std::string> models;
  std::map<std::string, std::string> state;
  for (const ExpositionSample* s : now.Of("pier_model_state")) {
    const std::string model(s->Label("model"));
    if (std::find(models.begin(), models.end(), model) == models.end()) models.push_back(model);
    if (s->value == 1) state[model] = std::string(s->Label("state"));
  }
  std::map<std::string, std::pair<int, int>> instances;  // model -> (up, all)
  for (const ExpositionSample* s : now.Of("pier_worker_up")) {
    auto& [up, all] = instances[std::string(s->Label("model"))];
    up += s->value == 1 ? 1 : 0;
    ++all;
  }
  add("");
  add(fmt::format("{:<22} {:<8} {:>5} {:>4} {:>5} {:>7} {:>6}  {}", "MODEL", "STATE", "INST", "RUN",
                  "WAIT", "TOK/S", "TTFT", "KV USED"));
  for (const std::string& m : models) {
    const std::vector<std::pair<std::string, std::string>> match = {{"model", m}};
    std::string inst = "-";
    if (auto it = instances.find(m); it != instances.end()) {
      inst = fmt::format("{}/{}", it->second.first, it->second.second);
    } else if (state[m] == "ready") {
      inst = "1/1";  // in process
    }
    const std::optional<double> tokens =
        Rate(now, before, in.seconds_between, "pier_generation_tokens_total", match);
    // Mean time to first token of the requests finished between the scrapes.
    const std::optional<double> ttft =
        MeanBetween(now, before, "pier_time_to_first_token_seconds", match);
    // A batcher's model (no engine): its items running and waiting in those columns.
    std::optional<double> running = now.Value("pier_num_requests_running", match);
    std::optional<double> waiting = now.Value("pier_num_requests_waiting", match);
    if (const BatcherNames* batcher = BatcherOf(now, m)) {
      if (!running && batcher->running != nullptr) running = now.Value(batcher->running, match);
      if (!waiting) waiting = now.Value(batcher->queue, match);
    }
    const std::optional<double> kv = now.Value("pier_kv_cache_usage_ratio", match);
    const std::string kv_text =
        kv.has_value() ? Bar(*kv, 8) + fmt::format(" {:>3.0f}%", *kv * 100) : "-";
    add(fmt::format("{:<22} {:<8} {:>5} {:>4} {:>5} {:>7} {:>6}  {}", Fit(m, 22),
                    Fit(state.count(m) ? state[m] : "-", 8), inst, OrDash(running, "{:.0f}"),
                    OrDash(waiting, "{:.0f}"), OrDash(tokens, "{:.1f}"),
                    ttft ? fmt::format("{:.2f}s", *ttft) : "-", kv_text));
  }
  if (models.empty()) add("(no models)");

  // Waiting sequences by requested class, all models together.
  std::map<std::string, double> by_class;
  for (const ExpositionSample* s : now.Of("pier_qos_queued_sequences")) {
    by_class[std::string(s->Label("class"))] += s->value;
  }
  if (!by_class.empty()) {
    std::string line = "QUEUED   ";
    for (const char* c : {"critical", "high", "normal", "low"}) {
      line += fmt::format(" {} {:.0f} ", c, by_class[c]);
    }
    add(line);
  }

  // Models that run batches (tensor and embedding models): queue, items per second, mean
  // items per batch, and the mean queue and compute time of what ran between the scrapes.
  bool batcher_header = false;
  for (const std::string& m : models) {
    const BatcherNames* batcher = BatcherOf(now, m);
    if (batcher == nullptr) continue;
    if (!batcher_header) {
      add("");
      add(fmt::format("{:<24} {:>6} {:>9} {:>9} {:>9} {:>9}", "BATCHER", "QUEUE", "ITEMS/S",
                      "PER BATCH", "QUEUE MS", "RUN MS"));
      batcher_header = true;
    }
    const std::vector<std::pair<std::string, std::string>> match = {{"model", m}};
    const std::optional<double> queue_s = MeanBetween(now, before, batcher->queue_seconds, match);
    const std::optional<double> compute_s =
        MeanBetween(now, before, batcher->compute_seconds, match);
    add(fmt::format("{:<24} {:>6} {:>9} {:>9} {:>9} {:>9}", Fit(m, 24),
                    OrDash(now.Value(batcher->queue, match), "{:.0f}"),
                    OrDash(Rate(now, before, in.seconds_between, batcher->items, match), "{:.1f}"),
                    OrDash(MeanBetween(now, before, batcher->batch, match), "{:.1f}"),
                    queue_s ? fmt::format("{:.2f}", *queue_s * 1000) : "-",
                    compute_s ? fmt::format("{:.2f}", *compute_s * 1000) : "-"));
  }

  // Memory per device.
  const auto& used = now.Of("pier_memory_used_bytes");
  if (!used.empty()) {
    add("");
    add("MEMORY");
    for (const ExpositionSample* s : used) {
      const std::string device(s->Label("device"));
      const std::vector<std::pair<std::string, std::string>> match = {{"device", device}};
      const double budget = now.Value("pier_memory_budget_bytes", match).value_or(0);
      add(fmt::format("{:<8} {} {:>9} / {:<9} pressure {} waiting {}", Fit(device, 8),
                      Bar(budget > 0 ? s->value / budget : 0, 20), Bytes(s->value), Bytes(budget),
                      OrDash(now.Value("pier_memory_pressure_index", match), "{:.2f}"),
                      OrDash(now.Value("pier_memory_waiting_allocations", match), "{:.0f}")));
    }
  }

  // GPUs (whole GPUs and MIG instances) as NVML reports them.
  const auto& gpus = now.Of("pier_gpu_info");
  if (!gpus.empty()) {
    add("");
    add("GPU");
    for (const ExpositionSample* s : gpus) {
      const std::string gpu(s->Label("gpu")), mig(s->Label("mig"));
      const std::vector<std::pair<std::string, std::string>> match = {{"gpu", gpu}, {"mig", mig}};
      const std::optional<double> util = now.Value("pier_gpu_utilization_ratio", match);
      const std::optional<double> mem_used = now.Value("pier_gpu_memory_used_bytes", match);
      const std::optional<double> mem_total = now.Value("pier_gpu_memory_total_bytes", match);
      const std::string id = mig.empty() ? gpu : gpu + "/" + mig;
      std::string line = fmt::format("{:<4} {:<14} util {} {:>4} mem {}", Fit(id, 4),
                                     Fit(std::string(s->Label("name")), 14),
                                     util ? Bar(*util, 10) : std::string(12, ' '),
                                     util ? fmt::format("{:.0f}%", *util * 100) : "-",
                                     mem_used && mem_total && *mem_total > 0
                                         ? Bar(*mem_used / *mem_total, 8) + " " + Bytes(*mem_used)
                                         : "-");
      if (auto t = now.Value("pier_gpu_temperature_celsius", match)) {
        line += fmt::format(" {:.0f}C", *t);
      }
      if (auto p = now.Value("pier_gpu_power_watts", match)) line += fmt::format(" {:.0f}W", *p);
      add(line);
    }
  }

  // Demand now and forecast five minutes ahead.
  const auto& demand = now.Of("pier_demand_requests_per_second");
  if (!demand.empty()) {
    add("");
    add(fmt::format("{:<24} {:>10} {:>14}", "DEMAND", "req/s now", "in 5 min"));
    for (const ExpositionSample* s : demand) {
      const std::string m(s->Label("model"));
      add(fmt::format(
          "{:<24} {:>10.2f} {:>14}", Fit(m, 24), s->value,
          OrDash(now.Value("pier_demand_forecast_requests_per_second", {{"model", m}}), "{:.2f}")));
    }
  }

  // Worker processes.
  const auto& workers = now.Of("pier_worker_up");
  if (!workers.empty()) {
    add("");
    add(fmt::format("{:<28} {:<5} {:>8} {:>11} {:>11}", "WORKER", "UP", "RESTARTS", "RESIDENT",
                    "GRANTED"));
    for (const ExpositionSample* s : workers) {
      const std::vector<std::pair<std::string, std::string>> match = {
          {"model", std::string(s->Label("model"))},
          {"instance", std::string(s->Label("instance"))}};
      const auto rss = now.Value("pier_worker_resident_bytes", match);
      const auto granted = now.Value("pier_worker_granted_bytes", match);
      add(fmt::format(
          "{:<28} {:<5} {:>8} {:>11} {:>11}",
          Fit(std::string(s->Label("model")) + "#" + std::string(s->Label("instance")), 28),
          s->value == 1 ? "yes" : "no",
          OrDash(now.Value("pier_worker_restarts_total", match), "{:.0f}"), rss ? Bytes(*rss) : "-",
          granted ? Bytes(*granted) : "-"));
    }
  }
  return lines;
}

}  // namespace pier::cli
