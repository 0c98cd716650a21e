// libFuzzer target for the structured-output compilers: the first byte picks the front end
// (EBNF / Lark grammar, regex, JSON Schema, or request fields), the rest is its text. Any
// input must compile or be refused with a message -- never crash, hang or throw. What
// compiles is matched on a small byte-level vocabulary: the mask of every step must agree
// with accept_token, token by token, along a walk the input's bytes steer.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "structured/compiled_grammar.h"
#include "structured/ebnf.h"
#include "structured/json_schema.h"
#include "structured/matcher.h"
#include "structured/regex.h"
#include "structured/structured_outputs.h"

namespace {

using namespace vllm::structured;

void require(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "fuzz_structured invariant broken: %s\n", what);
    std::abort();
  }
}

const std::shared_ptr<const TokenVocabulary>& vocab() {
  static const auto v = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
    for (const char* t :
         {"{\"", "\"}", "\": ", "},", "ab", "true", "12", "\xC3\xA9", "))", "\\\""}) {
      tokens.push_back(t);
    }
    tokens.push_back("");
    return TokenVocabulary::from_bytes(tokens, {static_cast<int32_t>(tokens.size() - 1)});
  }();
  return v;
}

vllm::Expected<Grammar> front_end(uint8_t mode, std::string_view text) {
  switch (mode % 4) {
    case 0:
      return parse_ebnf(text);
    case 1:
      return regex_to_grammar(text);
    case 2: {
      auto schema = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (schema.is_discarded())
        return vllm::make_error(vllm::ErrorCode::kInvalidArgument, "not JSON");
      JsonGrammarOptions options;
      options.any_whitespace = (mode & 4) != 0;
      return json_schema_to_grammar(schema, options);
    }
    default: {
      auto body = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (body.is_discarded())
        return vllm::make_error(vllm::ErrorCode::kInvalidArgument, "not JSON");
      auto params = parse_structured_outputs(body);
      if (!params) return params.status();
      if (!params->has_value()) return vllm::make_error(vllm::ErrorCode::kInvalidArgument, "none");
      return build_grammar(**params);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 4096) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto grammar = front_end(data[0], text);
  if (!grammar) {
    require(!grammar.status().message().empty(), "errors carry a message");
    return 0;
  }
  (void)grammar->to_ebnf();
  CompileOptions options;
  options.limits.max_nfa_states = 20000;
  options.limits.max_dfa_states = 2000;
  options.max_precomputed_states = 64;
  auto compiled = CompiledGrammar::compile(*grammar, vocab(), options);
  if (!compiled) {
    require(!compiled.status().message().empty(), "errors carry a message");
    return 0;
  }
  GrammarMatcher m(*compiled);
  std::vector<uint32_t> mask(static_cast<size_t>(vocab()->bitmask_words()));
  for (size_t step = 0; step < 8; ++step) {
    const bool any = m.fill_next_token_bitmask(mask);
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocab()->vocab_size(); ++id) {
      const bool bit = (mask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u;
      GrammarMatcher copy = m;
      require(copy.accept_token(id) == bit, "the mask agrees with accept_token");
      if (bit) allowed.push_back(id);
    }
    require(allowed.empty() != any, "the mask says whether any token is allowed");
    if (allowed.empty()) break;
    const uint8_t steer = step + 1 < size ? data[step + 1] : 0;
    require(m.accept_token(allowed[steer % allowed.size()]), "an allowed token is accepted");
    if (m.is_terminated()) break;
  }
  return 0;
}
