// PreTokenizer: splits text into the pieces byte-level BPE merges within.
//
// GGUF files name their pre-tokenizer (`tokenizer.ggml.pre`, e.g. "smollm",
// "llama-bpe", "qwen2") but do not store its rules, so this file keeps the table
// from name to split regexes (taken from the models' Hugging Face tokenizer.json
// files). A pre-tokenizer is a sequence of regexes: each one, applied to every
// piece the previous ones produced, isolates its matches, and the text between
// matches stays a piece of its own, exactly like a Hugging Face
// `Split(pattern, behavior="isolated")` / `ByteLevel(use_regex=true)` chain.
// Regexes run on PCRE2 with UTF and Unicode properties (`\p{L}`, `\p{N}`) and JIT.
//
// Immutable after construction; Split() may be called from many threads at once.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace pier::tokenizer {

class PreTokenizer {
 public:
  // The pre-tokenizer for a `tokenizer.ggml.pre` value; an empty name means
  // "default" (GPT-2's rules). Unknown names give UNSUPPORTED listing known ones.
  static Result<std::unique_ptr<PreTokenizer>> ForName(std::string_view name);

  // A pre-tokenizer from explicit regexes applied in order (PCRE2 syntax).
  // INVALID_ARGUMENT when one does not compile.
  static Result<std::unique_ptr<PreTokenizer>> FromRegexes(std::vector<std::string> regexes);

  // The names ForName() accepts.
  static std::vector<std::string_view> KnownNames();

  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Pieces covering `text` in order (views into it), none empty. `text` must be
  // valid UTF-8 (callers validate first). INTERNAL only if PCRE2 fails at match
  // time (e.g. hits its resource limits).
  Result<std::vector<std::string_view>> Split(std::string_view text) const;

  const std::vector<std::string>& regexes() const { return regexes_; }

  // Model conventions tied to the name rather than stored in GGUF:
  // Llama-3 looks a whole piece up in the vocabulary before merging
  // (tokenizer.json "ignore_merges": true) and adds BOS unless
  // `tokenizer.ggml.add_bos_token` says otherwise.
  bool ignore_merges() const { return ignore_merges_; }
  bool add_bos_by_default() const { return add_bos_by_default_; }

 private:
  struct CompiledRegex;
  PreTokenizer() = default;
  Status SplitWith(const CompiledRegex& regex, std::string_view piece,
                   std::vector<std::string_view>* out) const;

  std::vector<std::string> regexes_;
  std::vector<std::unique_ptr<CompiledRegex>> compiled_;
  bool ignore_merges_ = false;
  bool add_bos_by_default_ = false;
};

}  // namespace pier::tokenizer
