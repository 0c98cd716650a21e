// Request fields -> StructuredOutputsParams -> Grammar (structured_outputs.h).
#include "structured/structured_outputs.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <utility>

#include "structured/ebnf.h"
#include "structured/json_schema.h"
#include "structured/regex.h"

namespace vllm::structured {
namespace {

template <class J>
std::string_view type_name(const J& value) {
  if (value.is_number_integer()) return "integer";
  if (value.is_number_float()) return "number";
  return value.type_name();
}

template <class J>
const J* find(const J& object, std::string_view key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

template <class J>
Status wrong_type(std::string_view key, std::string_view expected, const J& got) {
  return make_error(ErrorCode::kInvalidArgument, "'{}' must be {}, got {}", key, expected,
                    type_name(got));
}

template <class J>
Status read_text(const J& object, std::string_view key, std::string_view name,
                 std::optional<std::string>* out) {
  const J* v = find(object, key);
  if (v == nullptr) return Status::ok();
  if (!v->is_string()) return wrong_type(name, "a string", *v);
  *out = v->template get<std::string>();
  return Status::ok();
}

// A schema is an object, or JSON text of one. Key order is kept when J keeps it.
template <class J>
Status read_schema(const J& object, std::string_view key, std::string_view name,
                   std::optional<std::string>* out) {
  const J* v = find(object, key);
  if (v == nullptr) return Status::ok();
  if (v->is_string()) {
    *out = v->template get<std::string>();
  } else if (v->is_object() || v->is_boolean()) {
    *out = v->dump();
  } else {
    return wrong_type(name, "a JSON Schema (an object, or its JSON text)", *v);
  }
  return Status::ok();
}

template <class J>
Status read_choice(const J& object, std::string_view key, std::string_view name,
                   std::optional<std::vector<std::string>>* out) {
  const J* v = find(object, key);
  if (v == nullptr) return Status::ok();
  if (!v->is_array()) return wrong_type(name, "a list of strings", *v);
  std::vector<std::string> choices;
  for (const J& c : *v) {
    if (!c.is_string()) return wrong_type(name, "a list of strings", c);
    choices.push_back(c.template get<std::string>());
  }
  *out = std::move(choices);
  return Status::ok();
}

template <class J>
Status read_flag(const J& object, std::string_view key, std::string_view name, bool* out) {
  const J* v = find(object, key);
  if (v == nullptr) return Status::ok();
  if (!v->is_boolean()) return wrong_type(name, "a boolean", *v);
  *out = v->template get<bool>();
  return Status::ok();
}

// Sets `*field` from a second spelling of the same constraint, refusing two different ones.
template <class T>
Status merge(std::optional<T>* field, std::optional<T> value, std::string_view name) {
  if (!value) return Status::ok();
  if (*field && **field != *value) {
    return make_error(ErrorCode::kInvalidArgument,
                      "'{}' and 'structured_outputs' give different constraints", name);
  }
  *field = std::move(value);
  return Status::ok();
}

}  // namespace

int StructuredOutputsParams::num_constraints() const {
  return (json ? 1 : 0) + (regex ? 1 : 0) + (choice ? 1 : 0) + (grammar ? 1 : 0) +
         (json_object ? 1 : 0);
}

Status StructuredOutputsParams::validate() const {
  const int n = num_constraints();
  if (n > 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      "You can only use one kind of structured outputs constraint but multiple "
                      "are specified (json, regex, choice, grammar, json_object)");
  }
  if (n == 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "You must use one kind of structured outputs constraint but none are "
                      "specified (json, regex, choice, grammar, json_object)");
  }
  if (choice && choice->empty()) {
    return make_error(ErrorCode::kInvalidArgument, "structured_outputs.choice must not be empty");
  }
  return Status::ok();
}

const char* StructuredOutputsParams::kind_name() const {
  if (json) return "json";
  if (regex) return "regex";
  if (choice) return "choice";
  if (grammar) return "grammar";
  if (json_object) return "json_object";
  return "none";
}

std::string StructuredOutputsParams::cache_key() const {
  std::string key = kind_name();
  key += disable_any_whitespace ? "|compact" : "|ws";
  key += disable_additional_properties ? "|noadd" : "|add?";
  if (whitespace_pattern) key += "|wsp:" + *whitespace_pattern;
  key += "|";
  if (json) key += *json;
  if (regex) key += *regex;
  if (grammar) key += *grammar;
  if (choice) {
    for (const std::string& c : *choice) {
      key += std::to_string(c.size()) + ":" + c;
    }
  }
  return key;
}

