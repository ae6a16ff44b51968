#include "grpc/grpc_status.h"

namespace pier::grpc_api {

grpc::Status GrpcStatusOf(const Status& status) {
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  switch (status.code()) {
    case StatusCode::kOk:
      return grpc::Status::OK;
    case StatusCode::kInvalidArgument:
    case StatusCode::kFailedPrecondition:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case StatusCode::kUnsupported:
      code = grpc::StatusCode::UNIMPLEMENTED;
      break;
    case StatusCode::kNotFound:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    case StatusCode::kResourceExhausted:
      code = grpc::StatusCode::RESOURCE_EXHAUSTED;
      break;
    case StatusCode::kUnavailable:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    case StatusCode::kDataLoss:
    case StatusCode::kIoError:
    case StatusCode::kInternal:
      break;
  }
  return grpc::Status(code, status.message());
}

}  // namespace pier::grpc_api
