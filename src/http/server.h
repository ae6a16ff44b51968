// HttpServer: the HTTP/1.1 server of `pier serve` (Boost.Beast + Asio with C++20 coroutines;
// Asio stays inside server*.cpp). A few I/O threads serve thousands of connections: no thread
// per connection, no thread blocked on a client or on the engine.
//
// Per connection: keep-alive; the request head must arrive within header_timeout and the
// whole request within request_timeout (a client sending byte by byte holds no thread and is
// cut off with 408); a body announced or grown beyond max_body_bytes (or its route's own limit,
// Router::BodyLimitFor) gets 413 as soon as that is known, a head beyond max_header_bytes 431, a
// malformed request 400, and so does one whose client ended its input (a half-close) before the
// request was complete (all then close); an idle keep-alive connection closes after idle_timeout (a
// new one that sends nothing, after header_timeout). HTTP/1.0 clients get streamed bodies collected
// (no chunked encoding). Each request goes to the Router; a response with a ResponseStream is
// waited for asynchronously (see http_types.h): while it runs, the server watches the socket, and a
// client that disconnects has its stream cancelled at once (the engine request is aborted). A slow
// reader: when the stream's backlog() passes max_stream_backlog, or one write takes longer than
// write_timeout, the stream is cancelled with a logged reason and the connection closed; the engine
// never waits. Connections beyond max_connections get 503 and are closed.
//
// Shutdown(grace): stop accepting (with paths_served_while_draining: only once the grace
// period ends, so probes on new connections are answered); requests arriving get 503
// ("shutting down") and Connection: close, except those paths; in-flight responses may finish until
// the grace period ends; then remaining streams are cancelled and each gets a terminal event: a
// chunked stream its ResponseStream::CancelWithEnding bytes and the chunked terminator, a collected
// one a complete 503; then connections close; I/O threads are joined.
//
// Disconnects: a client that half-closes its sending side after a complete request still
// gets its response; a reset, or a write that fails, is a disconnect. (An SSE stream whose
// client half-closed gets one SSE comment, so that a peer that closed entirely answers with
// a reset at once.)
//
// Ownership: owns its I/O threads and sockets; shares the Router. Thread-safety: Shutdown,
// Stats and port may be called from any thread; Shutdown not from an I/O thread (it joins
// them: a call from a handler aborts).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "http/routes.h"

namespace pier::http {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;  // 0: any free port (read it back with port())
  int io_threads = 1;
  size_t max_body_bytes = size_t{4} << 20;  // unless the route says (Router::SetBodyLimit)
  size_t max_header_bytes = size_t{16} << 10;
  std::chrono::milliseconds header_timeout{10'000};   // first byte -> end of the head
  std::chrono::milliseconds request_timeout{30'000};  // first byte -> end of the body
  std::chrono::milliseconds idle_timeout{60'000};     // keep-alive wait for the next request
  std::chrono::milliseconds write_timeout{30'000};    // one write to the client
  size_t max_stream_backlog = 4096;                   // ResponseStream::backlog() limit
  size_t max_connections = 4096;
  // SO_SNDBUF of each connection (the kernel doubles it); 0 keeps the kernel's autotuning,
  // which lets a stalled client absorb megabytes before write_timeout can act.
  size_t send_buffer_bytes = size_t{32} << 10;
  // Still dispatched while shutting down (liveness and readiness probes); others get 503.
  std::vector<std::string> paths_served_while_draining;
  // Origins allowed by CORS (cors.h), or "*"; empty: CORS off (no headers, no preflight).
  std::vector<std::string> cors_origins;
  // Called on an I/O thread after every response is complete (or abandoned: status as sent,
  // or 499 when the client went away first). For metrics and access logs; must be quick.
  // Details: a stream cancelled by shutdown before anything was sent reports 503; errors the
  // server answers itself (400, 408, 413, 431) report the request as far as it was parsed
  // (method/path may be empty); a connection refused over max_connections reports 503 with an
  // empty request (remote_address only). `model`: the response's HttpResponse::model (of a
  // deferred response, the last one that named a model); empty for the server's own answers.
  // Exceptions it throws are logged and swallowed.
  std::function<void(const HttpRequest& request, int status, std::string_view model)> on_response;
  // Called on an I/O thread for each request refused with a whole (not streamed) 429 or 503
  // answer, with that answer (its body says why): the event log's request_refused. Must be
  // quick; exceptions it throws are logged and swallowed.
  std::function<void(const HttpRequest& request, const HttpResponse& response)> on_refusal;
};

struct HttpServerStats {
  int64_t connections_open = 0;
  int64_t connections_accepted = 0;
  int64_t connections_refused = 0;  // over max_connections
  int64_t requests = 0;             // handled (any status)
  int64_t streams_active = 0;       // responses waiting on a ResponseStream
  int64_t client_disconnects = 0;   // streams cancelled because the client went away
  int64_t slow_client_aborts = 0;   // streams cancelled for a slow reader
  int64_t timeouts = 0;             // 408s and idle closes (no request within the timeout)
};

class HttpServer {
 public:
  // Binds and listens, then starts the I/O threads. INVALID_ARGUMENT for a bad host or
  // option, UNAVAILABLE when the address cannot be bound (message names it and the reason,
  // e.g. "127.0.0.1:8080: address already in use").
  [[nodiscard]] static Result<std::unique_ptr<HttpServer>> Start(
      const HttpServerOptions& options, std::shared_ptr<const Router> router);
  // Shutdown with no grace period if it was not called.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  uint16_t port() const;
  // Graceful shutdown (see above); returns when the I/O threads have ended. Idempotent.
  void Shutdown(std::chrono::milliseconds grace);
  bool shutting_down() const;
  HttpServerStats Stats() const;

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pier::http
