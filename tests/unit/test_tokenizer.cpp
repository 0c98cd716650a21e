// Tokenizer components on tiny hand-written tokenizer.json files, each case worked out by
// hand from `tokenizers`' rules: BPE merge order, unk / byte fallback, added tokens
// (longest first, lstrip / rstrip / single_word, normalized), normalizers, pre-tokenizer
// split behaviours, post-processors, decoders, errors, and the streaming detokenizer.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace vllm {
namespace test_tokenizer {
namespace {

// The value, or `fallback` when `e` holds an error (the test then fails on the mismatch).
template <typename T, typename U>
T or_else(const Expected<T>& e, U&& fallback) {
  return e.has_value() ? e.value() : T(std::forward<U>(fallback));
}

using nlohmann::json;
using Ids = std::vector<int32_t>;

json bpe(json vocab, json merges) {
  return {{"version", "1.0"},
          {"model", {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)}}}};
}

Tokenizer load(const json& j) {
  auto t = Tokenizer::from_json(j.dump(), "test.json");
  EXPECT_TRUE(t.has_value()) << t.status().to_string();
  if (!t.has_value()) std::abort();
  return std::move(t).value();
}

Ids enc(const Tokenizer& t, std::string_view text, bool special = false) {
  auto ids = t.encode(text, special);
  EXPECT_TRUE(ids.has_value()) << ids.status().to_string();
  return ids.has_value() ? *ids : Ids{-1};
}

std::string dec(const Tokenizer& t, const Ids& ids, bool skip = false) {
  DecodeOptions o;
  o.skip_special_tokens = skip;
  auto s = t.decode(ids, o);
  EXPECT_TRUE(s.has_value()) << s.status().to_string();
  return s.has_value() ? *s : "<error>";
}

// A vocabulary where every listed piece is one token and ignore_merges maps a whole word to
// its id: the ids then show exactly how the pre-tokenizer split the text.
json whole_words(const std::vector<std::string>& pieces) {
  json vocab = json::object();
  for (size_t i = 0; i < pieces.size(); ++i) vocab[pieces[i]] = i;
  json j = bpe(vocab, json::array());
  j["model"]["ignore_merges"] = true;
  return j;
}

TEST(TokenizerBpe, MergesLowestRankFirst) {
  json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}};
  EXPECT_EQ(enc(load(bpe(vocab, {"b c", "a b"})), "abc"), (Ids{0, 4}));
  EXPECT_EQ(enc(load(bpe(vocab, {"a b", "b c"})), "abc"), (Ids{3, 2}));
  // Pair form of merges, as newer files write them.
  EXPECT_EQ(enc(load(bpe(vocab, json::array({json::array({"b", "c"})}))), "abc"), (Ids{0, 4}));
}

TEST(TokenizerBpe, EqualRanksMergeLeftmostFirst) {
  json vocab = {{"a", 0}, {"aa", 1}};
  EXPECT_EQ(enc(load(bpe(vocab, {"a a"})), "aaa"), (Ids{1, 0}));
  EXPECT_EQ(enc(load(bpe(vocab, {"a a"})), "aaaa"), (Ids{1, 1}));
}

TEST(TokenizerBpe, UnknownCharacters) {
  json vocab = {{"a", 0}, {"b", 1}, {"ab", 2}, {"<unk>", 3}};
  // No unk token: unknown characters vanish and their neighbours still merge.
  EXPECT_EQ(enc(load(bpe(vocab, {"a b"})), "axb"), (Ids{2}));
  json j = bpe(vocab, {"a b"});
  j["model"]["unk_token"] = "<unk>";
  EXPECT_EQ(enc(load(j), "axyb"), (Ids{0, 3, 3, 1}));
  j["model"]["fuse_unk"] = true;
  EXPECT_EQ(enc(load(j), "axyb"), (Ids{0, 3, 1}));
}

