#include "engine/engine_client.h"

#include <utility>

namespace pier::engine {

Result<std::shared_ptr<RequestHandle>> InProcessEngineClient::Submit(Request request) {
  if (max_waiting_ > 0) {
    const EngineStats stats = engine_->Stats();
    if (stats.waiting >= max_waiting_) {
      return ResourceExhaustedError("queue full: " + std::to_string(stats.waiting) +
                                    " requests are waiting (limit " + std::to_string(max_waiting_) +
                                    ")");
    }
  }
  return engine_->Submit(std::move(request));
}

}  // namespace pier::engine
