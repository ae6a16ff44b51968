// Test helpers for HttpServer: a blocking POSIX-socket HTTP client that reads responses
// incrementally, parsing heads and chunk lines with loadgen/response_parser.h (as the load
// generator does) (so tests can observe chunks as they arrive), and a ResponseStream driven by the
// test (Push/Finish from any thread) that records Start/Poll/Cancel.
//
// Thread-safety: TestClient is used by one thread; TestStream may be fed from any thread.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "api/http_types.h"
#include "loadgen/response_parser.h"

namespace pier::http::testing {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct ClientResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::vector<std::string> chunks;  // chunked responses: each chunk's data, in order

  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

class TestClient {
 public:
  // Connects to 127.0.0.1:port; rcvbuf > 0 shrinks the receive buffer first (slow readers).
  explicit TestClient(uint16_t port, int rcvbuf = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~TestClient() { Close(); }
  TestClient(const TestClient&) = delete;
  TestClient& operator=(const TestClient&) = delete;

  bool connected() const { return connected_; }

  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Closes with a reset (SO_LINGER 0), as a client killed mid-request looks to the server.
  void Reset() {
    if (fd_ < 0) return;
    linger hard{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
    Close();
  }

  // Half-close: no more bytes from us; we can still read.
  void ShutdownWrite() {
    if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
  }

  // Everything until the server closes (or the timeout passes).
  std::string ReadAll(milliseconds timeout = milliseconds(10'000)) {
    WaitClosed(timeout);
    std::string all = std::move(buffer_);
    buffer_.clear();
    return all;
  }

  bool Send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  bool SendGet(const std::string& path) {
    return Send("GET " + path + " HTTP/1.1\r\nHost: test\r\n\r\n");
  }

  // Reads one full response (Content-Length, chunked, or until EOF); nullopt on timeout or
  // when the connection ends before a complete response.
  std::optional<ClientResponse> ReadResponse(milliseconds timeout = milliseconds(10'000)) {
    const Clock::time_point deadline = Clock::now() + timeout;
    auto response = ReadHead(deadline);
    if (!response) return std::nullopt;
    if (response->status == 204 || response->status == 304 || response->status < 200) {
      return response;  // no body, whatever the headers say
    }
    if (response->Header("transfer-encoding") == "chunked") {
      for (;;) {
        auto chunk = ReadChunk(deadline);
        if (!chunk) return std::nullopt;
        if (chunk->empty()) break;
        response->body += *chunk;
        response->chunks.push_back(std::move(*chunk));
      }
    } else if (!response->Header("content-length").empty()) {
      const size_t length = std::stoul(response->Header("content-length"));
      while (buffer_.size() < length) {
        if (!Fill(deadline)) return std::nullopt;
      }
      response->body = buffer_.substr(0, length);
      buffer_.erase(0, length);
    } else {
      while (Fill(deadline)) {
      }
      response->body = std::move(buffer_);
      buffer_.clear();
    }
    return response;
  }

  // Status line and headers only.
  std::optional<ClientResponse> ReadHead(Clock::time_point deadline) {
    size_t end;
    while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill(deadline)) return std::nullopt;
    }
    ClientResponse response;
    const std::string head = buffer_.substr(0, end);
    buffer_.erase(0, end + 4);
    size_t line_end = head.find("\r\n");
    auto status = loadgen::ParseStatusLine(head.substr(0, line_end));
    if (!status.ok()) return std::nullopt;
    response.status = status->code;
    while (line_end != std::string::npos) {
      const size_t start = line_end + 2;
      line_end = head.find("\r\n", start);
      auto header =
          loadgen::ParseHeaderLine(std::string_view(head).substr(start, line_end - start));
      if (!header.ok()) return std::nullopt;
      response.headers[header->first] = std::move(header->second);
    }
    return response;
  }

  // One chunk's data ("" for the last chunk); nullopt on timeout or a malformed chunk.
  std::optional<std::string> ReadChunk(Clock::time_point deadline) {
    size_t line_end;
    while ((line_end = buffer_.find("\r\n")) == std::string::npos) {
      if (!Fill(deadline)) return std::nullopt;
    }
    const auto chunk_size =
        loadgen::ParseChunkSizeLine(std::string_view(buffer_).substr(0, line_end));
    if (!chunk_size.ok()) return std::nullopt;
    const size_t size = *chunk_size;
    while (buffer_.size() < line_end + 2 + size + 2) {
      if (!Fill(deadline)) return std::nullopt;
    }
    std::string data = buffer_.substr(line_end + 2, size);
    if (buffer_.compare(line_end + 2 + size, 2, "\r\n") != 0) return std::nullopt;
    buffer_.erase(0, line_end + 2 + size + 2);
    return data;
  }

  // True when the server closed the connection (EOF or reset) before the deadline; any bytes
  // received meanwhile are kept.
  bool WaitClosed(milliseconds timeout = milliseconds(10'000)) {
    const Clock::time_point deadline = Clock::now() + timeout;
    while (Fill(deadline)) {
    }
    return eof_;
  }

  const std::string& buffered() const { return buffer_; }

 private:
  // Receives more bytes; false on EOF, error or deadline.
  bool Fill(Clock::time_point deadline) {
    if (fd_ < 0 || eof_) return false;
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd pfd{fd_, POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(left)) <= 0) return false;
    char data[16384];
    const ssize_t n = ::recv(fd_, data, sizeof(data), 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    buffer_.append(data, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  std::string buffer_;
};

// A stream the test drives: Push/Finish from any thread, waits for Start/Cancel.
class TestStream : public ResponseStream {
 public:
  void Start(std::function<void()> wake) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      wake_ = std::move(wake);
      started_ = true;
    }
    changed_.notify_all();
  }

  StreamChunk Poll() override {
    std::lock_guard<std::mutex> lock(mu_);
    StreamChunk chunk;
    chunk.data = std::move(data_);
    data_.clear();
    units_ = 0;
    chunk.done = done_;
    chunk.status = status_;
    return chunk;
  }

  size_t backlog() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return units_;
  }

  void Cancel(std::string_view reason) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++cancels_;
      cancel_reason_ = std::string(reason);
    }
    changed_.notify_all();
  }