TEST(TokenizerBpe, ByteFallback) {
  json vocab = {{"a", 0}, {"<0x78>", 1}, {"<0xC3>", 2}, {"<0xA9>", 3}, {"<unk>", 4}};
  json j = bpe(vocab, json::array());
  j["model"]["byte_fallback"] = true;
  j["model"]["unk_token"] = "<unk>";
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders", {{{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}};
  Tokenizer t = load(j);
  EXPECT_EQ(enc(t, "ax\u00e9"), (Ids{0, 1, 2, 3}));
  EXPECT_EQ(enc(t, "a\u00ff"), (Ids{0, 4}));  // <0xC3><0xBF>: 0xBF missing -> unk
  EXPECT_EQ(dec(t, {0, 1, 2, 3}), "ax\u00e9");
  EXPECT_EQ(dec(t, {2}), "\ufffd");  // an incomplete byte run: one U+FFFD per byte
  EXPECT_EQ(dec(t, {2, 2, 0}), "\ufffd\ufffda");
}

TEST(TokenizerBpe, SubwordPrefixAndSuffix) {
  json j = bpe({{"a", 0}, {"##b", 1}, {"ab", 2}}, {"a ##b"});
  j["model"]["continuing_subword_prefix"] = "##";
  EXPECT_EQ(enc(load(j), "ab"), (Ids{2}));
  json k = bpe({{"a", 0}, {"b</w>", 1}, {"ab</w>", 2}}, {"a b</w>"});
  k["model"]["end_of_word_suffix"] = "</w>";
  EXPECT_EQ(enc(load(k), "ab"), (Ids{2}));
}

TEST(TokenizerBpe, IgnoreMergesTakesWholeWords) {
  json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"bc", 3}, {"abc", 4}};
  json j = bpe(vocab, {"b c"});
  EXPECT_EQ(enc(load(j), "abc"), (Ids{0, 3}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(enc(load(j), "abc"), (Ids{4}));
}

// h i Ġ (space) with merges into "hi" and "Ġhi"; ByteLevel pre-tokenizer and decoder.
json byte_level_hi() {
  json j = bpe({{"h", 0}, {"i", 1}, {"\u0120", 2}, {"hi", 3}, {"\u0120h", 4}, {"\u0120hi", 5}},
               {"\u0120 h", "\u0120h i", "h i"});
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}};
  return j;
}

TEST(TokenizerByteLevel, SplitsMapsAndDecodes) {
  Tokenizer t = load(byte_level_hi());
  EXPECT_EQ(enc(t, "hi hi"), (Ids{3, 5}));
  EXPECT_EQ(dec(t, {3, 5}), "hi hi");
  EXPECT_EQ(dec(t, {2, 2, 3}), "  hi");
  json j = byte_level_hi();
  j["pre_tokenizer"]["add_prefix_space"] = true;
  EXPECT_EQ(enc(load(j), "hi"), (Ids{5}));
  EXPECT_EQ(enc(load(j), " hi"), (Ids{5}));  // no second space when one is there
}

TEST(TokenizerAddedTokens, MatchedBeforeTheModelLongestFirst) {
  json j = byte_level_hi();
  j["added_tokens"] = {
      {{"id", 6}, {"content", "<s>"}, {"special", true}},
      {{"id", 7}, {"content", "<hi>"}, {"special", false}, {"normalized", false}},
      {{"id", 8}, {"content", "<hi>>"}, {"special", false}, {"normalized", false}},
  };
  Tokenizer t = load(j);
  EXPECT_EQ(enc(t, "<s>hi"), (Ids{6, 3}));
  EXPECT_EQ(enc(t, "hi<s> hi"), (Ids{3, 6, 5}));
  EXPECT_EQ(enc(t, "<hi>>hi"), (Ids{8, 3}));  // the longer of two tokens at one position
  EXPECT_EQ(dec(t, {6, 3, 7}), "<s>hi<hi>");
  EXPECT_EQ(dec(t, {6, 3, 7}, /*skip=*/true), "hi<hi>");  // only special tokens are skipped
  EXPECT_TRUE(t.is_special(6));
  EXPECT_FALSE(t.is_special(7));
  EXPECT_EQ(t.token_to_id("<hi>"), 7);
  EXPECT_EQ(t.id_to_token(5), "\u0120hi");
  EXPECT_EQ(t.vocab_size(), 9);
}

