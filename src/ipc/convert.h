// The engine's types as worker.proto's messages and back. Decoding checks what a peer could
// get wrong (a priority or finish reason out of range, a negative count) and answers
// INVALID_ARGUMENT naming the field, so a confused or hostile peer cannot put a value into
// the engine that the engine's own types would never hold.
//
// ToProto overwrites all of `out`. Thread-safety: plain functions on values.
#pragma once

#include "common/status.h"
#include "engine/core/engine.h"
#include "engine/request.h"
#include "ipc/worker.pb.h"

namespace pier::ipc {

void ToProto(const engine::Request& request, proto::Request* out);
[[nodiscard]] Result<engine::Request> FromProto(const proto::Request& request);

void ToProto(const engine::Event& event, const std::string& request_id, proto::Event* out);
[[nodiscard]] Result<engine::Event> FromProto(const proto::Event& event);

void ToProto(const engine::EngineStats& stats, proto::Stats* out);
engine::EngineStats FromProto(const proto::Stats& stats);

// A Status as a SubmitReply's code and message, and back (an unknown code reads INTERNAL).
void ToProto(const Status& status, const std::string& request_id, proto::SubmitReply* out);
Status FromProto(const proto::SubmitReply& reply);

}  // namespace pier::ipc
