// Byte-level BPE tokenizer (`tokenizer.ggml.model = gpt2`), built from GGUF metadata.
//
// Text is split by the pre-tokenizer named in `tokenizer.ggml.pre`, each piece is
// mapped to GPT-2's byte alphabet and merged by rank from `tokenizer.ggml.merges`.
// Immutable after construction; thread-safe.
#pragma once

#include <memory>

#include "common/status.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocabulary_spec.h"

namespace pier::tokenizer {

Result<std::unique_ptr<Tokenizer>> MakeBpeTokenizer(const VocabularySpec& spec);

}  // namespace pier::tokenizer
