// HttpServer: listener, I/O threads, connection limit and shutdown. The per-connection
// protocol lives in server_connection.cpp.
#include "http/server.h"

#include <spdlog/spdlog.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <exception>
#include <thread>
#include <vector>

#include "http/server_connection.h"

namespace pier::http {

using server_internal::Clock;
using server_internal::Connection;
using server_internal::ServerState;
namespace asio = server_internal::asio;
using boost::system::error_code;
using server_internal::tcp;

namespace {

// After the grace period, how long Shutdown waits for closed connections to unwind before it
// stops the io_context regardless.
constexpr auto kCloseWait = std::chrono::milliseconds(2000);

std::string HostPort(const std::string& host, uint16_t port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

// Completion handler for detached coroutines: they catch what they expect; anything else is
// logged rather than lost.
void LogFailure(std::exception_ptr failure) {
  if (failure == nullptr) return;
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    spdlog::warn("HTTP server task failed: {}", e.what());
  } catch (...) {
    spdlog::warn("HTTP server task failed with a non-standard exception");
  }
}

}  // namespace

struct HttpServer::Impl {
  explicit Impl(const HttpServerOptions& options, std::shared_ptr<const Router> router)
      : state(std::make_shared<ServerState>(options, std::move(router))),
        io(options.io_threads),
        work(asio::make_work_guard(io)),
        accept_strand(asio::make_strand(io)),
        acceptor(accept_strand) {}

  asio::awaitable<void> AcceptLoop();

  std::shared_ptr<ServerState> state;
  asio::io_context io;  // outlives everything below that uses it
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  asio::strand<asio::io_context::executor_type> accept_strand;
  tcp::acceptor acceptor;
  std::vector<std::thread> threads;
  uint16_t port = 0;

