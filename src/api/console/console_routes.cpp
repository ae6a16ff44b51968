#include "api/console/console_routes.h"

#include <fstream>
#include <sstream>
#include <string_view>

#include "api/admin/admin_guard.h"
#include "api/console/static_files.h"

namespace pier::api {
namespace {

constexpr std::string_view kCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

std::string_view ContentTypeOf(std::string_view name) {
  if (name.ends_with(".html")) return "text/html; charset=utf-8";
  if (name.ends_with(".js")) return "text/javascript; charset=utf-8";
  if (name.ends_with(".css")) return "text/css; charset=utf-8";
  if (name.ends_with(".svg")) return "image/svg+xml";
  if (name.ends_with(".png")) return "image/png";
  return "application/octet-stream";
}

// A file name the console serves: letters, digits, '-', '_' and one '.', no path.
bool IsPlainName(std::string_view name) {
  if (name.empty() || name.size() > 64 || name.front() == '.') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return name.find("..") == std::string_view::npos;
}

// A small page of our own (no script, so the policy holds), with `text` as its message; the
// text is ours, never the request's, so it needs no escaping.
HttpResponse Page(int status, std::string_view title, std::string_view text) {
  HttpResponse response;
  response.status = status;
  response.content_type = "text/html; charset=utf-8";
  response.body = "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Pier: " +
                  std::string(title) + "</title></head><body><h1>" + std::string(title) +
                  "</h1><p>" + std::string(text) + "</p></body></html>\n";
  return response;
}

}  // namespace

const std::vector<std::pair<std::string, std::string>>& ConsoleRoutes::SecurityHeaders() {
  static const std::vector<std::pair<std::string, std::string>> headers = {
      {"Content-Security-Policy", std::string(kCsp)},
      {"X-Frame-Options", "DENY"},
      {"X-Content-Type-Options", "nosniff"},
      {"Referrer-Policy", "no-referrer"},
      {"Cache-Control", "no-store"},
  };
  return headers;
}

void ConsoleRoutes::Register(Router& router) const {
  // The handlers keep their own copy of the options: the router may outlive this object.
  auto serve = [options = options_](const HttpRequest& request) {
    HttpResponse response = Serve(options, request);
    for (const auto& header : SecurityHeaders()) response.headers.push_back(header);
    return response;
  };
  router.Add("GET", "/ui", serve);
  router.AddPrefix("GET", "/ui/", serve);
}

HttpResponse ConsoleRoutes::Serve(const ConsoleOptions& options, const HttpRequest& request) {
  if (!options.admin_key_set && !FromLoopback(request)) {
    return Page(403, "console refused",
                "This server has no admin key, so its console and admin routes answer only on "
                "this machine (loopback). Start pier serve with --admin-key KEY to use the "
                "console from another machine, and type the key into the console.");
  }
  std::string_view name = request.path == "/ui" || request.path == "/ui/"
                              ? std::string_view("index.html")
                              : std::string_view(request.path).substr(4);
  if (!IsPlainName(name)) return Page(404, "not found", "The console has no such file.");
  if (!options.files_dir.empty()) {
    std::ifstream file(options.files_dir + "/" + std::string(name), std::ios::binary);
    if (!file) return Page(404, "not found", "The console has no such file.");
    std::ostringstream bytes;
    bytes << file.rdbuf();
    HttpResponse response;
    response.content_type = std::string(ContentTypeOf(name));
    response.body = std::move(bytes).str();
    return response;
  }
  for (const console::EmbeddedFile& file : console::EmbeddedFiles()) {
    if (file.name != name) continue;
    HttpResponse response;
    response.content_type = std::string(ContentTypeOf(name));
    response.body = std::string(file.bytes);
    return response;
  }
  return Page(404, "not found", "The console has no such file.");
}

}  // namespace pier::api