namespace {

template <class J>
Expected<std::optional<StructuredOutputsParams>> parse_impl(const J& request,
                                                            bool require_constraint) {
  if (!request.is_object()) return std::optional<StructuredOutputsParams>();
  StructuredOutputsParams p;
  bool present = false;
  if (const J* so = find(request, "structured_outputs")) {
    if (!so->is_object()) return wrong_type("structured_outputs", "an object", *so);
    present = true;
    VLLM_RETURN_IF_ERROR(read_schema(*so, "json", "structured_outputs.json", &p.json));
    VLLM_RETURN_IF_ERROR(read_text(*so, "regex", "structured_outputs.regex", &p.regex));
    VLLM_RETURN_IF_ERROR(read_choice(*so, "choice", "structured_outputs.choice", &p.choice));
    VLLM_RETURN_IF_ERROR(read_text(*so, "grammar", "structured_outputs.grammar", &p.grammar));
    VLLM_RETURN_IF_ERROR(
        read_flag(*so, "json_object", "structured_outputs.json_object", &p.json_object));
    VLLM_RETURN_IF_ERROR(read_flag(*so, "disable_any_whitespace",
                                   "structured_outputs.disable_any_whitespace",
                                   &p.disable_any_whitespace));
    VLLM_RETURN_IF_ERROR(read_flag(*so, "disable_additional_properties",
                                   "structured_outputs.disable_additional_properties",
                                   &p.disable_additional_properties));
    VLLM_RETURN_IF_ERROR(read_text(*so, "whitespace_pattern",
                                   "structured_outputs.whitespace_pattern", &p.whitespace_pattern));
    if (find(*so, "structural_tag") != nullptr) {
      return make_error(ErrorCode::kInvalidArgument,
                        "structured_outputs.structural_tag is not supported");
    }
  }
  // vLLM's older names (before v0.12).
  std::optional<std::string> text;
  VLLM_RETURN_IF_ERROR(read_schema(request, "guided_json", "guided_json", &text));
  VLLM_RETURN_IF_ERROR(merge(&p.json, std::exchange(text, std::nullopt), "guided_json"));
  VLLM_RETURN_IF_ERROR(read_text(request, "guided_regex", "guided_regex", &text));
  VLLM_RETURN_IF_ERROR(merge(&p.regex, std::exchange(text, std::nullopt), "guided_regex"));
  VLLM_RETURN_IF_ERROR(read_text(request, "guided_grammar", "guided_grammar", &text));
  VLLM_RETURN_IF_ERROR(merge(&p.grammar, std::exchange(text, std::nullopt), "guided_grammar"));
  VLLM_RETURN_IF_ERROR(
      read_text(request, "guided_whitespace_pattern", "guided_whitespace_pattern", &text));
  VLLM_RETURN_IF_ERROR(
      merge(&p.whitespace_pattern, std::exchange(text, std::nullopt), "guided_whitespace_pattern"));
  std::optional<std::vector<std::string>> choice;
  VLLM_RETURN_IF_ERROR(read_choice(request, "guided_choice", "guided_choice", &choice));
  VLLM_RETURN_IF_ERROR(merge(&p.choice, std::move(choice), "guided_choice"));
  if (const J* backend = find(request, "guided_decoding_backend");
      backend != nullptr && !backend->is_string()) {
    return wrong_type("guided_decoding_backend", "a string", *backend);
  }
  if (p.num_constraints() == 0 && !present && !p.whitespace_pattern) {
    return std::optional<StructuredOutputsParams>();
  }
  if (require_constraint || p.num_constraints() > 0) VLLM_RETURN_IF_ERROR(p.validate());
  return std::optional<StructuredOutputsParams>(std::move(p));
}

}  // namespace

Expected<std::optional<StructuredOutputsParams>> parse_structured_outputs(
    const nlohmann::json& request, bool require_constraint) {
  return parse_impl(request, require_constraint);
}

Expected<std::optional<StructuredOutputsParams>> parse_structured_outputs(
    const nlohmann::ordered_json& request, bool require_constraint) {
  return parse_impl(request, require_constraint);
}

Expected<Grammar> build_grammar(const StructuredOutputsParams& params) {
  VLLM_RETURN_IF_ERROR(params.validate());
  JsonGrammarOptions options;
  options.any_whitespace = !params.disable_any_whitespace;
  options.whitespace_pattern = params.whitespace_pattern;
  options.allow_additional_properties = false;  // xgrammar's strict mode, as vLLM runs it
  if (params.json) {
    auto schema = nlohmann::ordered_json::parse(*params.json, nullptr, /*allow_exceptions=*/false);
    if (schema.is_discarded()) {
      try {
        nlohmann::ordered_json again = nlohmann::ordered_json::parse(*params.json);
        (void)again;
      } catch (const std::exception& e) {
        return make_error(ErrorCode::kInvalidArgument, "json schema is not valid JSON: {}",
                          e.what());
      }
      return make_error(ErrorCode::kInvalidArgument, "json schema is not valid JSON");
    }
    auto g = json_schema_to_grammar(schema, options);
    if (!g) return g.status().with_context("json schema");
    return g;
  }
  if (params.json_object) {
    auto g = json_object_grammar(options);
    if (!g) return g.status().with_context("json_object");
    return g;
  }
  if (params.regex) {
    auto g = regex_to_grammar(*params.regex);
    if (!g) return g.status();  // already "regex: ..."
    return g;
  }
  if (params.choice) {
    Grammar g;
    const int32_t root = g.add_rule("root");
    std::vector<int32_t> options_list;
    for (const std::string& c : *params.choice) options_list.push_back(g.literal(c));
    g.set_body(root, g.choice(std::move(options_list)));
    g.set_root(root);
    return g;
  }
  auto g = parse_ebnf(*params.grammar);
  if (!g) return g.status().with_context("grammar");
  return g;
}

}  // namespace vllm::structured
