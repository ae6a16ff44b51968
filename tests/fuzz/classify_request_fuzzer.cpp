// libFuzzer target: any bytes as a POST /v1/classify request (api/kserve/classify_request.h),
// in its JSON form or its raw form (the first byte picks; for the raw form the bytes up to the
// first NUL are the query, the rest the body), and as base64 (common/base64.h).
//
// A refusal is INVALID_ARGUMENT with a message. An accepted request names a model, holds at
// least one non-empty image and a top_k in [1, max]. Base64: whatever decodes re-encodes to
// text that decodes to the same bytes, and any bytes encoded decode back unchanged.
// Built only with -DPIER_FUZZ=ON and clang:
//   build-fuzz/tests/fuzz/classify_request_fuzzer -max_total_time=60 CORPUS
// (seed CORPUS with {"model": "m", "image": "iVBORw0KGgo=", "top_k": 2} behind a 0 byte).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "api/kserve/classify_request.h"
#include "common/base64.h"

namespace {

constexpr int64_t kMaxTopK = 1000;

std::string Encode(std::string_view bytes) {
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t g = (uint32_t{static_cast<uint8_t>(bytes[i])} << 16) |
                       (uint32_t{static_cast<uint8_t>(bytes[i + 1])} << 8) |
                       static_cast<uint8_t>(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out.push_back(alphabet[(g >> s) & 63]);
  }
  const size_t left = bytes.size() - i;
  if (left > 0) {
    uint32_t g = uint32_t{static_cast<uint8_t>(bytes[i])} << 16;
    if (left == 2) g |= uint32_t{static_cast<uint8_t>(bytes[i + 1])} << 8;
    out.push_back(alphabet[(g >> 18) & 63]);
    out.push_back(alphabet[(g >> 12) & 63]);
    out.push_back(left == 2 ? alphabet[(g >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

void CheckRequest(const pier::Result<pier::api::ClassifyRequest>& r) {
  if (!r.ok()) {
    if (r.status().code() != pier::StatusCode::kInvalidArgument || r.status().message().empty()) {
      std::abort();
    }
    return;
  }
  if (r->model.empty() || r->images.empty() || r->top_k < 1 || r->top_k > kMaxTopK) std::abort();
  for (const std::string& image : r->images) {
    if (image.empty()) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] % 2 == 0) {
    CheckRequest(pier::api::ReadJsonClassifyRequest(rest, kMaxTopK));
  } else {
    const size_t nul = rest.find('\0');
    const std::string query = rest.substr(0, nul);
    const std::string body = nul == std::string::npos ? std::string() : rest.substr(nul + 1);
    CheckRequest(pier::api::ReadRawClassifyRequest(query, body, kMaxTopK));
  }
  if (std::optional<std::string> decoded = pier::DecodeBase64(rest)) {
    if (pier::DecodeBase64(Encode(*decoded)) != decoded) std::abort();
  }
  if (pier::DecodeBase64(Encode(rest)) != rest) std::abort();
  return 0;
}
