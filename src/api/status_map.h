// The one map from a Pier Status to the HTTP status the API answers with. Every route that
// turns a Status from below (an engine's or batcher's Submit, the model manager, a key's
// limits) into an answer reads its number here; the gRPC adapter's twin is
// grpc/grpc_status.h's GrpcStatusOf.
//
//   INVALID_ARGUMENT, UNSUPPORTED   400  the request is wrong for this server or model
//   NOT_FOUND                       404  no such model, route or object
//   FAILED_PRECONDITION             409  not in a state that allows it (e.g. a model loading)
//   RESOURCE_EXHAUSTED              429  a queue, rate or key limit: retry later
//   UNAVAILABLE                     503  not ready, draining, shutting down
//   DATA_LOSS, IO_ERROR, INTERNAL   500
//
// A route may still answer differently where the meaning differs, and says why beside it
// (the model manager's RESOURCE_EXHAUSTED, memory that cannot hold a load now, is 503).
#pragma once

#include "common/status.h"

namespace pier::api {

int HttpStatusOf(const Status& status);

}  // namespace pier::api
