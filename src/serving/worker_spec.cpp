#include "serving/worker_spec.h"

#include <string>

#include "device/device_name.h"
#include "engine/runner/cpu/cpu_runner.h"

namespace pier::serving {

ipc::proto::LoadSpec ToLoadSpec(const ModelLoadOptions& o, int instance, uint64_t budget_bytes) {
  ipc::proto::LoadSpec spec;
  spec.set_path(o.path);
  spec.set_id(o.id);
  spec.set_instance(instance);
  spec.set_priority(o.priority);
  spec.set_threads(o.threads);
  spec.set_ctx(o.ctx);
  spec.set_kv_dtype(std::string(engine::KvDtypeName(o.kv_dtype)));
  if (o.weights_dtype) spec.set_weights_dtype(std::string(DTypeName(*o.weights_dtype)));
  spec.set_kv_elastic(o.kv_policy == engine::KvPolicy::kElastic);
  spec.set_kv_min_tokens(o.kv_min.in_bytes ? 0 : o.kv_min.tokens);
  spec.set_kv_min_bytes(o.kv_min.in_bytes ? o.kv_min.bytes : 0);
  spec.set_kv_max_tokens(o.kv_max.in_bytes ? 0 : o.kv_max.tokens);
  spec.set_kv_max_bytes(o.kv_max.in_bytes ? o.kv_max.bytes : 0);
  spec.set_max_batched_tokens(o.max_batched_tokens);
  spec.set_prefill_chunk_while_decoding(o.prefill_chunk_while_decoding);
  spec.set_max_seqs(o.max_seqs);
  spec.set_qos_reserve(o.qos_reserve);
  spec.set_qos_off(!o.qos);
  spec.set_qos_steps_run_to_end(!o.qos_stop_steps);
  if (o.device != "cpu") spec.set_device(o.device);
  spec.set_adaptive_batching(o.adaptive_batching);
  spec.set_min_batched_tokens(o.min_batched_tokens);
  spec.set_max_prefill_chunk(o.max_prefill_chunk);
  spec.set_max_queued(o.max_queued);
  spec.set_swap_space_bytes(o.swap_space_bytes);
  spec.set_kv_idle_release_ms(o.kv_idle_release.count());
  spec.set_budget_bytes(budget_bytes);
  return spec;
}

Result<ModelLoadOptions> FromLoadSpec(const ipc::proto::LoadSpec& spec) {
  ModelLoadOptions o;
  o.path = spec.path();
  o.id = spec.id();
  o.priority = spec.priority();
  o.instances = 1;
  o.threads = spec.threads();
  o.ctx = spec.ctx();
  PIER_ASSIGN_OR_RETURN(o.kv_dtype, engine::ParseKvDtype(spec.kv_dtype()));
  if (!spec.weights_dtype().empty()) {
    PIER_ASSIGN_OR_RETURN(o.weights_dtype, engine::ParseWeightsDtype(spec.weights_dtype()));
  }
  o.kv_policy = spec.kv_elastic() ? engine::KvPolicy::kElastic : engine::KvPolicy::kStatic;
  o.kv_min = spec.kv_min_bytes() > 0 ? engine::KvSize::Bytes(spec.kv_min_bytes())
                                     : engine::KvSize::Tokens(spec.kv_min_tokens());
  o.kv_max = spec.kv_max_bytes() > 0 ? engine::KvSize::Bytes(spec.kv_max_bytes())
                                     : engine::KvSize::Tokens(spec.kv_max_tokens());
  o.max_batched_tokens = spec.max_batched_tokens();
  o.prefill_chunk_while_decoding = spec.prefill_chunk_while_decoding();
  o.max_seqs = spec.max_seqs();
  o.qos_reserve = spec.qos_reserve();
  if (!(o.qos_reserve >= 0 && o.qos_reserve <= 0.5)) {
    return InvalidArgumentError("load spec: qos_reserve " + std::to_string(o.qos_reserve) +
                                " is not a share in [0, 0.5]");
  }
  o.qos = !spec.qos_off();
  o.qos_stop_steps = !spec.qos_steps_run_to_end();
  if (!spec.device().empty()) {
    if (spec.device() != "cpu" && CudaOrdinalOf(spec.device()) < 0) {
      return InvalidArgumentError("LoadSpec: device '" + spec.device() + "' is not cpu or cuda:N");
    }
    o.device = spec.device();
  }
  o.adaptive_batching = spec.adaptive_batching();
  o.min_batched_tokens = spec.min_batched_tokens();
  o.max_prefill_chunk = spec.max_prefill_chunk();
  o.max_queued = spec.max_queued();
  o.swap_space_bytes = spec.swap_space_bytes();
  o.kv_idle_release = std::chrono::milliseconds(std::max<int64_t>(0, spec.kv_idle_release_ms()));
  if (o.path.empty() || o.threads < 1 || o.ctx < 1 || o.max_batched_tokens < 1 || o.max_seqs < 1 ||
      o.max_queued < 0 || o.prefill_chunk_while_decoding < 0 || o.min_batched_tokens < 0 ||
      o.max_prefill_chunk < 0 || o.kv_min.tokens < 0 || o.kv_max.tokens < 0) {
    return InvalidArgumentError("worker load spec for " + o.id +
                                ": a path, and positive threads, ctx and step limits are needed");
  }
  return o;
}

}  // namespace pier::serving
