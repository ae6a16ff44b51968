#include "model/gguf_tokenizer.h"

#include <optional>
#include <string>
#include <string_view>

namespace pier::model {
namespace {

Status ReadOptionalId(const GgufFile& file, std::string_view key, std::optional<int64_t>* id) {
  if (!file.Has(key)) return Status::Ok();
  PIER_ASSIGN_OR_RETURN(*id, file.GetInt(key));
  return Status::Ok();
}

Status ReadOptionalFlag(const GgufFile& file, std::string_view key, std::optional<bool>* flag) {
  if (!file.Has(key)) return Status::Ok();
  PIER_ASSIGN_OR_RETURN(*flag, file.GetBool(key));
  return Status::Ok();
}

// BPE's merges (required). GGUF stores each as "left right"; the search starts at 1 so that a left
// part that is itself a space still splits right.
Status ReadMerges(const GgufFile& file, tokenizer::VocabularySpec* spec) {
  constexpr std::string_view kKey = "tokenizer.ggml.merges";
  PIER_ASSIGN_OR_RETURN(auto merges, file.GetStringArray(kKey));
  spec->merges.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string_view merge = merges[rank];
    const size_t space = merge.find(' ', 1);
    if (space == std::string_view::npos) {
      return DataLossError(file.path() + ": " + std::string(kKey) + "[" + std::to_string(rank) +
                           "] = '" + std::string(merge) +
                           "' is not two tokens separated by a space");
    }
    spec->merges.emplace_back(std::string(merge.substr(0, space)),
                              std::string(merge.substr(space + 1)));
  }
  return Status::Ok();
}

}  // namespace

Result<tokenizer::VocabularySpec> ReadVocabularySpec(const GgufFile& file) {
  using tokenizer::TokenType;
  tokenizer::VocabularySpec spec;
  spec.source = file.path();
  if (!file.Has("tokenizer.ggml.model")) return spec;
  PIER_ASSIGN_OR_RETURN(std::string_view model, file.GetString("tokenizer.ggml.model"));
  spec.model = std::string(model);
  if (file.Has("tokenizer.ggml.pre")) {
    PIER_ASSIGN_OR_RETURN(std::string_view pre, file.GetString("tokenizer.ggml.pre"));
    spec.pre_tokenizer = std::string(pre);
  }
  PIER_ASSIGN_OR_RETURN(auto tokens, file.GetStringArray("tokenizer.ggml.tokens"));
  spec.tokens.assign(tokens.begin(), tokens.end());
  if (file.Has("tokenizer.ggml.token_type")) {
    PIER_ASSIGN_OR_RETURN(auto types, file.GetIntArray("tokenizer.ggml.token_type"));
    spec.types.reserve(types.size());
    for (int64_t t : types) {
      spec.types.push_back(t >= 0 && t <= 6 ? static_cast<TokenType>(t) : TokenType::kUndefined);
    }
  }
  // Merges only mean something to BPE; a SentencePiece file's stray merges are not read.
  if (spec.model == "gpt2") PIER_RETURN_IF_ERROR(ReadMerges(file, &spec));
  if (file.Has("tokenizer.ggml.scores")) {
    PIER_ASSIGN_OR_RETURN(spec.scores, file.GetFloatArray("tokenizer.ggml.scores"));
  }
  PIER_RETURN_IF_ERROR(ReadOptionalId(file, "tokenizer.ggml.bos_token_id", &spec.bos_id));
  PIER_RETURN_IF_ERROR(ReadOptionalId(file, "tokenizer.ggml.eos_token_id", &spec.eos_id));
  PIER_RETURN_IF_ERROR(ReadOptionalId(file, "tokenizer.ggml.eot_token_id", &spec.eot_id));
  PIER_RETURN_IF_ERROR(ReadOptionalId(file, "tokenizer.ggml.eom_token_id", &spec.eom_id));
  PIER_RETURN_IF_ERROR(ReadOptionalId(file, "tokenizer.ggml.unknown_token_id", &spec.unknown_id));
  PIER_RETURN_IF_ERROR(ReadOptionalId(file, "tokenizer.ggml.padding_token_id", &spec.padding_id));
  PIER_RETURN_IF_ERROR(ReadOptionalId(file, "tokenizer.ggml.cls_token_id", &spec.cls_id));
  PIER_RETURN_IF_ERROR(ReadOptionalId(file, "tokenizer.ggml.seperator_token_id", &spec.sep_id));
  PIER_RETURN_IF_ERROR(ReadOptionalFlag(file, "tokenizer.ggml.add_bos_token", &spec.add_bos));
  PIER_RETURN_IF_ERROR(ReadOptionalFlag(file, "tokenizer.ggml.add_eos_token", &spec.add_eos));
  PIER_RETURN_IF_ERROR(
      ReadOptionalFlag(file, "tokenizer.ggml.add_space_prefix", &spec.add_space_prefix));
  return spec;
}

Result<std::unique_ptr<tokenizer::Tokenizer>> LoadTokenizer(const GgufFile& file) {
  PIER_ASSIGN_OR_RETURN(tokenizer::VocabularySpec spec, ReadVocabularySpec(file));
  return tokenizer::Tokenizer::Create(spec);
}

Result<tokenizer::ChatTemplate> LoadChatTemplate(const GgufFile& file) {
  PIER_ASSIGN_OR_RETURN(std::string_view source, file.GetString("tokenizer.chat_template"));
  Result<tokenizer::ChatTemplate> parsed = tokenizer::ChatTemplate::Parse(std::string(source));
  if (!parsed.ok()) return parsed.status().WithContext(file.path() + ": tokenizer.chat_template");
  return parsed;
}

}  // namespace pier::model