TEST(TokenizerAddedTokens, StripAndSingleWord) {
  json j = byte_level_hi();
  j["added_tokens"] = {
      {{"id", 6}, {"content", "<m>"}, {"special", true}, {"lstrip", true}, {"rstrip", true}},
      {{"id", 7}, {"content", "ih"}, {"single_word", true}, {"normalized", false}},
  };
  Tokenizer t = load(j);
  // The spaces around <m> belong to it, so the second word has no Ġ.
  EXPECT_EQ(enc(t, "hi  <m> hi"), (Ids{3, 6, 3}));
  EXPECT_EQ(enc(t, "hi ih hi"), (Ids{3, 2, 7, 5}));
  EXPECT_EQ(enc(t, "hih"), (Ids{3, 0}));  // "ih" glued to a word: not the added token
}

TEST(TokenizerAddedTokens, NormalizedTokensMatchAfterTheNormalizer) {
  json j = whole_words({"a", "b", "up"});
  j["normalizer"] = {{"type", "Lowercase"}};
  j["pre_tokenizer"] = {{"type", "WhitespaceSplit"}};
  j["added_tokens"] = {
      {{"id", 3}, {"content", "HELLO"}, {"special", false}, {"normalized", true}},
      {{"id", 4}, {"content", "UP"}, {"special", false}, {"normalized", false}},
  };
  Tokenizer t = load(j);
  EXPECT_EQ(enc(t, "a HeLLo b"), (Ids{0, 3, 1}));
  EXPECT_EQ(enc(t, "a UP b"), (Ids{0, 4, 1}));
  EXPECT_EQ(enc(t, "a Up b"), (Ids{0, 2, 1}));  // not the raw "UP": lowercased, then the model
  EXPECT_EQ(dec(t, {3}), "hello");              // a normalized token decodes normalized, as HF
}

TEST(TokenizerAddedTokens, IdsAreAssignedAsTokenizersDoes) {
  // The file's "id" is only a hint: a content in the vocabulary keeps that id, others get
  // the next ids after the vocabulary, in file order.
  json j = whole_words({"a", "b"});
  j["added_tokens"] = {{{"id", 40}, {"content", "<x>"}, {"special", true}},
                       {{"id", 7}, {"content", "b"}, {"special", true}},
                       {{"id", 41}, {"content", "<y>"}, {"special", true}}};
  Tokenizer t = load(j);
  EXPECT_EQ(t.token_to_id("<x>"), 2);
  EXPECT_EQ(t.token_to_id("b"), 1);
  EXPECT_EQ(t.token_to_id("<y>"), 3);
  EXPECT_TRUE(t.is_special(1));
}

TEST(TokenizerNormalizers, UnicodeForms) {
  json j = whole_words({"\u00e9", "e", "\u0301", "fi", "\ufb01"});
  j["normalizer"] = {{"type", "NFC"}};
  EXPECT_EQ(enc(load(j), "e\u0301"), (Ids{0}));
  j["normalizer"] = {{"type", "NFD"}};
  EXPECT_EQ(enc(load(j), "\u00e9"), (Ids{1, 2}));
  j["normalizer"] = {{"type", "NFKC"}};
  EXPECT_EQ(enc(load(j), "\ufb01"), (Ids{3}));
  j["normalizer"] = {{"type", "NFC"}};
  EXPECT_EQ(enc(load(j), "\ufb01"), (Ids{4}));
}

TEST(TokenizerNormalizers, ReplacePrependStripLowercaseSequence) {
  json j = whole_words({"\u2581hi\u2581there", "\u2581hi", "\u0069\u0307"});
  j["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}},
        {{"type", "Lowercase"}},
        {{"type", "Prepend"}, {"prepend", "\u2581"}},
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}};
  Tokenizer t = load(j);
  EXPECT_EQ(enc(t, "  Hi There \t"), (Ids{0}));
  EXPECT_EQ(enc(t, "HI"), (Ids{1}));
  // U+0130 lowercases to two code points (i + combining dot above), as Rust does.
  json k = whole_words({"i\u0307"});
  k["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_EQ(enc(load(k), "\u0130"), (Ids{0}));
}

