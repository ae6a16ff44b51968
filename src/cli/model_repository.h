// The `models:` list of `pier serve`'s configuration file: several models (each with its
// name, file, aliases and its own engine settings) in one server on one memory budget.
//
//   models:
//     - name: chat
//       path: models/SmolLM2-135M-Instruct.Q4_1.gguf   # relative: from the file's folder
//       aliases: [gpt-4o-mini, default-chat]
//       ctx: 2048
//       fallback: small-chat
//     - name: small-chat
//       path: models/other.gguf
//
// Per model: `name` (required), `path` (required), `aliases` (one name or a list), `instances`
// (1..16 engines, each with its own KV cache; requests go to the least loaded), `priority`
// (-100..100: under memory pressure a model's KV yields to higher priorities), `fallback`
// (another model's name or alias: requests go there while this model is loaded past a
// threshold, serving/fallback_switch.h) with its trigger `fallback_load` (0..100, default 0.8:
// (running + waiting) / max_seqs), `fallback_release` (default fallback_load - 0.2),
// `fallback_queue_ms` (a predicted queue wait that engages it too; default off) and
// `fallback_max_class` (the highest class diverted; default critical: all), `load` (`on_start`, the
// default, or `on_demand`: loaded by the first request that names it), `idle_unload_after`
// (seconds without work after which an on_demand model is unloaded; default never), `device`
// (default: the server's `device`, itself `cpu` by default), `chat_template` (a Jinja file used
// instead of the GGUF's), `labels` (a tensor model's class names: a file of one name per line,
// `metadata` or `metadata:KEY` for the model's own metadata entry; serving/class_labels.h), and
// every per-model key of serving/model_settings.h (`ctx`,
// `kv_policy`, `max_seqs`, ... : its engine, KV cache, batcher and QoS), which overrides the
// server-wide key of the same name for this model; and, with `workers: on`, the binding of its
// worker processes: `cpus`, `numa_node`, `gpu`, `mps_thread_percentage` and `mps_memory_limit` (see
// ModelConfig::bindings). Without a list the flat `model` and `name` keys (or -m) describe the one
// model.
//
// Everything is validated before anything loads, each error naming the file, the model and
// the key: unknown keys, values that do not parse, missing files, names that are not
// [A-Za-z0-9._:-], duplicate names or aliases, a fallback that names no model or leads back
// to itself, fallback_* keys without a fallback, a release threshold not below the load one.
//
// Thread-safety: plain functions on values.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "placement/binding.h"
#include "serving/fallback_switch.h"

namespace pier::cli {

struct ModelConfig {
  std::string name;
  std::string path;
  std::vector<std::string> aliases;
  std::string fallback;  // empty: none
  serving::FallbackPolicy fallback_when;
  // A Jinja chat template file used instead of the GGUF's (e.g. one that supports tools);
  // empty: the file's own.
  std::string chat_template;
  std::string labels;  // a file (made absolute), "metadata" or "metadata:KEY"; empty: none
  // Who keeps KV memory under reclaim: a model yields to one of higher priority (its owners'
  // governor priority; -100..100, default 0).
  int priority = 0;
  int instances = 1;  // engines serving it, each with its own KV cache (1..16)
  // `load: on_demand`: loaded by the first request that names it (else at startup), and may
  // be unloaded when idle for idle_unload_after_seconds (0: never) or to make room.
  bool on_demand = false;
  double idle_unload_after_seconds = 0;
  // Where it runs: cpu, cuda:N, a GPU's or MIG instance's UUID; empty: the server's `device`.
  std::string device;
  // Per-model keys (serving/model_settings.h) given for this model only, key -> value as
  // YAML gave it; applied over the server's values when its spec is built.
  nlohmann::json settings = nlohmann::json::object();
  // Where its worker processes run: `cpus` (a CPU list like 0-3, or auto), `numa_node` (a
  // node or auto), `gpu` (an index, GPU-/MIG- UUID), `mps_thread_percentage` (1..100),
  // `mps_memory_limit` (bytes). `cpus`, `numa_node` and `gpu` take one value for every
  // instance or a list with one per instance (`cpus: [[0, 1], [2, 3]]` or `["0-1", "2-3"]`);
  // a flat list of numbers is one CPU list. Empty: not bound; else one per instance.
  std::vector<placement::BindingRequest> bindings;
  std::string source;  // "serve.yaml: models[1] (beta)", for later messages
};

// Model names and aliases: letters, digits and . _ : - (at most 128); they appear in URLs,
// metric labels and governor owner names ("name/kv").
bool IsValidModelName(std::string_view name);

// The names a model entry may use.
const std::vector<std::string_view>& ModelSettingNames();

// The `models` list of a YAML document (empty when the document has none). `folder` is the
// file's folder (relative paths start there). INVALID_ARGUMENT / NOT_FOUND naming
// `source_name`, the entry and the key for everything above.
[[nodiscard]] Result<std::vector<ModelConfig>> ParseModelRepository(std::string_view yaml_text,
                                                                    std::string_view source_name,
                                                                    std::string_view folder);

}  // namespace pier::cli
