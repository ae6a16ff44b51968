// The HttpServer tests' fixture: a router with plain, echo, throwing, SSE and collected-stream
// routes, a server started on 127.0.0.1 with an ephemeral port, and the statuses it reported.
// Shared by server_test.cpp and server_shutdown_test.cpp (one test binary).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http/server.h"
#include "server_test_util.h"

namespace pier::http {

// The test files' names for the helpers of server_test_util.h.
using std::chrono::milliseconds;
using testing::ClientResponse;
using testing::Clock;
using testing::StreamBox;
using testing::StreamFlood;
using testing::TestClient;
using testing::TestStream;
using testing::WaitUntil;

class HttpServerTest : public ::testing::Test {
 protected:
  HttpServerTest() {
    options_.port = 0;
    options_.on_response = [this](const HttpRequest& request, int status, std::string_view) {
      std::lock_guard<std::mutex> lock(mu_);
      responses_.emplace_back(request.path, status);
    };
    router_->Add("GET", "/hello", [](const HttpRequest& request) {
      HttpResponse response;
      response.content_type = "text/plain";
      response.body = "hello " + request.query;
      return response;
    });
    router_->Add("POST", "/echo", [this](const HttpRequest& request) {
      ++echo_calls_;
      HttpResponse response;
      response.content_type = "text/plain";
      response.body = request.body;
      response.headers.emplace_back("X-Header-Count", std::to_string(request.headers.size()));
      return response;
    });
    router_->Add("GET", "/throw", [](const HttpRequest&) -> HttpResponse {
      throw std::runtime_error("handler bug");
    });
    auto stream_handler = [this](bool chunked) {
      return [this, chunked](const HttpRequest&) {
        auto stream = std::make_shared<testing::TestStream>();
        streams_.Add(stream);
        HttpResponse response;
        response.content_type = chunked ? "text/event-stream" : "application/json";
        response.stream = stream;
        response.chunked = chunked;
        return response;
      };
    };
    router_->Add("GET", "/sse", stream_handler(true));
    router_->Add("GET", "/collect", stream_handler(false));
  }

  std::unique_ptr<HttpServer> StartServer() {
    auto server = HttpServer::Start(options_, router_);
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    return server.ok() ? std::move(server).value() : nullptr;
  }

  std::vector<std::pair<std::string, int>> Responses() {
    std::lock_guard<std::mutex> lock(mu_);
    return responses_;
  }

  bool SawResponse(const std::string& path, int status) {
    for (const auto& [p, s] : Responses()) {
      if (p == path && s == status) return true;
    }
    return false;
  }

  HttpServerOptions options_;
  std::shared_ptr<Router> router_ = std::make_shared<Router>();
  testing::StreamBox streams_;
  std::atomic<int> echo_calls_{0};
  std::mutex mu_;
  std::vector<std::pair<std::string, int>> responses_;
};

}  // namespace pier::http