TEST(TokenizerPreTokenizers, SplitBehaviours) {
  // The split of "the-final--countdown" on "-" for each behaviour (tokenizers' doc example).
  json j = whole_words(
      {"the", "final", "countdown", "-", "--", "the-", "final-", "-final", "-countdown"});
  auto split = [&](const char* behavior) {
    j["pre_tokenizer"] = {{"type", "Split"},
                          {"pattern", {{"String", "-"}}},
                          {"behavior", behavior},
                          {"invert", false}};
    return enc(load(j), "the-final--countdown");
  };
  EXPECT_EQ(split("Removed"), (Ids{0, 1, 2}));
  EXPECT_EQ(split("Isolated"), (Ids{0, 3, 1, 3, 3, 2}));
  EXPECT_EQ(split("MergedWithPrevious"), (Ids{5, 6, 3, 2}));
  EXPECT_EQ(split("MergedWithNext"), (Ids{0, 7, 3, 8}));
  EXPECT_EQ(split("Contiguous"), (Ids{0, 3, 1, 4, 2}));
  // A regex pattern, inverted: the matches are kept, the rest removed.
  j["pre_tokenizer"] = {{"type", "Split"},
                        {"pattern", {{"Regex", "[a-z]+"}}},
                        {"behavior", "Removed"},
                        {"invert", true}};
  EXPECT_EQ(enc(load(j), "the-final--countdown"), (Ids{0, 1, 2}));
}

TEST(TokenizerPreTokenizers, DigitsMetaspaceAndSequence) {
  json j = whole_words({"ab", "123", "1", "2", "3", "\u2581hi", "\u2581there"});
  j["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", false}};
  EXPECT_EQ(enc(load(j), "ab123ab"), (Ids{0, 1, 0}));
  j["pre_tokenizer"]["individual_digits"] = true;
  EXPECT_EQ(enc(load(j), "ab123ab"), (Ids{0, 2, 3, 4, 0}));
  j["pre_tokenizer"] = {{"type", "Metaspace"},
                        {"replacement", "\u2581"},
                        {"prepend_scheme", "always"},
                        {"split", true}};
  EXPECT_EQ(enc(load(j), "hi there"), (Ids{5, 6}));
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "WhitespaceSplit"}}, {{"type", "Digits"}, {"individual_digits", true}}}}};
  EXPECT_EQ(enc(load(j), " ab  12 "), (Ids{0, 2, 3}));
}

TEST(TokenizerPostProcessors, TemplatesAddSpecialTokens) {
  json j = byte_level_hi();
  j["added_tokens"] = {{{"id", 6}, {"content", "<s>"}, {"special", true}},
                       {{"id", 7}, {"content", "</s>"}, {"special", true}}};
  j["post_processor"] = {{"type", "Sequence"},
                         {"processors",
                          {{{"type", "ByteLevel"}, {"trim_offsets", false}},
                           {{"type", "TemplateProcessing"},
                            {"single",
                             {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
                            {"special_tokens",
                             {{"<s>", {{"id", "<s>"}, {"ids", {6}}, {"tokens", {"<s>"}}}},
                              {"</s>", {{"id", "</s>"}, {"ids", {7}}, {"tokens", {"</s>"}}}}}}}}}};
  Tokenizer t = load(j);
  EXPECT_EQ(enc(t, "hi", true), (Ids{6, 3, 7}));
  EXPECT_EQ(enc(t, "hi", false), (Ids{3}));
  EXPECT_EQ(enc(t, "", true), (Ids{6, 7}));
  EXPECT_EQ(enc(t, "", false), (Ids{}));
  EXPECT_EQ(dec(t, {6, 3, 7}, true), "hi");
}

TEST(TokenizerDecoders, SentencePieceStyleChain) {
  // Llama 2's decoder: ▁ -> space, byte fallback, fuse, strip one leading space.
  json j = bpe({{"\u2581hi", 0}, {"\u2581there", 1}, {"<0xE2>", 2}, {"<0x82>", 3}, {"<0xAC>", 4}},
               json::array());
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  Tokenizer t = load(j);
  EXPECT_EQ(dec(t, {0, 1}), "hi there");
  EXPECT_EQ(dec(t, {0, 2, 3, 4}), "hi\u20ac");
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}};
  EXPECT_EQ(dec(load(j), {0, 1}), "hi there");
}

