// `pier top [--url http://127.0.0.1:8080] [--interval SECONDS] [--metrics-key KEY] [--once]
//           [--width COLUMNS]`:
// a live terminal view of a running server, refreshed every --interval seconds from its
// /metrics (cli/top_screen.h says what it shows). Each refresh clears the screen and draws
// the view again, at most --width columns wide (default: the terminal's, else 80).
//
// A server that is not there, or that drops mid-refresh, gets one line on the screen saying
// what failed and that it retries, and the view comes back when the server does; Ctrl-C
// quits. With --once it draws one view (or the failure) and exits: 0 when the server
// answered, 1 otherwise, with the reason on stderr.
#include <sys/ioctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <optional>
#include <string>
#include <thread>

#include "cli/commands.h"
#include "cli/top_screen.h"
#include "loadgen/http_client.h"
#include "metrics/exposition_reader.h"

namespace pier::cli {
namespace {

struct TopOptions {
  std::string url = "http://127.0.0.1:8080";
  double interval_seconds = 1;
  std::string metrics_key;
  bool once = false;
  int width = 0;
};

// The server's /metrics text, or why not.
Result<std::string> Scrape(const loadgen::BaseUrl& base, const std::string& metrics_key) {
  PIER_ASSIGN_OR_RETURN(loadgen::Endpoint endpoint, loadgen::Resolve(base));
  loadgen::HttpRequest request;
  request.target = base.path_prefix + "/metrics";
  if (!metrics_key.empty()) request.headers.emplace_back("Authorization", "Bearer " + metrics_key);
  PIER_ASSIGN_OR_RETURN(
      loadgen::HttpResponse response,
      loadgen::SendHttpRequest(endpoint, request, loadgen::Clock::now() + std::chrono::seconds(5)));
  if (response.status_code != 200) {
    return UnavailableError("GET /metrics answered " + std::to_string(response.status_code) +
                            (response.status_code == 401 ? " (give --metrics-key)" : ""));
  }
  return std::move(response.body);
}

std::string Clock() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char text[16];
  std::strftime(text, sizeof text, "%H:%M:%S", &tm);
  return text;
}

int TerminalWidth() {
  winsize ws{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40) return ws.ws_col;
  return 80;
}

int RunTop(const TopOptions& options) {
  Result<loadgen::BaseUrl> base = loadgen::ParseBaseUrl(options.url);
  if (!base.ok()) {
    std::fprintf(stderr, "pier top: --url: %s\n", base.status().message().c_str());
    return 1;
  }
  const bool terminal = ::isatty(STDOUT_FILENO) == 1;
  std::optional<metrics::ExpositionRead> before;
  auto before_at = std::chrono::steady_clock::now();
  while (true) {
    const auto started = std::chrono::steady_clock::now();
    Result<std::string> text = Scrape(*base, options.metrics_key);
    std::string screen = terminal || !options.once ? "\x1b[H\x1b[2J" : "";
    if (!text.ok()) {
      if (options.once) {
        std::fprintf(stderr, "pier top: cannot read %s/metrics: %s\n", options.url.c_str(),
                     text.status().message().c_str());
        return 1;
      }
      screen += "pier top  " + options.url + "  " + Clock() + "\n\ncannot read " + options.url +
                "/metrics: " + text.status().message() + "\nretrying every " +
                std::to_string(static_cast<int>(options.interval_seconds + 0.5)) +
                " s (Ctrl-C quits)\n";
      before.reset();  // rates restart with the server
    } else {
      metrics::ExpositionRead now = metrics::ReadExposition(*text);
      const double seconds = std::chrono::duration<double>(started - before_at).count();
      TopScreenInput input{.url = options.url,
                           .clock = Clock(),
                           .now = &now,
                           .before = before ? &*before : nullptr,
                           .seconds_between = seconds,
                           .width = options.width > 0 ? options.width : TerminalWidth()};
      for (const std::string& line : RenderTopScreen(input)) screen += line + "\n";
      before = std::move(now);
      before_at = started;
    }
    std::fwrite(screen.data(), 1, screen.size(), stdout);
    std::fflush(stdout);
    if (options.once) return 0;
    std::this_thread::sleep_until(
        started + std::chrono::milliseconds(static_cast<int64_t>(options.interval_seconds * 1000)));
  }
}

void Register(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<TopOptions>();
  CLI::App* top = app.add_subcommand(
      "top", "A live view of a running server: models, queues, memory, GPUs, workers");
  top->add_option("--url", options->url, "The server's base URL (default http://127.0.0.1:8080)");
  top->add_option("--interval", options->interval_seconds, "Seconds between refreshes (default 1)")
      ->check(CLI::Range(0.1, 3600.0));
  top->add_option("--metrics-key", options->metrics_key,
                  "Bearer key for /metrics when the server has --metrics-key");
  top->add_flag("--once", options->once, "Draw one view and exit (1 if the server is not there)");
  top->add_option("--width", options->width, "Columns (default: the terminal's, else 80)")
      ->check(CLI::Range(40, 1000));
  top->callback([options, &exit_code] { exit_code = RunTop(*options); });
}

PIER_REGISTER_COMMAND(top, Register);

}  // namespace
}  // namespace pier::cli
