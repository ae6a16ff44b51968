// LoadChatTemplate: the chat template stored in a GGUF file's metadata.
#include "model/gguf_file.h"
#include "tokenizer/chat_template.h"

namespace pier::tokenizer {

Result<ChatTemplate> LoadChatTemplate(const model::GgufFile& file) {
  PIER_ASSIGN_OR_RETURN(std::string_view source, file.GetString("tokenizer.chat_template"));
  Result<ChatTemplate> parsed = ChatTemplate::Parse(std::string(source));
  if (!parsed.ok()) return parsed.status().WithContext(file.path() + ": tokenizer.chat_template");
  return parsed;
}

}  // namespace pier::tokenizer
