// Internals of HttpServer, shared by server.cpp (listener, shutdown) and server_connection.cpp
// (one coroutine per connection). Includes Asio: include it only from src/http/server*.cpp.
//
// ServerState holds what the listener and every connection share (options, router, counters,
// the registry of open connections). Connections hold it by shared_ptr, so a connection whose
// coroutine frame is destroyed late (while the io_context is torn down) never dangles.
//
// Connection serves one socket. All its members are touched only on its strand (the socket's
// executor), except Close() and DisableWake(), which say when they may be called.
#pragma once

// Boost 1.74's awaitable.hpp uses std::exchange without including <utility> (ARCHITECTURE.md).
// clang-format off
#include <utility>
// clang-format on

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "common/mutex.h"
#include "http/cors.h"
#include "http/routes.h"
#include "http/server.h"

namespace pier::http::server_internal {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

class Connection;

struct ServerState {
  ServerState(HttpServerOptions options_in, std::shared_ptr<const Router> router_in)
      : options(std::move(options_in)), router(std::move(router_in)) {}

  const HttpServerOptions options;
  const std::shared_ptr<const Router> router;
  const CorsPolicy cors{options.cors_origins};

  std::atomic<bool> shutting_down{false};
  std::atomic<int64_t> connections_accepted{0};
  std::atomic<int64_t> connections_refused{0};
  std::atomic<int64_t> requests{0};
  std::atomic<int64_t> streams_active{0};
  std::atomic<int64_t> client_disconnects{0};
  std::atomic<int64_t> slow_client_aborts{0};
  std::atomic<int64_t> timeouts{0};

  // Registry and in-flight count; `changed` is notified whenever either shrinks (Shutdown
  // waits on it from a non-I/O thread).
  Mutex mu;
  std::condition_variable changed;
  std::unordered_map<const Connection*, std::weak_ptr<Connection>> connections PIER_GUARDED_BY(mu);
  int64_t in_flight PIER_GUARDED_BY(mu) = 0;  // requests read and not yet fully answered

  void Register(const std::shared_ptr<Connection>& connection);
  void Unregister(const Connection* connection);
  int64_t ConnectionsOpen();
  void BeginRequest();
  void EndRequest();
  // Calls options.on_response, swallowing (and logging) anything it throws.
  void ReportResponse(const HttpRequest& request, int status, std::string_view model = {});
  // options.on_refusal, guarded the same way.
  void ReportRefusal(const HttpRequest& request, const HttpResponse& response);
};

// The wake callback handed to a ResponseStream may be called from any thread, also after the
// connection and the whole server are gone: it only posts while `post` is set, and the
// connection clears `post` (under `mu`) before it stops waiting or the io_context dies.
struct WakeSignal {
  std::atomic<bool> pending{false};  // a wake arrived since the last Poll (for the coroutine)
  std::atomic<bool> posted{false};   // an OnWake is queued (coalesces posts)
  Mutex mu;
  std::function<void()> post PIER_GUARDED_BY(mu);
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<ServerState> state, tcp::socket socket);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  const asio::any_io_executor& executor() const { return executor_; }

  // Serves requests until the connection closes, then unregisters it. `self` keeps it alive.
  static asio::awaitable<void> Run(std::shared_ptr<Connection> self);
  // Answers 503 (over max_connections) and closes; the connection is not registered.
  static asio::awaitable<void> RunRefused(std::shared_ptr<Connection> self);

  // Any thread: cancels a stream being waited for ("server shutting down") and closes the
  // socket, which ends the coroutine.
  void Close();
  // Any thread, once the I/O threads have stopped: a late wake() must no longer post.
  void DisableWake();

 private:
  enum class Abort { kNone, kClientGone, kSlowReader, kShutdown };
  enum class ReadResult { kRequest, kClosed, kRejected };
  struct Outcome {
    bool keep_open = false;
    int status = 0;
  };

  asio::awaitable<void> Serve();
  // Reads one request into `request`. kRejected: an error response was sent (and logged to
  // on_response); the connection must close.
  asio::awaitable<ReadResult> ReadRequest(bool first, HttpRequest& request, bool& keep_alive);
  asio::awaitable<ReadResult> Reject(const HttpRequest& request, int status,
                                     std::string_view message);
  asio::awaitable<Outcome> Respond(const HttpRequest& request, bool keep_alive);
  asio::awaitable<Outcome> SendPlain(const HttpRequest& request, const HttpResponse& response,
                                     bool keep_alive);
  // `deferred`: the stream is a DeferredStream; when it is done nothing is written (the
  // caller sends the response it resolved to).
  asio::awaitable<Outcome> SendStream(const HttpRequest& request, const HttpResponse& response,
                                      bool keep_alive, bool deferred = false);
  // Waits for a deferred response. Nullopt when the wait ended otherwise (client gone, server
  // shutting down: `outcome` then says what was sent, if anything).
  asio::awaitable<std::optional<HttpResponse>> AwaitDeferred(
      const HttpRequest& request, std::shared_ptr<DeferredResponse> deferred, Outcome* outcome);
  // Writes `data` under write_timeout; false on failure (then the socket is closed). While a
  // stream is active a failure aborts it (slow reader on timeout, else client gone).
  asio::awaitable<bool> Write(std::string_view data);
  // Half-closes, then reads and discards what the client still sends for a short while, so
  // that closing with unread input does not reset the connection before it read our answer.
  asio::awaitable<void> LingeringClose();

  // Deadlines: on expiry the socket's pending operations are cancelled (not the socket
  // closed, as beast::tcp_stream would do), so that a 408 can still be written.
  void ArmDeadline(Clock::time_point deadline);
  void DisarmDeadline();

  // Stream plumbing, on the strand.
  void OnWake();
  void WatchForDisconnect();
  void OnReadable(uint64_t generation, const boost::system::error_code& ec);
  // After a half-close: checks every 100 ms whether the socket was reset (client gone).
  void CheckHangup(uint64_t generation);
  void AbortStream(Abort kind, std::string_view reason);
  void CloseSocket();

  const std::shared_ptr<ServerState> state_;
  const asio::any_io_executor executor_;
  tcp::socket socket_;
  std::string remote_;  // "127.0.0.1:53122"
  bool http11_ = true;  // the current request's version is HTTP/1.1 (chunked allowed)
  beast::flat_buffer buffer_;
  std::optional<beast::http::request_parser<beast::http::string_body>> parser_;

  asio::steady_timer deadline_timer_;
  uint64_t deadline_generation_ = 0;
  bool timed_out_ = false;

  // The response stream being waited for, if any.
  std::shared_ptr<ResponseStream> stream_;
  std::shared_ptr<WakeSignal> wake_signal_;
  asio::steady_timer wake_timer_;  // the coroutine waits on it; a wake cancels it
  asio::steady_timer hangup_timer_;
  bool writing_ = false;
  bool sse_ = false;                  // the stream is text/event-stream, chunked
  bool stream_headers_sent_ = false;  // its head went out (a probe chunk may be sent)
  bool probe_wanted_ = false;         // the client half-closed: send one SSE comment
  std::string shutdown_ending_;       // what CancelWithEnding returned at shutdown
  uint64_t watch_generation_ = 0;
  bool watching_ = false;
  Abort abort_ = Abort::kNone;
  bool closed_ = false;
};

}  // namespace pier::http::server_internal
