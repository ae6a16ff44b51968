#include "ipc/frame.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pier::ipc {

std::string EncodeFrame(const proto::Frame& frame) {
  const std::string body = frame.SerializeAsString();
  PIER_CHECK(body.size() <= kMaxFrameBytes, "IPC frame larger than kMaxFrameBytes");
  const auto n = static_cast<uint32_t>(body.size());
  std::string bytes(4, '\0');
  for (int i = 0; i < 4; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return bytes + body;
}

std::string_view FrameName(const proto::Frame& frame) {
  switch (frame.body_case()) {
    case proto::Frame::kHello:
      return "hello";
    case proto::Frame::kReady:
      return "ready";
    case proto::Frame::kRefused:
      return "refused";
    case proto::Frame::kSubmit:
      return "submit";
    case proto::Frame::kSubmitReply:
      return "submit_reply";
    case proto::Frame::kAbort:
      return "abort";
    case proto::Frame::kAbortAll:
      return "abort_all";
    case proto::Frame::kEvents:
      return "events";
    case proto::Frame::kStats:
      return "stats";
    case proto::Frame::kShutdown:
      return "shutdown";
    case proto::Frame::kBudget:
      return "budget";
    case proto::Frame::kMoreMemory:
      return "more_memory";
    case proto::Frame::kTensorSubmit:
      return "tensor_submit";
    case proto::Frame::kTensorResult:
      return "tensor_result";
    case proto::Frame::kTensorCancel:
      return "tensor_cancel";
    case proto::Frame::BODY_NOT_SET:
      break;
  }
  return "none";
}

void FrameDecoder::Append(std::string_view bytes) {
  if (offset_ > 0 && offset_ == buffer_.size()) {
    buffer_.clear();
    offset_ = 0;
  }
  buffer_.append(bytes);
}

Result<std::optional<proto::Frame>> FrameDecoder::Next() {
  if (failed_) return *failed_;
  auto fail = [this](std::string message) -> Status {
    failed_ = DataLossError("IPC: " + std::move(message));
    return *failed_;
  };
  if (buffered() < 4) return std::optional<proto::Frame>();
  const auto* p = reinterpret_cast<const unsigned char*>(buffer_.data() + offset_);
  const uint32_t n =
      uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
  if (n > kMaxFrameBytes) {
    return fail("frame of " + std::to_string(n) + " bytes is larger than the limit of " +
                std::to_string(kMaxFrameBytes));
  }
  if (buffered() - 4 < n) return std::optional<proto::Frame>();
  proto::Frame frame;
  if (!frame.ParseFromArray(buffer_.data() + offset_ + 4, static_cast<int>(n))) {
    return fail("a frame of " + std::to_string(n) + " bytes does not parse");
  }
  if (frame.body_case() == proto::Frame::BODY_NOT_SET) {
    return fail("a frame of " + std::to_string(n) +
                " bytes has no known message (unknown message type)");
  }
  offset_ += 4 + n;
  // Keep the buffer from growing without bound while frames stream through.
  if (offset_ > (size_t{1} << 20) && offset_ * 2 > buffer_.size()) {
    buffer_.erase(0, offset_);
    offset_ = 0;
  }
  return std::optional<proto::Frame>(std::move(frame));
}

Channel::~Channel() { ::close(fd_); }

Status Channel::Send(const proto::Frame& frame) {
  const std::string bytes = EncodeFrame(frame);
  MutexLock lock(send_mutex_);
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      if (errno == EPIPE || errno == ECONNRESET) return UnavailableError("IPC: peer closed");
      return IoError(std::string("IPC: send failed: ") + std::strerror(errno));
    }
    sent += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Result<proto::Frame> Channel::Receive() {
  char chunk[64 * 1024];
  while (true) {
    PIER_ASSIGN_OR_RETURN(std::optional<proto::Frame> frame, decoder_.Next());
    if (frame.has_value()) return std::move(*frame);
    const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      if (errno == ECONNRESET) return UnavailableError("IPC: peer closed (connection reset)");
      return IoError(std::string("IPC: receive failed: ") + std::strerror(errno));
    }
    if (n == 0) {
      if (decoder_.buffered() > 0) {
        return DataLossError("IPC: the peer closed in the middle of a frame (" +
                             std::to_string(decoder_.buffered()) + " bytes of it received)");
      }
      return UnavailableError("IPC: peer closed");
    }
    decoder_.Append(std::string_view(chunk, static_cast<size_t>(n)));
  }
}

void Channel::Shutdown() { ::shutdown(fd_, SHUT_RDWR); }

}  // namespace pier::ipc
