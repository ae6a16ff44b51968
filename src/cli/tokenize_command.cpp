// `pier tokenize [-m MODEL] TEXT [--no-special] [--no-add-special] [--json]`:
// shows how a model's tokenizer splits a text.
//
// Prints one line per token: the id and the text it stands for, escaped (\n,
// \t, \xNN for bytes that are not a whole UTF-8 character), or with --json one
// object {"model", "count", "tokens": [{"id", "piece", "text"}]}. TEXT "-" reads
// standard input. A missing or corrupt model file, an unsupported tokenizer or
// text that is not UTF-8 prints the reason and exits 1.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "model/gguf_file.h"
#include "model/gguf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace pier::cli {
namespace {

struct TokenizeOptions {
  std::string model;
  std::string text;
  bool no_special = false;
  bool no_add_special = false;
  bool json = false;
};

// Escapes a token's bytes for one line of text output; keeps whole UTF-8 characters.
std::string Escape(std::string_view bytes) {
  std::string out;
  size_t pos = 0;
  while (pos < bytes.size()) {
    const auto c = static_cast<uint8_t>(bytes[pos]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\\' || c == '"') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else {
      // A multi-byte character is copied when well formed; other bytes are \xNN.
      size_t length = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
      if (c > 0xF4 || pos + length > bytes.size()) length = 0;
      for (size_t i = 1; i < length; ++i) {
        if ((static_cast<uint8_t>(bytes[pos + i]) & 0xC0) != 0x80) length = 0;
      }
      if (length > 0) {
        out.append(bytes.substr(pos, length));
        pos += length;
        continue;
      }
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02X", c);
      out += hex;
    }
    ++pos;
  }
  return out;
}

int RunTokenize(const TokenizeOptions& options) {
  std::string text = options.text;
  if (text == "-") text.assign(std::istreambuf_iterator<char>(std::cin), {});
  const std::string path = options.model.empty() ? DefaultModelPath() : options.model;
  auto file = model::GgufFile::Open(path);
  if (!file.ok()) {
    std::fprintf(stderr, "pier tokenize: %s\n", file.status().ToString().c_str());
    return 1;
  }
  auto tokenizer = model::LoadTokenizer(**file);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "pier tokenize: %s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  tokenizer::EncodeOptions encode_options;
  encode_options.parse_special = !options.no_special;
  encode_options.add_special = !options.no_add_special;
  auto ids = (*tokenizer)->Encode(text, encode_options);
  if (!ids.ok()) {
    std::fprintf(stderr, "pier tokenize: %s\n", ids.status().ToString().c_str());
    return 1;
  }
  const tokenizer::Tokenizer& tok = **tokenizer;
  if (options.json) {
    nlohmann::json tokens = nlohmann::json::array();
    for (tokenizer::TokenId id : *ids) {
      tokens.push_back({{"id", id},
                        {"piece", std::string(tok.Piece(id))},
                        {"text", tok.Decode(std::span<const tokenizer::TokenId>(&id, 1))}});
    }
    const nlohmann::json out = {{"model", path}, {"count", ids->size()}, {"tokens", tokens}};
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  for (tokenizer::TokenId id : *ids) {
    std::printf("%d\t\"%s\"\n", id, Escape(tok.TokenBytes(id)).c_str());
  }
  return 0;
}

void RegisterTokenize(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* command = app.add_subcommand("tokenize", "Show the tokens a model's tokenizer makes");
  command->add_option("text", options->text, "Text to tokenize (\"-\" reads standard input)")
      ->required();
  command->add_option("-m,--model", options->model, "GGUF model file (default: the default model)");
  command->add_flag("--no-special", options->no_special,
                    "Tokenize special-token text such as <|im_start|> as plain text");
  command->add_flag("--no-add-special", options->no_add_special,
                    "Do not add the BOS/EOS tokens the model asks for");
  command->add_flag("--json", options->json, "Print one JSON object");
  command->callback([options, &exit_code] { exit_code = RunTokenize(*options); });
}

}  // namespace

PIER_REGISTER_COMMAND(tokenize, RegisterTokenize);

}  // namespace pier::cli
