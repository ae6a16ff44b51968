// libFuzzer target: any byte stream as what a worker (or the supervisor) receives
// (ipc/frame.h), fed in pieces whose sizes come from the input's first byte. The decoder must
// return frames with a known body or a DATA_LOSS error (after which it stays failed), and
// every accepted frame's events and requests must convert or be refused by name, never crash.
// Built only with -DPIER_FUZZ=ON and clang:
//   build-fuzz/tests/fuzz/ipc_frame_fuzzer -max_total_time=60
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "ipc/convert.h"
#include "ipc/frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = 1 + data[0] % 64;
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  pier::ipc::FrameDecoder decoder;
  bool failed = false;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    decoder.Append(bytes.substr(at, piece));
    while (true) {
      auto next = decoder.Next();
      if (!next.ok()) {
        if (next.status().code() != pier::StatusCode::kDataLoss) std::abort();
        failed = true;
        break;
      }
      if (failed) std::abort();  // a failed decoder never yields a frame again
      if (!next->has_value()) break;
      const pier::ipc::proto::Frame& frame = **next;
      if (frame.body_case() == pier::ipc::proto::Frame::BODY_NOT_SET) std::abort();
      if (frame.has_submit()) (void)pier::ipc::FromProto(frame.submit().request());
      for (const auto& event : frame.events().events()) (void)pier::ipc::FromProto(event);
      (void)pier::ipc::FromProto(frame.stats());
      (void)pier::ipc::FromProto(frame.submit_reply());
    }
    if (failed) break;
  }
  return 0;
}
