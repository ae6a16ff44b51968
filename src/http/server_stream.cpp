// Streamed responses of one connection (see server_connection.h): waiting on a ResponseStream
// without holding a thread, writing what it produces (chunked, or collected for HTTP/1.0 and
// non-streaming bodies), ending it cleanly at shutdown, and noticing a client that went away
// (a reset, a failed write, or a hangup after a half-close) or reads too slowly.
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <boost/asio/post.hpp>
#include <cerrno>
#include <string>

#include "http/server_connection.h"
#include "http/server_wire.h"

namespace pier::http::server_internal {

using boost::system::error_code;

// A DeferredResponse run as a (non-chunked) ResponseStream, so that waiting for it uses the
// stream machinery: wakes, disconnect detection, cancellation at shutdown. Its last Poll keeps
// the response the deferred answered; nothing of it is written by SendStream.
class DeferredStream final : public ResponseStream {
 public:
  explicit DeferredStream(std::shared_ptr<DeferredResponse> deferred)
      : deferred_(std::move(deferred)) {}
  void Start(std::function<void()> wake) override { deferred_->Start(std::move(wake)); }
  StreamChunk Poll() override {
    if (!result_.has_value()) result_ = deferred_->Poll();
    StreamChunk chunk;
    chunk.done = result_.has_value();
    return chunk;
  }
  size_t backlog() const override { return 0; }
  void Cancel(std::string_view reason) override { deferred_->Cancel(reason); }
  std::optional<HttpResponse>& result() { return result_; }

