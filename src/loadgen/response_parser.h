// HTTP/1.1 client-side parsing, shared by the load generator (bench/loadgen) and the tests'
// clients: the pieces of a response head (status line, header line, chunk-size line), and
// two incremental parsers built on them: an HTTP/1.1 response parser
// (status line, headers, then a body framed by Content-Length, chunked transfer coding or
// the connection's end) and a Server-Sent Events parser.
//
// Both take bytes in whatever pieces the socket delivers them (a split may fall anywhere,
// even inside "\r\n") and hand out complete units through callbacks as soon as they are
// whole, so streamed tokens are timestamped when they arrive rather than when the
// response ends. Each parser owns its buffers; one instance serves one response and is
// used by one thread at a time.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace pier::loadgen {

struct StatusLine {
  int code = 0;
  std::string reason;
};
// "HTTP/1.x NNN reason" (the reason may be empty or absent); INVALID_ARGUMENT naming the
// line otherwise.
[[nodiscard]] Result<StatusLine> ParseStatusLine(std::string_view line);
// "Name: value" into (lower-cased name, value without surrounding whitespace).
[[nodiscard]] Result<std::pair<std::string, std::string>> ParseHeaderLine(std::string_view line);
// A chunk-size line ("1a", "1a;ext=1") into the chunk's size.
[[nodiscard]] Result<size_t> ParseChunkSizeLine(std::string_view line);

// Parses one HTTP/1.1 response. Body bytes (after de-chunking) go to the body callback in
// the order they arrive; the callback may be empty to drop them.
class HttpResponseParser {
 public:
  using BodyCallback = std::function<void(std::string_view bytes)>;

  explicit HttpResponseParser(BodyCallback on_body = {}) : on_body_(std::move(on_body)) {}

  // Consumes `bytes`. Returns an error for a malformed response; after an error or after
  // the response is complete, further calls return an error too.
  Status Feed(std::string_view bytes);

  // Tells the parser that the peer closed the connection. OK when the response is complete
  // (a body delimited by the close ends here); otherwise an error saying what was missing.
  Status Finish();

  bool headers_done() const { return state_ > State::kHeaders; }
  bool complete() const { return state_ == State::kDone; }
  int status_code() const { return status_code_; }
  const std::string& reason() const { return reason_; }
  // Header names are lower-cased; values have surrounding whitespace removed.
  const std::vector<std::pair<std::string, std::string>>& headers() const { return headers_; }
  // The first value of a header (name in any case), or empty.
  std::string_view Header(std::string_view name) const;

  // Largest status line plus headers accepted, in bytes.
  static constexpr size_t kMaxHeaderBytes = 64 * 1024;

 private:
  enum class State {
    kStatusLine,
    kHeaders,
    kBodyLength,      // Content-Length body: `remaining_` bytes left
    kBodyUntilClose,  // no length: the body ends when the peer closes
    kChunkSize,       // reading a chunk-size line
    kChunkData,       // inside a chunk: `remaining_` bytes left
    kChunkDataEnd,    // the CRLF after a chunk's data
    kTrailers,        // trailer lines after the last chunk, up to an empty line
    kDone,
    kError,
  };

  Status Fail(std::string message);
  Status OnStatusLine(std::string_view line);
  Status OnHeaderLine(std::string_view line);
  Status StartBody();
  void EmitBody(std::string_view bytes);

  BodyCallback on_body_;
  State state_ = State::kStatusLine;
  std::string line_;  // a partial line carried between Feed calls
  size_t header_bytes_ = 0;
  int status_code_ = 0;
  std::string reason_;
  std::vector<std::pair<std::string, std::string>> headers_;
  size_t remaining_ = 0;
  std::string error_;
};

// One Server-Sent Event: the `event` field (empty when absent) and the `data` lines joined
// with "\n". A field named `error` (llama.cpp's server sends `error: {...}` lines) is
// reported as an event named "error" carrying that line.
struct SseEvent {
  std::string event;
  std::string data;
};

// Parses a text/event-stream body. Lines end with "\n", "\r\n" or "\r"; an empty line
// dispatches the event gathered so far; lines starting with ':' are comments.
class SseParser {
 public:
  using EventCallback = std::function<void(const SseEvent& event)>;

  explicit SseParser(EventCallback on_event) : on_event_(std::move(on_event)) {}

  void Feed(std::string_view bytes);
  // Dispatches an event whose closing empty line never came (the stream ended after it).
  void Finish();

 private:
  void ProcessLine(std::string_view line);
  void Dispatch();

  EventCallback on_event_;
  std::string line_;
  bool last_was_cr_ = false;  // a "\r" ended the previous piece; a leading "\n" belongs to it
  SseEvent pending_;
  bool has_data_ = false;
};

}  // namespace pier::loadgen
