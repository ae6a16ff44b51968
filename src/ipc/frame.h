// Frames between the supervisor and a worker process (worker.proto): a 4-byte little-endian
// length, then one serialized proto::Frame of that many bytes. FrameDecoder turns a byte
// stream back into frames and refuses what is not one (a length above kMaxFrameBytes, bytes
// that do not parse, a frame with no known body: an unknown message type) with a message
// naming what was wrong; a bad frame ends the conversation (the decoder stays failed), since
// nothing after it can be trusted to be aligned. Channel sends and receives whole frames over
// a connected socket.
//
// Thread-safety: FrameDecoder is not thread-safe. Channel::Send may be called from any thread
// (one mutex: frames never interleave); Receive from one reader thread; Shutdown from any.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/mutex.h"
#include "common/status.h"
#include "ipc/worker.pb.h"

namespace pier::ipc {

// Changes whenever a message's meaning does; both sides must agree (checked at the handshake).
// 2: elastic KV (Budget, MoreMemory); 3: output constraints in Request (an older worker would
// ignore them and answer unconstrained); 5: a model's settings as one JSON object
// (LoadSpec.settings_json); 6: tensor models (TensorSubmit, TensorResult, TensorCancel).
inline constexpr uint32_t kProtocolVersion = 6;
// The largest frame either side accepts (an Events batch of long prompts' logprobs fits).
inline constexpr size_t kMaxFrameBytes = size_t{64} << 20;

// The frame's bytes as they go on the wire.
std::string EncodeFrame(const proto::Frame& frame);

// The name of a frame's body ("submit", "events", ...), "none" when it has none.
std::string_view FrameName(const proto::Frame& frame);

class FrameDecoder {
 public:
  void Append(std::string_view bytes);
  // The next complete frame, or nullopt until more bytes arrive. DATA_LOSS for a frame that
  // is not one (every later call returns the same error).
  [[nodiscard]] Result<std::optional<proto::Frame>> Next();
  // Bytes received and not yet returned as frames (a truncated frame at EOF leaves some).
  size_t buffered() const { return buffer_.size() - offset_; }

 private:
  std::string buffer_;
  size_t offset_ = 0;
  std::optional<Status> failed_;
};

class Channel {
 public:
  // Takes ownership of `fd`, a connected stream socket.
  explicit Channel(int fd) : fd_(fd) {}
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // The whole frame, or IO_ERROR / UNAVAILABLE (peer gone). Never raises SIGPIPE.
  [[nodiscard]] Status Send(const proto::Frame& frame);
  // The next frame; waits. UNAVAILABLE "closed" at a clean end of stream, DATA_LOSS for a bad
  // or truncated frame, IO_ERROR for a failed read.
  [[nodiscard]] Result<proto::Frame> Receive();
  // Wakes a Receive blocked in another thread (it then returns UNAVAILABLE) and makes Send
  // fail; the fd stays open until destruction.
  void Shutdown();
  int fd() const { return fd_; }

 private:
  const int fd_;
  Mutex send_mutex_;
  FrameDecoder decoder_;  // the reader thread's
};

}  // namespace pier::ipc
