// The values the server exchanges with src/api's routes (requests, responses, streams,
// the router), named in http/ as they are in api/: the server is the transport under them.
#pragma once

#include "api/http_types.h"

namespace pier::http {

using api::DeferredResponse;
using api::ErrorJson;
using api::ErrorResponse;
using api::Handler;
using api::HttpRequest;
using api::HttpResponse;
using api::ResponseStream;
using api::Router;
using api::StreamChunk;

}  // namespace pier::http
