// The gRPC twin of api/status_map.h: the one map from a Pier Status to the gRPC status the
// KServe v2 gRPC adapter answers with (same message).
//
//   INVALID_ARGUMENT, FAILED_PRECONDITION  INVALID_ARGUMENT
//   UNSUPPORTED                            UNIMPLEMENTED
//   NOT_FOUND                              NOT_FOUND
//   RESOURCE_EXHAUSTED                     RESOURCE_EXHAUSTED
//   UNAVAILABLE                            UNAVAILABLE
//   DATA_LOSS, IO_ERROR, INTERNAL          INTERNAL
#pragma once

#include <grpcpp/support/status.h>

#include "common/status.h"

namespace pier::grpc_api {

grpc::Status GrpcStatusOf(const Status& status);

}  // namespace pier::grpc_api