TEST(TokenizerDecode, CleanUpTokenizationSpacesIsOptIn) {
  Tokenizer t = load(whole_words({"a", ".", "'s"}));
  DecodeOptions o;
  EXPECT_EQ(*t.decode(Ids{0, 1, 2}, o), "a . 's");  // no decoder: tokens joined by spaces
  o.clean_up_tokenization_spaces = true;
  EXPECT_EQ(*t.decode(Ids{0, 1, 2}, o), "a.'s");
}

TEST(TokenizerErrors, ReportWhatIsWrong) {
  Tokenizer t = load(byte_level_hi());
  auto bad = t.encode("hi\xff", false);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("UTF-8"), std::string::npos);
  auto unknown = t.decode(Ids{3, 99}, DecodeOptions{});
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.status().code(), ErrorCode::kOutOfRange);
  EXPECT_NE(unknown.status().message().find("99"), std::string::npos);
  EXPECT_EQ(enc(t, ""), (Ids{}));

  auto not_json = Tokenizer::from_json("{\"model\": ", "x.json");
  ASSERT_FALSE(not_json.has_value());
  EXPECT_EQ(not_json.status().code(), ErrorCode::kInvalidFormat);
  EXPECT_NE(not_json.status().message().find("x.json"), std::string::npos);

  json wp = bpe({{"a", 0}}, json::array());
  wp["model"]["type"] = "WordPiece";
  auto unsupported = Tokenizer::from_json(wp.dump(), "x.json");
  ASSERT_FALSE(unsupported.has_value());
  EXPECT_EQ(unsupported.status().code(), ErrorCode::kUnsupported);

  auto bad_merge = Tokenizer::from_json(bpe({{"a", 0}}, {"a b"}).dump(), "x.json");
  ASSERT_FALSE(bad_merge.has_value());
  EXPECT_NE(bad_merge.status().message().find("model.merges[0]"), std::string::npos)
      << bad_merge.status().to_string();

  json pre = byte_level_hi();
  pre["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", ""}};
  auto precompiled = Tokenizer::from_json(pre.dump(), "x.json");
  ASSERT_FALSE(precompiled.has_value());
  EXPECT_EQ(precompiled.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(precompiled.status().message().find("Precompiled"), std::string::npos);

  json regex = byte_level_hi();
  regex["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  auto bad_regex = Tokenizer::from_json(regex.dump(), "x.json");
  ASSERT_FALSE(bad_regex.has_value());
  EXPECT_NE(bad_regex.status().message().find("pre_tokenizer.pattern"), std::string::npos);

  auto missing = Tokenizer::from_file("/nonexistent/dir/tokenizer.json");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
}

// A byte-fallback tokenizer: "a" and the three bytes of "€" (E2 82 AC).
Tokenizer euro_tokenizer() {
  json j = bpe({{"a", 0}, {"<0xE2>", 1}, {"<0x82>", 2}, {"<0xAC>", 3}, {"<s>", 4}}, json::array());
  j["model"]["byte_fallback"] = true;
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders", {{{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}};
  j["added_tokens"] = {{{"id", 4}, {"content", "<s>"}, {"special", true}}};
  return load(j);
}

std::vector<std::string> stream(const Tokenizer& t, const Ids& ids, DecodeOptions o) {
  IncrementalDetokenizer d(t, o);
  std::vector<std::string> out;
  for (int32_t id : ids) {
    auto piece = d.step(id);
    EXPECT_TRUE(piece.has_value()) << piece.status().to_string();
    out.push_back(or_else(piece, "<error>"));
  }
  out.push_back(or_else(d.flush(), "<error>"));
  return out;
}

TEST(IncrementalDetokenizer, HoldsIncompleteCharacters) {
  Tokenizer t = euro_tokenizer();
  DecodeOptions o;
  using S = std::vector<std::string>;
  EXPECT_EQ(stream(t, {0, 1, 2, 3, 0}, o), (S{"a", "", "", "", "\u20aca", ""}));
  // A byte run that turns invalid: "a" stays held until the run ends, then both are U+FFFD.
  EXPECT_EQ(stream(t, {1, 0}, o), (S{"", "\ufffda", ""}));
  // The end of the stream: the held bytes come out of flush(), as decode() shows them.
  EXPECT_EQ(stream(t, {0, 1, 2}, o), (S{"a", "", "", "\ufffd\ufffd"}));
  EXPECT_EQ(stream(t, {4, 0, 4}, o), (S{"", "a", "", ""}));
  o.skip_special_tokens = false;
  EXPECT_EQ(stream(t, {4, 0, 4}, o), (S{"<s>", "a", "<s>", ""}));
  auto bad = IncrementalDetokenizer(t, o).step(77);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().code(), ErrorCode::kOutOfRange);
}

