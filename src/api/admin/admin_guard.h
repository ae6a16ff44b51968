// The admin routes' defence against web pages (issue #47): a browser on the operator's
// machine reaches loopback, so a page from anywhere could post to a keyless admin route
// (CSRF) or read it through a name that re-resolves to 127.0.0.1 (DNS rebinding).
//
// - Origin: a POST whose Origin header is present and is not this server's own origin (the
//   scheme-less authority equal to the request's Host) is refused, key or not. Browsers send
//   Origin on every cross-origin POST (and on same-origin ones too, which pass); scripts and
//   curl send none, and are not browsers' victims.
// - Host: without an admin key (the loopback trust), the Host must be an IP literal or
//   `localhost`: a rebinding attack needs a domain name the attacker controls, whose Host the
//   browser sends unchanged. With a key, a page cannot forge the Authorization header without
//   knowing the key, so any Host is accepted (the server may be reached by its DNS name).
#pragma once

#include <optional>
#include <string_view>

#include "api/http_types.h"

namespace pier::api {

// 403 with the reason, or nullopt when the request may go on.
std::optional<HttpResponse> CheckAdminOrigin(const HttpRequest& request, bool keyless);

// Whether the request comes from this machine (127.0.0.0/8 or ::1): the trust the admin routes
// and the console give a server without an admin key.
bool FromLoopback(const HttpRequest& request);

// "127.0.0.1:8080" -> true; "localhost" -> true; "[::1]:80" -> true; "evil.example:8080" -> false.
bool IsIpLiteralOrLocalhost(std::string_view host);

}  // namespace pier::api
