// A tensor model's fallback under load (models.yaml `fallback:` on an ONNX model, issue #45),
// as the OpenAI routes do for LLMs (serving/fallback_switch.h): while the primary is loaded
// past `fallback_load`, requests of the classes it may divert go to the fallback model, which
// names itself in the answer (`model_name`) with the header `X-Pier-Fallback: <primary>`;
// each diversion is counted in pier_qos_requests_total{outcome="fallback_load"|...}.
//
// A tensor model's load is the LLM's formula with max_seqs replaced by what its instances run
// at once: (items waiting + running) / (max_batch_size x instances) (1 for a model that does
// not batch); the predicted wait is the waiting batches times a batch's mean compute time. The
// fallback must take the same request: its inputs (as clients see them) named and typed as the
// primary's; one that does not, or is not loaded, leaves the request on the primary
// (outcome "fallback_unavailable"). A client keeps the primary with `X-Pier-No-Fallback: 1`
// (HTTP) or the `x-pier-no-fallback` metadata entry (gRPC, whose answer names the primary in
// the initial metadata `x-pier-fallback`).
//
// Thread-safety: ChooseTensorModel may be called from any thread (the switch locks).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "api/auth/api_keys.h"
#include "serving/fallback_switch.h"
#include "serving/model_registry.h"
#include "serving/serving_metrics.h"

namespace pier::api {

struct TensorFallbackContext {
  // The model's fallback, from its spec (null or nullopt: none).
  std::function<std::optional<serving::FallbackRoute>(const std::string& model_id)> route_of;
  serving::FallbackSwitch* fallback_switch = nullptr;
  serving::ModelRegistry* registry = nullptr;
  serving::ServingMetrics* metrics = nullptr;  // may be null
};

// Whether a request's `X-Pier-No-Fallback` header (or gRPC metadata entry), if any, lets it go
// to a fallback: absent, "0" or "false" does.
bool FallbackAllowed(std::optional<std::string_view> no_fallback);

// The model that answers a request of batcher `priority` (3 critical .. 0 low) for ready
// tensor model `primary`: its fallback while diverted and `allowed` (and `*diverted_from` set
// to the primary's id), else `primary`.
serving::ModelRef ChooseTensorModel(const TensorFallbackContext& context, bool allowed,
                                    const serving::ModelRef& primary, int priority,
                                    const Principal& principal, std::string* diverted_from);

}  // namespace pier::api
