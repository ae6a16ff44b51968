// A GGUF file's tokenizer and chat template: the `tokenizer.*` metadata read into the plain
// types tokenizer/ builds from, so that tokenizer/ knows nothing of GGUF.
//
// ReadVocabularySpec reads `tokenizer.ggml.model`, `pre`, `tokens`, `token_type`, `merges`
// (split into their two parts), `scores`, the special ids and the add_* flags. A key of the
// wrong type, or a merge that is not two tokens separated by a space, is DATA_LOSS (or the
// reader's type error) naming the file and the key; the vocabulary's own consistency is
// checked by Tokenizer::Create, whose messages name the file too. A file without
// `tokenizer.ggml.model` gives a spec with no model (Create: NOT_FOUND).
#pragma once

#include <memory>

#include "common/status.h"
#include "model/gguf_file.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocabulary_spec.h"

namespace pier::model {

[[nodiscard]] Result<tokenizer::VocabularySpec> ReadVocabularySpec(const GgufFile& file);

// Tokenizer::Create(ReadVocabularySpec(file)).
[[nodiscard]] Result<std::unique_ptr<tokenizer::Tokenizer>> LoadTokenizer(const GgufFile& file);

// Parses `tokenizer.chat_template`. NOT_FOUND when absent; parse errors are prefixed with
// the file path and the key.
[[nodiscard]] Result<tokenizer::ChatTemplate> LoadChatTemplate(const GgufFile& file);

}  // namespace pier::model