TEST(IncrementalDetokenizer, PromptGivesContextButIsNotReturned) {
  Tokenizer t = load(byte_level_hi());
  IncrementalDetokenizer d(t, DecodeOptions{}, Ids{3, 5, 5, 5, 5});
  EXPECT_EQ(or_else(d.step(5), "?"), " hi");
  EXPECT_EQ(or_else(d.flush(), "?"), "");
}

TEST(IncrementalDetokenizer, MetaspaceSpaceAfterTheFirstWindow) {
  json j = bpe({{"\u2581hi", 0}, {"\u2581there", 1}}, json::array());
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}};
  Tokenizer t = load(j);
  // Only the first token of the whole sequence loses its ▁; later windows keep the space.
  EXPECT_EQ(stream(t, {0, 1, 1}, DecodeOptions{}),
            (std::vector<std::string>{"hi", " there", " there", ""}));
}

// A decoder that can take text back once more tokens follow (a two-character Replace on the
// fused text: "l" then "l" becomes "L") streams nothing and returns the whole text at the
// end, so the pieces still add up to decode(). Replace per token, or of one character after
// Fuse, only appends, and streams token by token.
TEST(IncrementalDetokenizer, RewritingDecoderWaitsForTheEnd) {
  json j = bpe({{"H", 0}, {"e", 1}, {"l", 2}, {"o", 3}}, json::array());
  auto replace = [](const char* from, const char* to) {
    return json{{"type", "Replace"}, {"pattern", {{"String", from}}}, {"content", to}};
  };
  using S = std::vector<std::string>;
  j["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "Fuse"}}, replace("ll", "L")}}};
  Tokenizer rewriting = load(j);
  EXPECT_EQ(dec(rewriting, {0, 1, 2, 2, 3}), "HeLo");
  EXPECT_EQ(stream(rewriting, {0, 1, 2, 2, 3}, DecodeOptions{}), (S{"", "", "", "", "", "HeLo"}));
  // With a prompt: the context is not returned, and what the output adds comes at the end.
  IncrementalDetokenizer primed(rewriting, DecodeOptions{}, Ids{0, 1});
  EXPECT_EQ(or_else(primed.step(2), "?"), "");
  EXPECT_EQ(or_else(primed.step(3), "?"), "");
  EXPECT_EQ(or_else(primed.flush(), "?"), "lo");

  j["decoder"] = {{"type", "Sequence"}, {"decoders", {replace("ll", "L"), {{"type", "Fuse"}}}}};
  EXPECT_EQ(stream(load(j), {0, 1, 2, 2, 3}, DecodeOptions{}), (S{"H", "e", "l", "l", "o", ""}));
  j["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "Fuse"}}, replace("l", "L")}}};
  EXPECT_EQ(stream(load(j), {0, 1, 2, 2, 3}, DecodeOptions{}), (S{"H", "e", "L", "L", "o", ""}));
}

}  // namespace
}  // namespace test_tokenizer
}  // namespace vllm
