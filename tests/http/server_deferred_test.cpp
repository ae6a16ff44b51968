// Deferred responses (http_types.h DeferredResponse) over real sockets: the server waits for
// one without holding its I/O thread, then sends what it resolved to (plain or streamed);
// a client that leaves cancels it; shutdown answers 503.
#include <gtest/gtest.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "http/server.h"
#include "server_test_util.h"

namespace pier::http {
namespace {

using std::chrono::milliseconds;
using testing::Clock;
using testing::StreamBox;
using testing::TestClient;
using testing::TestStream;
using testing::WaitUntil;

// Resolves when the test says so; records Start/Poll/Cancel.
class TestDeferred final : public DeferredResponse {
 public:
  void Start(std::function<void()> wake) override {
    std::lock_guard lock(mu_);
    wake_ = std::move(wake);
    started_ = true;
    cv_.notify_all();
  }
  std::optional<HttpResponse> Poll() override {
    std::lock_guard lock(mu_);
    ++polls_;
    return answer_;
  }
  void Cancel(std::string_view reason) override {
    std::lock_guard lock(mu_);
    cancel_reason_ = std::string(reason);
    cv_.notify_all();
  }

  bool WaitStarted() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, milliseconds(10'000), [&] { return started_; });
  }
  bool WaitCancelled() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, milliseconds(10'000), [&] { return !cancel_reason_.empty(); });
  }
  void Resolve(HttpResponse response) {
    std::function<void()> wake;
    {
      std::lock_guard lock(mu_);
      answer_ = std::move(response);
      wake = wake_;
    }
    wake();
  }
  void WakeWithoutAnswer() {
    std::function<void()> wake;
    {
      std::lock_guard lock(mu_);
      wake = wake_;
    }
    wake();
  }
  int polls() {
    std::lock_guard lock(mu_);
    return polls_;
  }
  std::string cancel_reason() {
    std::lock_guard lock(mu_);
    return cancel_reason_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> wake_;
  bool started_ = false;
  int polls_ = 0;
  std::optional<HttpResponse> answer_;
  std::string cancel_reason_;
};

class DeferredResponseTest : public ::testing::Test {
 protected:
  DeferredResponseTest() {
    options_.port = 0;
    options_.io_threads = 1;  // a deferred wait must not hold the only I/O thread
    options_.on_response = [this](const HttpRequest& request, int status, std::string_view) {
      std::lock_guard lock(mu_);
      statuses_.emplace_back(request.path, status);
    };
    router_->Add("GET", "/later", [this](const HttpRequest&) {
      auto deferred = std::make_shared<TestDeferred>();
      {
        std::lock_guard lock(mu_);
        deferred_ = deferred;
      }
      HttpResponse response;
      response.deferred = deferred;
      return response;
    });
    router_->Add("GET", "/now", [](const HttpRequest&) {
      HttpResponse response;
      response.content_type = "text/plain";
      response.body = "now";
      return response;
    });
  }

  std::shared_ptr<TestDeferred> WaitDeferred() {
    std::shared_ptr<TestDeferred> deferred;
    WaitUntil([&] {
      std::lock_guard lock(mu_);
      deferred = deferred_;
      return deferred != nullptr;
    });
    return deferred;
  }

  // Sends GET /later on `client` and returns its deferred response once the server started it.
  std::shared_ptr<TestDeferred> RequestLater(TestClient& client) {
    if (!client.SendGet("/later")) return nullptr;
    std::shared_ptr<TestDeferred> deferred = WaitDeferred();
    return deferred != nullptr && deferred->WaitStarted() ? deferred : nullptr;
  }

  bool Saw(const std::string& path, int status) {
    std::lock_guard lock(mu_);
    for (const auto& [p, s] : statuses_) {
      if (p == path && s == status) return true;
    }
    return false;
  }

  HttpServerOptions options_;
  std::shared_ptr<Router> router_ = std::make_shared<Router>();
  std::mutex mu_;
  std::shared_ptr<TestDeferred> deferred_;
  std::vector<std::pair<std::string, int>> statuses_;
};

TEST_F(DeferredResponseTest, WaitsWithoutHoldingTheThreadThenSendsTheAnswer) {
  auto server = HttpServer::Start(options_, router_);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  TestClient waiting((*server)->port());
  ASSERT_TRUE(waiting.SendGet("/later"));
  auto deferred = WaitDeferred();
  ASSERT_NE(deferred, nullptr);
  ASSERT_TRUE(deferred->WaitStarted());

  // The one I/O thread still serves others meanwhile.
  TestClient other((*server)->port());
  ASSERT_TRUE(other.SendGet("/now"));
  auto now = other.ReadResponse();
  ASSERT_TRUE(now);
  EXPECT_EQ(now->body, "now");

  // A wake without an answer keeps waiting; the answer is then sent, with its own status.
  deferred->WakeWithoutAnswer();
  EXPECT_TRUE(WaitUntil([&] { return deferred->polls() >= 2; }));
  HttpResponse answer = ErrorResponse(503, "model chat does not fit");
  answer.headers.emplace_back("Retry-After", "5");
  deferred->Resolve(answer);
  auto response = waiting.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 503);
  EXPECT_EQ(response->Header("retry-after"), "5");
  EXPECT_NE(response->body.find("model chat does not fit"), std::string::npos);
  EXPECT_TRUE(WaitUntil([&] { return Saw("/later", 503); }));

  // The connection stays usable (keep-alive) after a deferred answer.
  ASSERT_TRUE(waiting.SendGet("/now"));
  auto again = waiting.ReadResponse();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->body, "now");
}

TEST_F(DeferredResponseTest, ResolvesToAStreamThatIsThenSentChunked) {
  auto server = HttpServer::Start(options_, router_);
  ASSERT_TRUE(server.ok());
  TestClient client((*server)->port());
  auto deferred = RequestLater(client);
  ASSERT_NE(deferred, nullptr);
  auto stream = std::make_shared<TestStream>();
  HttpResponse streamed;
  streamed.content_type = "text/event-stream";
  streamed.chunked = true;
  streamed.stream = stream;
  deferred->Resolve(streamed);
  ASSERT_TRUE(stream->WaitStarted());
  ASSERT_TRUE(stream->Push("data: one\n\n"));
  stream->Finish();
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->Header("transfer-encoding"), "chunked");
  EXPECT_EQ(response->body, "data: one\n\n");
}

// A reset is noticed at once. (A plain close is a half-close to the server, which HTTP allows
// after a request: that client's wait ends when the answer's write fails.)
TEST_F(DeferredResponseTest, ClientResetCancelsTheWait) {
  auto server = HttpServer::Start(options_, router_);
  ASSERT_TRUE(server.ok());
  auto client = std::make_unique<TestClient>((*server)->port());
  auto deferred = RequestLater(*client);
  ASSERT_NE(deferred, nullptr);
  client->Reset();
  ASSERT_TRUE(deferred->WaitCancelled());
  EXPECT_EQ(deferred->cancel_reason(), "client disconnected");
  EXPECT_TRUE(WaitUntil([&] { return Saw("/later", 499); }));
}

TEST_F(DeferredResponseTest, ShutdownAnswers503) {
  auto server = HttpServer::Start(options_, router_);
  ASSERT_TRUE(server.ok());
  TestClient client((*server)->port());
  auto deferred = RequestLater(client);
  ASSERT_NE(deferred, nullptr);
  (*server)->Shutdown(milliseconds(0));
  ASSERT_TRUE(deferred->WaitCancelled());
  EXPECT_EQ(deferred->cancel_reason(), "server shutting down");
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 503);
}

}  // namespace
}  // namespace pier::http
