// Literal and PCRE2 patterns with Oniguruma find_iter semantics (see pattern.h).
//
// onig's FindMatches: search from `last_end`; an empty match that ends exactly where the
// previous match ended is not reported, and the search moves on by one character. We keep
// that rule so empty-matching patterns split the same way.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pattern.h"

#include <pcre2.h>

#include "tokenizer/json_util.h"
#include "tokenizer/unicode_util.h"

namespace vllm::tok {

struct Pattern::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

namespace {

// Generous for real tokenizer regexes (a few steps per character), but it stops
// catastrophic backtracking in a hostile tokenizer.json.
constexpr uint32_t kMatchLimit = 50'000'000;

struct MatchScratch {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  MatchScratch() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (context != nullptr) {
      pcre2_set_match_limit(context, kMatchLimit);
      if (jit_stack != nullptr) pcre2_jit_stack_assign(context, nullptr, jit_stack);
    }
  }
  ~MatchScratch() {
    if (jit_stack != nullptr) pcre2_jit_stack_free(jit_stack);
    if (context != nullptr) pcre2_match_context_free(context);
    if (data != nullptr) pcre2_match_data_free(data);
  }
};

MatchScratch& match_scratch() {
  thread_local MatchScratch scratch;
  return scratch;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  if (n < 0) return "error " + std::to_string(code);
  return std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

// Oniguruma (as `tokenizers` uses it) and PCRE2 disagree on a few shorthand classes under
// Unicode: onig's \s is exactly White_Space, PCRE2's also takes U+180E; onig's \w is
// Alphabetic, marks, Nd, Pc and Join_Control, PCRE2's is L, N and '_'. Rewrite them into
// explicit classes with onig's meaning. Inside a character class only the positive forms
// can be spliced in; \S and \W stay as they are there.
std::string onig_compatible(std::string_view re) {
  constexpr std::string_view kSpace = "\\t-\\r\\x{85}\\p{Z}";
  constexpr std::string_view kWord = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}";
  std::string out;
  out.reserve(re.size() + 16);
  bool in_class = false;
  size_t class_start = 0;  // position just after '[' or '[^'
  for (size_t i = 0; i < re.size(); ++i) {
    char c = re[i];
    if (c == '\\' && i + 1 < re.size()) {
      char n = re[i + 1];
      if (n == 's' || n == 'w') {
        std::string_view set = n == 's' ? kSpace : kWord;
        if (in_class) {
          out += set;
        } else {
          out += '[';
          out += set;
          out += ']';
        }
        ++i;
        continue;
      }
      if ((n == 'S' || n == 'W') && !in_class) {
        out += "[^";
        out += n == 'S' ? kSpace : kWord;
        out += ']';
        ++i;
        continue;
      }
      if (n == 'Q') {  // literal text up to \E
        size_t end = re.find("\\E", i + 2);
        size_t stop = end == std::string_view::npos ? re.size() : end + 2;
        out.append(re.substr(i, stop - i));
        i = stop - 1;
        continue;
      }
      if ((n == 'p' || n == 'P' || n == 'x' || n == 'o' || n == 'N') && i + 2 < re.size() &&
          re[i + 2] == '{') {
        size_t end = re.find('}', i + 2);
        size_t stop = end == std::string_view::npos ? re.size() : end + 1;
        out.append(re.substr(i, stop - i));
        i = stop - 1;
        continue;
      }
      out += c;
      out += n;
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < re.size() && re[i + 1] == '^') {
        out += '^';
        ++i;
      }
      class_start = i + 1;
      continue;
    }
    if (in_class && c == '[' && i + 1 < re.size() && re[i + 1] == ':') {  // [:alpha:]
      size_t end = re.find(":]", i + 2);
      size_t stop = end == std::string_view::npos ? re.size() : end + 2;
      out.append(re.substr(i, stop - i));
      i = stop - 1;
      continue;
    }
    if (in_class && c == ']' && i != class_start) in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

Pattern Pattern::literal(std::string text) {
  Pattern p;
  p.text_ = std::move(text);
  return p;
}

Expected<Pattern> Pattern::regex(std::string_view expression, std::string_view where) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  std::string translated = onig_compatible(expression);
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    return make_error(ErrorCode::kInvalidFormat, "{}: regex does not compile at offset {}: {}",
                      where, offset, pcre2_message(error));
  }
  Pattern p;
  p.text_ = std::string(expression);
  p.code_ = std::make_shared<Code>();
  p.code_->code = code;
  p.code_->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return p;
}

Expected<Pattern> Pattern::from_field(const nlohmann::json& object, std::string_view key,
                                      std::string_view where) {
  const nlohmann::json* value = json_find(object, key);
  if (value == nullptr) {
    return make_error(ErrorCode::kInvalidFormat, "{}: missing field", join_path(where, key));
  }
  return from_json(*value, join_path(where, key));
}

Expected<Pattern> Pattern::from_json(const nlohmann::json& j, std::string_view where) {
  if (j.is_object() && j.size() == 1) {
    auto it = j.begin();
    if (it.value().is_string()) {
      const std::string& s = it.value().get_ref<const std::string&>();
      if (it.key() == "String") return literal(s);
      if (it.key() == "Regex") return regex(s, where);
    }
  }
  return make_error(ErrorCode::kInvalidFormat,
                    "{}: expected {{\"String\": ...}} or {{\"Regex\": ...}}, got {}", where,
                    j.dump().substr(0, 200));
}

Status Pattern::find_matches(std::string_view text, std::vector<Match>* matches) const {
  const size_t n = text.size();
  MatchScratch* scratch = code_ ? &match_scratch() : nullptr;
  if (scratch != nullptr && (scratch->data == nullptr || scratch->context == nullptr)) {
    return make_error(ErrorCode::kResourceExhausted, "regex: out of memory for match data");
  }
  // Searches from `from`; false when there is no further match.
  auto search = [&](size_t from, size_t* begin, size_t* end) -> Expected<bool> {
    if (!code_) {
      size_t pos = text.find(text_, from);
      if (pos == std::string_view::npos) return false;
      *begin = pos;
      *end = pos + text_.size();
      return true;
    }
    auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    int rc = code_->jit ? pcre2_jit_match(code_->code, subject, n, from, PCRE2_NO_UTF_CHECK,
                                          scratch->data, scratch->context)
                        : PCRE2_ERROR_JIT_STACKLIMIT;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {  // no JIT, or its stack is too small: interpret
      rc = pcre2_match(code_->code, subject, n, from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       scratch->data, scratch->context);
    }
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) {
      return make_error(ErrorCode::kInvalidArgument, "regex '{}' failed on the input: {}",
                        text_.substr(0, 80), pcre2_message(rc));
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(scratch->data);
    *begin = ov[0];
    *end = ov[1];
    return true;
  };

  size_t last_end = 0;
  bool have_last = false;
  size_t last_match_end = 0;
  while (last_end <= n) {
    size_t b = 0, e = 0;
    VLLM_ASSIGN_OR_RETURN(bool found, search(last_end, &b, &e));
    if (!found) break;
    if (e < b || e > n) return make_error(ErrorCode::kInternal, "regex: bad match bounds");
    if (b == e && have_last && last_match_end == e) {
      if (last_end >= n) break;
      last_end += utf8_len(static_cast<unsigned char>(text[last_end]));
      continue;
    }
    last_end = e;
    have_last = true;
    last_match_end = e;
    matches->push_back({static_cast<uint32_t>(b), static_cast<uint32_t>(e)});
  }
  return Status::ok();
}

}  // namespace vllm::tok
