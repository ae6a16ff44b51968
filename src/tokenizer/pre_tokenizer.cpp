#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <string>

namespace pier::tokenizer {
namespace {

// GPT-2's split (its tokenizer.json `ByteLevel(use_regex=true)`): contractions,
// letters, numbers and other symbols each with an optional leading space, and
// whitespace runs that leave their last space to the following word.
constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Llama-3's split (Meta-Llama-3 tokenizer.json): case-insensitive contractions,
// a letter run with at most one leading non-letter, numbers of up to 3 digits,
// symbols with trailing newlines, newline runs.
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen2's split: Llama-3's with every digit on its own.
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen3.5's split: Qwen2's with combining marks kept inside letter runs.
constexpr std::string_view kQwen35Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// StarCoder / SmolLM: `Digits(individual_digits=true)` then GPT-2's split.
constexpr std::string_view kEachDigitRegex = R"(\p{N})";
constexpr std::string_view kDigitRunRegex = R"(\p{N}+)";

// Falcon: `Punctuation(contiguous)` (Unicode punctuation plus ASCII punctuation
// that Unicode files under symbols), GPT-2's split, then groups of 3 ASCII digits.
// (Its tokenizer.json also has a `Digits` step after `ByteLevel`, where it sees
// byte-mapped text; it is left out, as in llama.cpp, whose Falcon test vectors,
// made with Hugging Face, pass without it: see bpe_vocab_test.cpp.)
constexpr std::string_view kFalconPunctuationRegex = R"([\p{P}\$\+<=>\^~\|`]+)";
constexpr std::string_view kThreeDigitsRegex = R"([0-9][0-9][0-9])";

// DeepSeek LLM / Coder: the `Split` chain of their tokenizer.json files. Newlines
// alone, letter runs (DeepSeek LLM lists its Latin, Greek, Cyrillic... letters
// explicitly), punctuation runs, CJK runs, then numbers.
constexpr std::string_view kNewlineRegex = R"([\r\n])";
constexpr std::string_view kCjkRegex = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";
constexpr std::string_view kDeepseekLlmLettersRegex =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
    R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A})"
    R"(\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})"
    R"(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF})"
    R"(\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})"
    R"(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D})"
    R"(\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3})"
    R"(\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
    R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D})"
    R"(\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184})"
    R"(\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D})"
    R"(\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF})"
    R"(\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F})"
    R"(\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})"
    R"(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";
constexpr std::string_view kDeepseekLlmPunctuationRegex =
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
constexpr std::string_view kTrailingSpaceRegex = R"(\s+$)";
constexpr std::string_view kDeepseekCoderLettersRegex = R"(\s?\p{L}+)";
constexpr std::string_view kDeepseekCoderPunctuationRegex = R"(\s?\p{P}+)";

struct Recipe {
  std::string_view name;
  std::array<std::string_view, 6> regexes;  // empty entries unused
  bool ignore_merges = false;
  bool add_bos_by_default = false;
};

constexpr Recipe kRecipes[] = {
    {"default", {kGpt2Regex}},
    {"gpt2", {kGpt2Regex}},
    {"gpt-2", {kGpt2Regex}},
    {"mpt", {kGpt2Regex}},
    {"olmo", {kGpt2Regex}},
    {"llama-bpe", {kLlama3Regex}, true, true},
    {"llama3", {kLlama3Regex}, true, true},
    {"llama-v3", {kLlama3Regex}, true, true},
    {"qwen2", {kQwen2Regex}},
    {"deepseek-r1-qwen", {kQwen2Regex}},
    {"qwen35", {kQwen35Regex}},
    {"smollm", {kEachDigitRegex, kGpt2Regex}},
    {"starcoder", {kEachDigitRegex, kGpt2Regex}},
    {"refact", {kEachDigitRegex, kGpt2Regex}},
    {"command-r", {kEachDigitRegex, kGpt2Regex}},
    {"codeshell", {kEachDigitRegex, kGpt2Regex}},
    {"falcon", {kFalconPunctuationRegex, kGpt2Regex, kThreeDigitsRegex}},
    {"deepseek-llm",
     {kNewlineRegex, kDeepseekLlmLettersRegex, kDeepseekLlmPunctuationRegex, kTrailingSpaceRegex,
      kCjkRegex, kDigitRunRegex}},
    {"deepseek-coder",
     {kNewlineRegex, kDeepseekCoderLettersRegex, kDeepseekCoderPunctuationRegex, kCjkRegex,
      kEachDigitRegex}},
};

