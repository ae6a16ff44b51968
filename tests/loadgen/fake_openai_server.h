// A tiny OpenAI-compatible HTTP server for the load generator's end-to-end tests, on plain
// POSIX sockets: GET /v1/models lists "fake-model"; POST /v1/completions and
// /v1/chat/completions stream max_tokens text chunks ("t0 ", "t1 ", ...) as SSE after a
// first-token delay, one token delay apart, then a finish_reason chunk with no text, a
// usage chunk (optional) and "data: [DONE]". The prompt's token count it reports is the
// number of words (text) or ids (list) in the prompt.
//
// One accept thread; one thread per connection; each connection serves one request (the
// client sends "Connection: close"). The destructor stops and joins every thread.
// Accessors lock, so tests may read them while requests run.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace pier::loadgen::testing {

struct FakeServerOptions {
  int first_token_delay_ms = 20;
  int token_delay_ms = 3;
  bool send_usage = true;
  bool chunked = true;        // false: no Transfer-Encoding, the body ends at the close
  bool split_events = false;  // write each SSE event as two HTTP chunks, split mid-line
  int fail_every = 0;         // every k-th generation request (1-based) gets a 500
  bool models_not_found = false;
};

class FakeOpenAiServer {
 public:
  explicit FakeOpenAiServer(FakeServerOptions options = {}) : options_(options) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    ::listen(listen_fd_, 512);
    socklen_t length = sizeof(address);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }

  ~FakeOpenAiServer() {
    stop_ = true;
    accept_thread_.join();
    ::close(listen_fd_);
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mutex_);
      threads.swap(connection_threads_);
    }
    for (std::thread& t : threads) t.join();
  }

  FakeOpenAiServer(const FakeOpenAiServer&) = delete;
  FakeOpenAiServer& operator=(const FakeOpenAiServer&) = delete;

  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Bodies of the generation requests received, in arrival order.
  std::vector<nlohmann::json> bodies() const {
    std::lock_guard lock(mutex_);
    return bodies_;
  }
  // The most generation requests streaming at once.
  int max_active() const { return max_active_.load(); }

 private:
  void AcceptLoop() {
    while (!stop_) {
      pollfd pfd{listen_fd_, POLLIN, 0};
      if (::poll(&pfd, 1, 20) <= 0) continue;
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      std::lock_guard lock(mutex_);
      connection_threads_.emplace_back([this, fd] {
        Serve(fd);
        ::close(fd);
      });
    }
  }

  static bool WriteAll(int fd, const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }

  static std::string Hex(size_t value) {
    char text[32];
    std::snprintf(text, sizeof(text), "%zx", value);
    return text;
  }

  void Serve(int fd) {
    std::string request;
    char buffer[4096];
    size_t header_end = std::string::npos;
    while ((header_end = request.find("\r\n\r\n")) == std::string::npos) {
      const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) return;
      request.append(buffer, static_cast<size_t>(n));
    }
    size_t content_length = 0;
    const size_t cl = request.find("Content-Length: ");
    if (cl != std::string::npos && cl < header_end) {
      content_length = std::stoul(request.substr(cl + 16));
    }
    while (request.size() < header_end + 4 + content_length) {
      const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) return;
      request.append(buffer, static_cast<size_t>(n));
    }
    const std::string line = request.substr(0, request.find("\r\n"));
    const std::string body = request.substr(header_end + 4, content_length);
    if (line.rfind("GET /v1/models ", 0) == 0) {
      const std::string json =
          options_.models_not_found
              ? std::string(R"({"error":{"message":"no such route"}})")
              : std::string(R"({"object":"list","data":[{"id":"fake-model","object":"model"}]})");
      WriteAll(fd, std::string(options_.models_not_found ? "HTTP/1.1 404 Not Found\r\n"
                                                         : "HTTP/1.1 200 OK\r\n") +
                       "Content-Type: application/json\r\nContent-Length: " +
                       std::to_string(json.size()) + "\r\n\r\n" + json);
      return;
    }
    const bool chat = line.rfind("POST /v1/chat/completions ", 0) == 0;
    if (!chat && line.rfind("POST /v1/completions ", 0) != 0) {
      WriteAll(fd, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
      return;
    }
    const nlohmann::json json = nlohmann::json::parse(body);
    int sequence = 0;
    {
      std::lock_guard lock(mutex_);
      bodies_.push_back(json);
      sequence = static_cast<int>(bodies_.size());
    }
    if (options_.fail_every > 0 && sequence % options_.fail_every == 0) {
      const std::string error = R"({"error":{"message":"fake overload","type":"server_error"}})";
      WriteAll(fd,
               "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
               "Content-Length: " +
                   std::to_string(error.size()) + "\r\n\r\n" + error);
      return;
    }
    const int active = ++active_;
    int seen = max_active_.load();
    while (active > seen && !max_active_.compare_exchange_weak(seen, active)) {
    }
    bool released = false;
    // A request stops counting as active before "[DONE]" goes out: the client cannot send
    // its next request before it has read it, so max_active() never overcounts.
    const auto release = [this, &released] {
      if (!released) --active_;
      released = true;
    };
    Stream(fd, json, chat, release);
    release();
  }

  template <typename Release>
  void Stream(int fd, const nlohmann::json& request, bool chat, const Release& release) {
    int prompt_tokens = 0;
    if (chat) {
      const std::string text = request["messages"][0]["content"];
      prompt_tokens = static_cast<int>(std::count(text.begin(), text.end(), ' ')) + 1;
    } else if (request["prompt"].is_array()) {
      prompt_tokens = static_cast<int>(request["prompt"].size());
    } else {
      const std::string text = request["prompt"];
      prompt_tokens = static_cast<int>(std::count(text.begin(), text.end(), ' ')) + 1;
    }
    const int max_tokens = request["max_tokens"];
    std::string head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n";
    head += options_.chunked ? "Transfer-Encoding: chunked\r\n\r\n" : "\r\n";
    if (!WriteAll(fd, head)) return;
    const auto send_event = [&](const nlohmann::json& data) {
      const std::string event =
          "data: " + (data.is_string() ? data.get<std::string>() : data.dump()) + "\n\n";
      if (!options_.chunked) return WriteAll(fd, event);
      if (!options_.split_events) {
        return WriteAll(fd, Hex(event.size()) + "\r\n" + event + "\r\n");
      }
      const size_t half = event.size() / 2;
      return WriteAll(fd, Hex(half) + "\r\n" + event.substr(0, half) + "\r\n") &&
             WriteAll(fd, Hex(event.size() - half) + "\r\n" + event.substr(half) + "\r\n");
    };
    const auto choice = [&](const std::string& text, bool last) {
      nlohmann::json c = {
          {"index", 0},
          {"finish_reason", last ? nlohmann::json("length") : nlohmann::json(nullptr)}};
      if (chat) {
        c["delta"] = {{"content", text}};
      } else {
        c["text"] = text;
      }
      return nlohmann::json{{"id", "x"}, {"object", "chunk"}, {"choices", {c}}};
    };
    if (chat) {
      nlohmann::json role = choice("", false);
      role["choices"][0]["delta"] = {{"role", "assistant"}, {"content", ""}};
      if (!send_event(role)) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(options_.first_token_delay_ms));
    for (int i = 0; i < max_tokens; ++i) {
      if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(options_.token_delay_ms));
      if (!send_event(choice("t" + std::to_string(i) + " ", false))) return;
    }
    if (!send_event(choice("", true))) return;
    if (options_.send_usage) {
      const nlohmann::json usage = {{"id", "x"},
                                    {"choices", nlohmann::json::array()},
                                    {"usage",
                                     {{"prompt_tokens", prompt_tokens},
                                      {"completion_tokens", max_tokens},
                                      {"total_tokens", prompt_tokens + max_tokens}}}};
      if (!send_event(usage)) return;
    }
    release();
    if (!send_event("[DONE]")) return;
    if (options_.chunked) WriteAll(fd, "0\r\n\r\n");
  }

  FakeServerOptions options_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread accept_thread_;
  mutable std::mutex mutex_;
  std::vector<std::thread> connection_threads_;  // guarded by mutex_
  std::vector<nlohmann::json> bodies_;           // guarded by mutex_
  std::atomic<int> active_{0};
  std::atomic<int> max_active_{0};
};

}  // namespace pier::loadgen::testing