 private:
  std::shared_ptr<DeferredResponse> deferred_;
  std::optional<HttpResponse> result_;
};

asio::awaitable<std::optional<HttpResponse>> Connection::AwaitDeferred(
    const HttpRequest& request, std::shared_ptr<DeferredResponse> deferred, Outcome* outcome) {
  auto stream = std::make_shared<DeferredStream>(std::move(deferred));
  HttpResponse waiting;
  waiting.stream = stream;
  waiting.chunked = false;
  *outcome = co_await SendStream(request, waiting, /*keep_alive=*/true, /*deferred=*/true);
  co_return std::move(stream->result());
}

asio::awaitable<Connection::Outcome> Connection::SendStream(const HttpRequest& request,
                                                            const HttpResponse& response,
                                                            bool keep_alive, bool deferred) {
  // HTTP/1.0 has no chunked encoding: collect the body instead.
  const bool chunked = response.chunked && http11_;
  int status = response.status;
  bool headers_sent = false;
  bool done = false;
  bool failed = false;
  std::string collected;
  std::vector<std::pair<std::string, std::string>> extra_headers;  // the last chunk's

  stream_ = response.stream;
  abort_ = Abort::kNone;
  shutdown_ending_.clear();
  sse_ = chunked && response.content_type.starts_with("text/event-stream");
  stream_headers_sent_ = false;
  probe_wanted_ = false;
  wake_signal_ = std::make_shared<WakeSignal>();
  {
    MutexLock lock(wake_signal_->mu);
    wake_signal_->post = [executor = executor_, weak = weak_from_this()] {
      asio::post(executor, [weak] {
        if (auto self = weak.lock()) self->OnWake();
      });
    };
  }
  ++state_->streams_active;
  // Runs also if the frame is destroyed mid-stream: nothing may post to this connection later.
  struct StreamScope {
    Connection* c;
    ~StreamScope() {
      c->DisableWake();
      c->stream_.reset();
      c->watching_ = false;
      ++c->watch_generation_;
      c->hangup_timer_.cancel();
      --c->state_->streams_active;
    }
  } scope{this};

  auto wake = [signal = wake_signal_] {
    signal->pending.store(true);
    if (signal->posted.exchange(true)) return;
    MutexLock lock(signal->mu);
    if (signal->post) signal->post();
  };
  try {
    stream_->Start(wake);
  } catch (const std::exception& e) {
    spdlog::warn("HTTP {} {} {}: stream failed to start: {}", remote_, request.method,
                 request.target, e.what());
    failed = true;
  }
  WatchForDisconnect();
  if (!failed && chunked) {
    headers_sent = true;
    std::string head = ResponseHead(status, response, keep_alive);
    head += "Transfer-Encoding: chunked\r\n\r\n";
    co_await Write(head);
    stream_headers_sent_ = true;
  }

  error_code ec;
  while (!failed && abort_ == Abort::kNone) {
    wake_signal_->pending.store(false);
    StreamChunk chunk;
    try {
      chunk = stream_->Poll();
    } catch (const std::exception& e) {
      spdlog::warn("HTTP {} {} {}: stream failed: {}", remote_, request.method, request.target,
                   e.what());
      failed = true;
      break;
    }
    if (chunked) {
      if (!chunk.data.empty()) {
        const std::string frame = ChunkFrame(chunk.data);
        const bool written = co_await Write(frame);
        if (!written) break;
      }
      if (chunk.done) {
        stream_.reset();  // finished: a failure of the last write must not cancel it
        done = co_await Write("0\r\n\r\n");
        break;
      }
    } else {
      collected += chunk.data;
      if (chunk.done) {
        if (chunk.status != 0) status = chunk.status;
        extra_headers = std::move(chunk.headers);
        done = true;
        break;
      }
    }
    if (abort_ != Abort::kNone) break;
    if (probe_wanted_ && stream_headers_sent_) {
      // The client half-closed: a comment chunk makes a peer that is gone answer with a
      // reset, which the hangup check then sees.
      probe_wanted_ = false;
      const std::string probe = ChunkFrame(kSseProbe);
      const bool written = co_await Write(probe);
      if (!written) break;
      if (abort_ != Abort::kNone) break;
    }
    if (!wake_signal_->pending.load() && !probe_wanted_) {
      wake_timer_.expires_at(Clock::time_point::max());
      co_await wake_timer_.async_wait(Await(ec));
    }
  }

  // Stop watching the socket (the next request may be read from it).
  watching_ = false;
  ++watch_generation_;
  if (!closed_) socket_.cancel(ec);
  if (failed && abort_ == Abort::kNone) {
    try {
      stream_->Cancel("internal error");
    } catch (...) {
      spdlog::warn("HTTP {}: ResponseStream::Cancel threw", remote_);
    }
  }
  const Abort abort = abort_;
  stream_.reset();  // a final write below is no longer a stream write

  if (abort == Abort::kShutdown && !closed_) {
    // Cancelled at shutdown: end the response so the client can tell, then close.
    if (chunked && headers_sent) {
      std::string ending;
      if (!shutdown_ending_.empty()) ending = ChunkFrame(shutdown_ending_);
      ending += "0\r\n\r\n";
      co_await Write(ending);
      co_return Outcome{false, status};
    }
    const HttpResponse unavailable =
        ErrorResponse(503, "server shutting down: the request was cancelled before it finished");
    const Outcome outcome = co_await SendPlain(request, unavailable, false);
    co_return outcome;
  }

  if (done && deferred) co_return Outcome{true, status};  // the caller sends the answer
  if (done && !chunked) {
    HttpResponse whole;
    whole.status = status;
    whole.content_type = response.content_type;
    whole.headers = response.headers;
    whole.headers.insert(whole.headers.end(), extra_headers.begin(), extra_headers.end());
    whole.body = std::move(collected);
    const Outcome outcome = co_await SendPlain(request, whole, keep_alive);
    co_return outcome;
  }
  if (failed && !headers_sent) {
    const HttpResponse error = ErrorResponse(500, "internal server error");
    const Outcome outcome = co_await SendPlain(request, error, false);
    co_return outcome;
  }
  if (done) co_return Outcome{keep_alive && !closed_, status};
  CloseSocket();
  switch (abort) {
    case Abort::kClientGone:
      co_return Outcome{false, 499};
    case Abort::kShutdown:
      co_return Outcome{false, headers_sent ? status : 503};
    default:
      co_return Outcome{false, headers_sent ? status : 500};
  }
}

void Connection::OnWake() {
  if (wake_signal_ != nullptr) wake_signal_->posted.store(false);
  if (stream_ == nullptr || abort_ != Abort::kNone) return;
  // A write still in progress while the engine keeps producing: the client does not keep up.
  const size_t limit = state_->options.max_stream_backlog;
  if (writing_) {
    const size_t backlog = stream_->backlog();
    if (backlog > limit) {
      AbortStream(Abort::kSlowReader, "client reads too slowly: " + std::to_string(backlog) +
                                          " stream events waiting (limit " + std::to_string(limit) +
                                          ")");
      return;
    }
  }
  wake_timer_.cancel();
}

void Connection::WatchForDisconnect() {
  if (closed_) return;
  watching_ = true;
  const uint64_t generation = ++watch_generation_;
  socket_.async_wait(tcp::socket::wait_read,
                     [self = shared_from_this(), generation](const error_code& ec) {
                       self->OnReadable(generation, ec);
                     });
}

void Connection::OnReadable(uint64_t generation, const error_code& ec) {
  if (generation != watch_generation_ || !watching_ || stream_ == nullptr ||
      abort_ != Abort::kNone || ec == asio::error::operation_aborted) {
    return;
  }
  if (!ec) {
    char byte = 0;
    const ssize_t n = ::recv(socket_.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) {
      // A pipelined request: leave it for the next read and stop watching.
      watching_ = false;
      return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      WatchForDisconnect();
      return;
    }
    if (n == 0) {
      // End of input: the client half-closed its sending side, which HTTP allows after a
      // complete request; it may still read. Only a reset (or a failed write) says it is
      // gone: probe an SSE stream once, and check for a hangup from now on.
      watching_ = false;
      if (sse_) {
        probe_wanted_ = true;
        wake_timer_.cancel();
      }
      CheckHangup(generation);
      return;
    }
  }
  AbortStream(Abort::kClientGone, "client disconnected");
}

void Connection::CheckHangup(uint64_t generation) {
  hangup_timer_.expires_after(kHangupCheckInterval);
  hangup_timer_.async_wait([self = shared_from_this(), generation](const error_code& ec) {
    if (ec || generation != self->watch_generation_ || self->stream_ == nullptr ||
        self->abort_ != Abort::kNone || self->closed_) {
      return;
    }
    pollfd descriptor{self->socket_.native_handle(), 0, 0};
    if (::poll(&descriptor, 1, 0) == 1 && (descriptor.revents & (POLLERR | POLLHUP)) != 0) {
      self->AbortStream(Abort::kClientGone, "client disconnected");
      return;
    }
    self->CheckHangup(generation);
  });
}

void Connection::AbortStream(Abort kind, std::string_view reason) {
  if (stream_ == nullptr || abort_ != Abort::kNone) return;
  abort_ = kind;
  switch (kind) {
    case Abort::kClientGone:
      ++state_->client_disconnects;
      spdlog::debug("HTTP {}: {}; stream cancelled", remote_, reason);
      break;
    case Abort::kSlowReader:
      ++state_->slow_client_aborts;
      spdlog::warn("HTTP {}: {}; stream cancelled, connection closed", remote_, reason);
      break;
    default:
      spdlog::debug("HTTP {}: {}; stream cancelled", remote_, reason);
      break;
  }
  try {
    stream_->Cancel(reason);
  } catch (const std::exception& e) {
    spdlog::warn("HTTP {}: ResponseStream::Cancel threw: {}", remote_, e.what());
  }
  // Ends a pending write or watch; the coroutine wakes and sees abort_.
  CloseSocket();
}

}  // namespace pier::http::server_internal
