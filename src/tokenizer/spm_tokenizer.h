// SentencePiece-style tokenizer (`tokenizer.ggml.model = llama`), built from GGUF metadata.
//
// Implements Tokenizer for vocabularies scored per piece (Llama 1/2, Mistral and
// relatives): spaces become "▁", a leading "▁" is added, pieces are merged by
// score, and bytes absent from the vocabulary fall back to <0xNN> byte tokens.
// Immutable after construction; thread-safe.
#pragma once

#include <memory>

#include "common/status.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocabulary_spec.h"

namespace pier::tokenizer {

Result<std::unique_ptr<Tokenizer>> MakeSpmTokenizer(const VocabularySpec& spec);

}  // namespace pier::tokenizer
