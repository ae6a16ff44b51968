// A tensor's elements between KServe's JSON form (`data`: a list, flat or nested, row-major)
// and the bytes of a HostTensor (tensor/host_tensor.h: little-endian, BYTES elements each a
// 4-byte length and its bytes), for the infer requests and answers of tensor models
// (tensor_infer_request.h, tensor_infer_response.h).
//
// Reading checks every value against its type: integers within the type's range (a float or
// a bool is not an integer), floats within the type's finite range (FP16 and BF16 rounded to
// nearest even, as tensor/float16.h does; a number that rounds to infinity is refused), BOOL
// from true/false, BYTES from strings. Writing gives a flat list: numbers (FP16/BF16 as the
// float they hold), true/false, strings.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"
#include "tensor/host_tensor.h"

namespace pier::api {

// The bytes of `count` elements of `type` given as `data`. INVALID_ARGUMENT naming `input`:
// `data` not a list, a count other than `count` ("data holds 5 values, shape [2, 3] needs
// 6"), a value out of range or of the wrong kind, with its row-major index ("data[4] is 300:
// out of INT8's range [-128, 127]").
[[nodiscard]] Result<std::string> TensorBytesFromJson(std::string_view input, ElementType type,
                                                      const std::vector<int64_t>& shape,
                                                      const nlohmann::json& data);

// The elements of `tensor` as a flat JSON list. `tensor.bytes` must hold what its shape says
// (BYTES: whole length-prefixed elements; what is cut short is left out).
nlohmann::json TensorBytesToJson(const HostTensor& tensor);

}  // namespace pier::api