  Mutex shutdown_mu;  // serializes Shutdown calls
  bool stopped PIER_GUARDED_BY(shutdown_mu) = false;
};

asio::awaitable<void> HttpServer::Impl::AcceptLoop() {
  const HttpServerOptions& options = state->options;
  error_code ec;
  // Until Shutdown closes the acceptor (at once, or after the grace period when probe paths
  // are served while draining).
  for (;;) {
    // Each connection runs on its own strand: its handlers never run concurrently.
    tcp::socket socket(asio::make_strand(io));
    co_await acceptor.async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (!acceptor.is_open() || ec == asio::error::operation_aborted) co_return;
      // E.g. out of file descriptors: log, breathe, keep serving the open connections.
      spdlog::warn("HTTP accept on {} failed: {}", HostPort(options.host, port), ec.message());
      asio::steady_timer pause(accept_strand, std::chrono::milliseconds(100));
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    auto connection = std::make_shared<Connection>(state, std::move(socket));
    if (state->ConnectionsOpen() >= static_cast<int64_t>(options.max_connections)) {
      ++state->connections_refused;
      asio::co_spawn(connection->executor(), Connection::RunRefused(connection), LogFailure);
      continue;
    }
    ++state->connections_accepted;
    state->Register(connection);
    asio::co_spawn(connection->executor(), Connection::Run(connection), LogFailure);
  }
}

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                      std::shared_ptr<const Router> router) {
  if (router == nullptr) return InvalidArgumentError("HttpServer needs a router");
  if (options.io_threads < 1 || options.io_threads > 1024) {
    return InvalidArgumentError("io_threads must be in [1, 1024], got " +
                                std::to_string(options.io_threads));
  }
  if (options.max_connections < 1) return InvalidArgumentError("max_connections must be >= 1");
  if (options.max_header_bytes < 64) return InvalidArgumentError("max_header_bytes must be >= 64");
  using std::chrono::milliseconds;
  for (const auto& [name, value] : {std::pair{"header_timeout", options.header_timeout},
                                    std::pair{"request_timeout", options.request_timeout},
                                    std::pair{"idle_timeout", options.idle_timeout},
                                    std::pair{"write_timeout", options.write_timeout}}) {
    if (value <= milliseconds::zero()) {
      return InvalidArgumentError(std::string(name) + " must be positive");
    }
  }

  auto impl = std::make_unique<Impl>(options, std::move(router));
  const std::string where = HostPort(options.host, options.port);
  error_code ec;
  tcp::resolver resolver(impl->io);
  const auto endpoints =
      resolver.resolve(options.host, std::to_string(options.port),
                       tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) {
    return InvalidArgumentError("cannot resolve HTTP host '" + options.host +
                                "': " + (ec ? ec.message() : "no address"));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  tcp::acceptor& acceptor = impl->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return UnavailableError(where + ": " + ec.message());
  impl->port = acceptor.local_endpoint(ec).port();
  if (ec) return UnavailableError(where + ": " + ec.message());

  asio::co_spawn(impl->accept_strand, impl->AcceptLoop(), LogFailure);
  for (int i = 0; i < options.io_threads; ++i) {
    impl->threads.emplace_back([io = &impl->io] { io->run(); });
  }
  spdlog::info("HTTP server listening on {} ({} I/O thread{})", HostPort(options.host, impl->port),
               options.io_threads, options.io_threads == 1 ? "" : "s");
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Shutdown(std::chrono::milliseconds(0)); }

uint16_t HttpServer::port() const { return impl_->port; }

bool HttpServer::shutting_down() const { return impl_->state->shutting_down; }

void HttpServer::Shutdown(std::chrono::milliseconds grace) {
  Impl& impl = *impl_;
  ServerState& state = *impl.state;
  MutexLock shutdown_lock(impl.shutdown_mu);
  if (impl.stopped) return;
  // It joins the I/O threads, so it must not run on one (e.g. inside a handler).
  PIER_CHECK(!impl.io.get_executor().running_in_this_thread(),
             "HttpServer::Shutdown called on an I/O thread");

  state.shutting_down = true;
  // Without probe paths nothing new is served: stop accepting at once. With them, the
  // listener stays open through the grace period, so that an orchestrator's fresh probe
  // connections still reach /health (200) and /ready (503) while requests drain.
  auto close_acceptor = [&impl] {
    asio::post(impl.accept_strand, [&impl] {
      error_code ignored;
      impl.acceptor.close(ignored);
    });
  };
  const bool serve_probes = !state.options.paths_served_while_draining.empty();
  if (!serve_probes) close_acceptor();

  {
    MutexLock lock(state.mu);
    const bool drained = lock.WaitFor(
        state.changed, grace, [&]() PIER_REQUIRES(state.mu) { return state.in_flight == 0; });
    if (!drained) {
      spdlog::info("HTTP shutdown: {} response(s) still in flight after {} ms; closing them",
                   state.in_flight, grace.count());
    }
  }
  if (serve_probes) close_acceptor();

  std::vector<std::shared_ptr<Connection>> open;
  {
    MutexLock lock(state.mu);
    for (const auto& [key, weak] : state.connections) {
      if (auto connection = weak.lock()) open.push_back(std::move(connection));
    }
  }
  for (const auto& connection : open) connection->Close();
  open.clear();
  {
    MutexLock lock(state.mu);
    lock.WaitFor(state.changed, kCloseWait,
                 [&]() PIER_REQUIRES(state.mu) { return state.connections.empty(); });
  }

  impl.work.reset();
  impl.io.stop();
  for (std::thread& thread : impl.threads) thread.join();
  impl.threads.clear();

  // Streams may outlive the server: a late wake() must not touch the io_context.
  {
    MutexLock lock(state.mu);
    for (const auto& [key, weak] : state.connections) {
      if (auto connection = weak.lock()) open.push_back(std::move(connection));
    }
  }
  for (const auto& connection : open) connection->DisableWake();
  impl.stopped = true;
  spdlog::info("HTTP server on {} stopped", HostPort(state.options.host, impl.port));
}

HttpServerStats HttpServer::Stats() const {
  const ServerState& state = *impl_->state;
  HttpServerStats stats;
  stats.connections_open = impl_->state->ConnectionsOpen();
  stats.connections_accepted = state.connections_accepted;
  stats.connections_refused = state.connections_refused;
  stats.requests = state.requests;
  stats.streams_active = state.streams_active;
  stats.client_disconnects = state.client_disconnects;
  stats.slow_client_aborts = state.slow_client_aborts;
  stats.timeouts = state.timeouts;
  return stats;
}

}  // namespace pier::http
