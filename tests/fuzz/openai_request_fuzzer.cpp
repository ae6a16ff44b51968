// libFuzzer target: any byte string as the body of POST /v1/chat/completions and of
// POST /v1/completions (http/openai_request.h). Both parsers must answer a request or a 4xx
// error, never crash. Built only with -DPIER_FUZZ=ON and clang:
//   build-fuzz/tests/fuzz/openai_request_fuzzer -max_total_time=60
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>
#include <variant>

#include "api/openai/openai_request.h"

namespace {

void Check(const pier::api::OpenAiParseResult& result) {
  if (const auto* error = std::get_if<pier::api::OpenAiError>(&result)) {
    if (error->status < 400 || error->status >= 500 || error->message.empty()) std::abort();
    return;
  }
  const auto& request = std::get<pier::api::OpenAiRequest>(result);
  if (request.n < 1 || request.stop.size() > 4) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Copy into an exact-size buffer so ASan reports any read past the end.
  std::unique_ptr<char[]> bytes(new char[size == 0 ? 1 : size]);
  if (size > 0) std::memcpy(bytes.get(), data, size);
  const std::string_view body(bytes.get(), size);
  Check(pier::api::ParseChatCompletionRequest(body));
  Check(pier::api::ParseCompletionRequest(body));
  return 0;
}
