// Token-id inputs of a KServe v2 inference request for an embedding model: what a client that
// tokenizes itself (Hugging Face's tokenizer, a Triton ensemble's pre-processing) sends
// instead of texts.
//
//   inputs: [{"name": "input_ids", "datatype": "INT64", "shape": [n, len], "data": [...]},
//            {"name": "attention_mask", "datatype": "INT64", "shape": [n, len], ...}]  # optional
//
// INT32 or INT64, shape [len] (one sequence) or [n, len], the data as JSON (flat or nested) or
// in the binary extension (binary_data_size little-endian bytes, taken in input order). Rows
// are padded to one length; the optional attention_mask (1: a token, 0: padding) says which
// positions count. The ids are then checked against the vocabulary and framed by
// PrepareTokenIds (embeddings_api.h).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace pier::api {

// Whether a KServe datatype is a token-id one (INT32, INT64).
bool IsTokenIdDatatype(std::string_view datatype);

// The rows of token ids of `inputs` (1 or 2 inputs: the ids and optionally, first or second,
// the attention mask named "attention_mask"), reading binary data from `binary` in input
// order. INVALID_ARGUMENT naming the input and what is wrong (datatype, shape, `data` that is
// not a list of integers or not of the shape's count, a mask alone, not 0/1 or not of the ids'
// shape, an id outside int32, a row left empty). The routes call it through
// ReadEmbedInferRequest (kserve_infer_request.h), which also refuses an input with both `data`
// and binary data.
Result<std::vector<std::vector<int32_t>>> ReadTokenIdInputs(const nlohmann::json& inputs,
                                                            std::string_view binary);

}  // namespace pier::api
