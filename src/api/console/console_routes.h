// ConsoleRoutes: the web console (issue #47): GET /ui serves its page and GET /ui/{file} its
// script and style sheet, from the files embedded at build time (static_files.h), or, when
// `files_dir` is set (PIER_UI_DIR, for editing the page), from that folder.
//
// The page holds no data: it reads the admin routes (/admin/models, /admin/events, ...) with
// the admin key the operator types into it, kept in the page's memory. So these routes need
// no key, with one exception: a server without --admin-key answers its admin routes only on
// loopback, and so does its console: a client from another address gets a 403 page that says
// to start the server with --admin-key (a server on --host 0.0.0.0 without a key).
//
// Every response (the page, its files, the 403 and 404 pages) carries a strict
// Content-Security-Policy: scripts, styles and fetches from this origin only, no inline script
// or style, no plugins, no framing (frame-ancestors 'none', and X-Frame-Options: DENY for old
// browsers), no referrer; and nosniff, no-store.
//
// Thread-safety: the handlers may run on any thread (they only read).
#pragma once

#include <string>

#include "api/http_types.h"

namespace pier::api {

struct ConsoleOptions {
  bool admin_key_set = false;  // --admin-key given: any client may load the page
  std::string files_dir;       // non-empty: serve the files from here instead
};

class ConsoleRoutes {
 public:
  explicit ConsoleRoutes(ConsoleOptions options) : options_(std::move(options)) {}

  // GET /ui, GET /ui/ and GET /ui/{file} (the handlers hold a copy of the options).
  void Register(Router& router) const;

  // The headers every console response carries (for tests and the docs).
  static const std::vector<std::pair<std::string, std::string>>& SecurityHeaders();

 private:
  static HttpResponse Serve(const ConsoleOptions& options, const HttpRequest& request);

  const ConsoleOptions options_;
};

}  // namespace pier::api