std::string Pcre2ErrorText(int code) {
  std::array<PCRE2_UCHAR, 256> buffer{};
  pcre2_get_error_message(code, buffer.data(), buffer.size());
  return std::string(reinterpret_cast<const char*>(buffer.data()));
}

// Per-thread match state: PCRE2 match data and a JIT stack roomy enough for long
// whitespace runs. Compiled patterns are shared; these are not.
struct MatchScratch {
  MatchScratch()
      : data(pcre2_match_data_create(1, nullptr)),
        context(pcre2_match_context_create(nullptr)),
        jit_stack(pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr)) {
    if (context != nullptr && jit_stack != nullptr) {
      pcre2_jit_stack_assign(context, nullptr, jit_stack);
    }
  }
  ~MatchScratch() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;

  pcre2_match_data* data;
  pcre2_match_context* context;
  pcre2_jit_stack* jit_stack;
};

MatchScratch& ThreadScratch() {
  thread_local MatchScratch scratch;
  return scratch;
}

}  // namespace

struct PreTokenizer::CompiledRegex {
  ~CompiledRegex() { pcre2_code_free(code); }
  pcre2_code* code = nullptr;
};

PreTokenizer::~PreTokenizer() = default;

std::vector<std::string_view> PreTokenizer::KnownNames() {
  std::vector<std::string_view> names;
  for (const Recipe& recipe : kRecipes) names.push_back(recipe.name);
  return names;
}

Result<std::unique_ptr<PreTokenizer>> PreTokenizer::ForName(std::string_view name) {
  if (name.empty()) name = "default";
  for (const Recipe& recipe : kRecipes) {
    if (recipe.name != name) continue;
    std::vector<std::string> regexes;
    for (std::string_view regex : recipe.regexes) {
      if (!regex.empty()) regexes.emplace_back(regex);
    }
    PIER_ASSIGN_OR_RETURN(auto pre, FromRegexes(std::move(regexes)));
    pre->ignore_merges_ = recipe.ignore_merges;
    pre->add_bos_by_default_ = recipe.add_bos_by_default;
    return pre;
  }
  std::string known;
  for (std::string_view known_name : KnownNames()) {
    if (!known.empty()) known += ", ";
    known += known_name;
  }
  return UnsupportedError("unknown pre-tokenizer '" + std::string(name) +
                          "' (tokenizer.ggml.pre); known: " + known);
}

Result<std::unique_ptr<PreTokenizer>> PreTokenizer::FromRegexes(std::vector<std::string> regexes) {
  std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
  for (const std::string& regex : regexes) {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    auto compiled = std::make_unique<CompiledRegex>();
    compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(regex.data()), regex.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
    if (compiled->code == nullptr) {
      return InvalidArgumentError("pre-tokenizer regex '" + regex +
                                  "' does not compile at offset " + std::to_string(error_offset) +
                                  ": " + Pcre2ErrorText(error_code));
    }
    // JIT is an optimisation only: without it pcre2_match interprets the pattern.
    pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);
    pre->compiled_.push_back(std::move(compiled));
  }
  pre->regexes_ = std::move(regexes);
  return pre;
}

Status PreTokenizer::SplitWith(const CompiledRegex& regex, std::string_view piece,
                               std::vector<std::string_view>* out) const {
  MatchScratch& scratch = ThreadScratch();
  if (scratch.data == nullptr) return InternalError("PCRE2 could not allocate match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
  size_t emitted = 0;  // end of the last piece pushed
  size_t search = 0;
  while (search < piece.size()) {
    const int rc = pcre2_match(regex.code, subject, piece.size(), search,
                               PCRE2_NOTEMPTY | PCRE2_NO_UTF_CHECK, scratch.data, scratch.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) return InternalError("pre-tokenizer regex failed: " + Pcre2ErrorText(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.data);
    const size_t match_start = ovector[0];
    const size_t match_end = ovector[1];
    if (match_start > emitted) out->push_back(piece.substr(emitted, match_start - emitted));
    out->push_back(piece.substr(match_start, match_end - match_start));
    emitted = match_end;
    search = match_end;
  }
  if (emitted < piece.size()) out->push_back(piece.substr(emitted));
  return Status::Ok();
}

Result<std::vector<std::string_view>> PreTokenizer::Split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  pieces.push_back(text);
  std::vector<std::string_view> next;
  for (const auto& regex : compiled_) {
    next.clear();
    next.reserve(pieces.size() * 2);
    for (std::string_view piece : pieces) PIER_RETURN_IF_ERROR(SplitWith(*regex, piece, &next));
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace pier::tokenizer
