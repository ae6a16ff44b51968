// libFuzzer target: the web console's request checks (issue #47) on any bytes: the admin
// guard (api/admin/admin_guard.h) over a method, Host and Origin, and the console's file
// routes (api/console/console_routes.h) over a path and a remote address. The bytes are split
// at NUL bytes into method, host, origin, path and remote address.
//
// Invariants: nothing crashes; a keyless request the guard lets through has an empty Host or
// one that is an IP literal or localhost; a POST let through has no Origin or one whose
// authority is its Host; every console answer carries the CSP with frame-ancestors 'none', is
// 200, 403 or 404, and a 200 is for a plain file name (no '/', no '..') from loopback unless a
// key is set.
// Built only with -DPIER_FUZZ=ON and clang:
//   build-fuzz/tests/fuzz/console_request_fuzzer -max_total_time=60
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "api/admin/admin_guard.h"
#include "api/console/console_routes.h"
#include "api/console/static_files.h"

// The console's files as this fuzzer embeds them (the build's are generated into pier_api).
namespace pier::api::console {
const std::vector<EmbeddedFile>& EmbeddedFiles() {
  static const std::vector<EmbeddedFile> files = {{"index.html", "<!doctype html><html></html>"},
                                                  {"app.js", "void 0;"}};
  return files;
}
}  // namespace pier::api::console

namespace {

std::vector<std::string> Split(std::string_view bytes, size_t parts) {
  std::vector<std::string> out;
  while (out.size() + 1 < parts) {
    const size_t nul = bytes.find('\0');
    if (nul == std::string_view::npos) break;
    out.emplace_back(bytes.substr(0, nul));
    bytes.remove_prefix(nul + 1);
  }
  out.emplace_back(bytes);
  out.resize(parts);
  return out;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> p =
      Split(std::string_view(reinterpret_cast<const char*>(data), size), 5);
  pier::api::HttpRequest request;
  request.method = p[0];
  if (!p[1].empty()) request.headers.emplace_back("host", p[1]);
  if (!p[2].empty()) request.headers.emplace_back("origin", p[2]);
  request.target = request.path = "/ui" + p[3];
  request.remote_address = p[4];

  for (const bool keyless : {true, false}) {
    const auto refused = pier::api::CheckAdminOrigin(request, keyless);
    if (refused.has_value()) {
      if (refused->status != 403) std::abort();
      continue;
    }
    if (keyless && !p[1].empty() && !pier::api::IsIpLiteralOrLocalhost(p[1])) std::abort();
    if (request.method == "POST" && !p[2].empty()) {
      const std::string origin = Lower(p[2]);
      const std::string host = Lower(p[1]);
      if (origin != "http://" + host && origin != "https://" + host) std::abort();
    }
  }

  pier::api::Router router;
  for (const bool key_set : {true, false}) {
    pier::api::ConsoleRoutes({.admin_key_set = key_set, .files_dir = ""}).Register(router);
    request.method = "GET";
    const pier::api::HttpResponse response = router.Dispatch(request);
    bool csp = false;
    for (const auto& [name, value] : response.headers) {
      csp |= name == "Content-Security-Policy" &&
             value.find("frame-ancestors 'none'") != std::string::npos;
    }
    if (response.status == 405 || response.status == 404) {
      if (response.status == 404 && !csp && request.path.starts_with("/ui/")) std::abort();
      continue;
    }
    if (!csp) std::abort();
    if (response.status != 200 && response.status != 403) std::abort();
    if (response.status == 200) {
      const std::string_view name = std::string_view(request.path).substr(3);
      if (name.find("..") != std::string_view::npos) std::abort();
      if (name.size() > 1 && name.find('/', 1) != std::string_view::npos) std::abort();
      const bool loopback = request.remote_address.starts_with("127.") ||
                            request.remote_address.starts_with("[::1]") ||
                            request.remote_address.starts_with("::1");
      if (!key_set && !loopback) std::abort();
    }
    router = pier::api::Router();
  }
  return 0;
}