  // What CancelWithEnding returns (the server's shutdown ending); empty by default.
  void set_ending(std::string ending) {
    std::lock_guard<std::mutex> lock(mu_);
    ending_ = std::move(ending);
  }

  std::string CancelWithEnding(std::string_view reason) override {
    Cancel(reason);
    std::lock_guard<std::mutex> lock(mu_);
    return ending_;
  }

  // Producer side. False once cancelled (nothing is queued then).
  bool Push(std::string data) {
    std::function<void()> wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cancels_ > 0) return false;
      data_ += data;
      ++units_;
      wake = wake_;
    }
    if (wake) wake();
    return true;
  }

  void Finish(int status = 0) {
    std::function<void()> wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      status_ = status;
      wake = wake_;
    }
    if (wake) wake();
  }

  // Calls the wake callback as the engine might, long after the response ended.
  void WakeLate() {
    std::function<void()> wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      wake = wake_;
    }
    if (wake) wake();
  }

  bool WaitStarted(milliseconds timeout = milliseconds(10'000)) {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, timeout, [&] { return started_; });
  }

  bool WaitCancelled(milliseconds timeout = milliseconds(10'000)) {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, timeout, [&] { return cancels_ > 0; });
  }

  int cancels() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cancels_;
  }

  std::string cancel_reason() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cancel_reason_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::function<void()> wake_;
  std::string data_;
  size_t units_ = 0;  // pushes not yet polled
  bool done_ = false;
  int status_ = 0;
  bool started_ = false;
  int cancels_ = 0;
  std::string cancel_reason_;
  std::string ending_;
};

// Streams created by a handler, handed to the test thread.
class StreamBox {
 public:
  void Add(std::shared_ptr<TestStream> stream) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      streams_.push_back(std::move(stream));
    }
    changed_.notify_all();
  }

  // The index-th stream created, waiting for it up to the timeout.
  std::shared_ptr<TestStream> Wait(size_t index, milliseconds timeout = milliseconds(10'000)) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!changed_.wait_for(lock, timeout, [&] { return streams_.size() > index; })) {
      return nullptr;
    }
    return streams_[index];
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<std::shared_ptr<TestStream>> streams_;
};

// A producer that floods `stream` with SSE chunks of `payload_bytes` bytes, one a millisecond,
// until the stream refuses one (it was cancelled) or 2000 were pushed (bounded so that a
// broken server cannot exhaust memory). For slow-reader tests: the client never reads.
class StreamFlood {
 public:
  StreamFlood(std::shared_ptr<TestStream> stream, size_t payload_bytes)
      : stream_(std::move(stream)), thread_([this, payload_bytes] {
          const std::string chunk = "data: " + std::string(payload_bytes, 'z') + "\n\n";
          for (int i = 0; i < kMaxChunks && stream_->Push(chunk); ++i) {
            ++pushed_;
            std::this_thread::sleep_for(milliseconds(1));
          }
        }) {}
  ~StreamFlood() { Join(); }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  int pushed() const { return pushed_; }

  static constexpr int kMaxChunks = 2000;

 private:
  std::shared_ptr<TestStream> stream_;
  std::atomic<int> pushed_{0};
  std::thread thread_;
};

// Polls `condition` until it holds or the timeout passes.
inline bool WaitUntil(const std::function<bool()>& condition,
                      milliseconds timeout = milliseconds(10'000)) {
  const Clock::time_point deadline = Clock::now() + timeout;
  while (!condition()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

}  // namespace pier::http::testing
