// JSON Schema -> grammar (json_schema.h). Each schema becomes an expression; every $ref
// target becomes a rule (the automaton builder inlines the ones that do not recurse), and
// free-form JSON values use two recursive rules, json_object and json_array.
#include "structured/json_schema.h"

#include <fmt/format.h>

#include <cmath>
#include <deque>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "structured/json_values.h"
#include "structured/regex.h"

namespace vllm::structured {
namespace {

using J = nlohmann::ordered_json;

constexpr int kMaxDepth = 64;
constexpr int64_t kMaxCount = 10000;

const std::set<std::string_view>& annotation_keywords() {
  static const std::set<std::string_view> k = {
      "title",         "description", "default",          "examples",       "$schema",
      "$id",           "$comment",    "deprecated",       "readOnly",       "writeOnly",
      "discriminator", "$anchor",     "contentMediaType", "contentEncoding"};
  return k;
}

const std::set<std::string_view>& supported_keywords() {
  static const std::set<std::string_view> k = {"type",
                                               "enum",
                                               "const",
                                               "anyOf",
                                               "oneOf",
                                               "allOf",
                                               "$ref",
                                               "$defs",
                                               "definitions",
                                               "nullable",
                                               "minLength",
                                               "maxLength",
                                               "pattern",
                                               "format",
                                               "minimum",
                                               "maximum",
                                               "exclusiveMinimum",
                                               "exclusiveMaximum",
                                               "items",
                                               "prefixItems",
                                               "additionalItems",
                                               "minItems",
                                               "maxItems",
                                               "properties",
                                               "required",
                                               "additionalProperties",
                                               "minProperties",
                                               "maxProperties",
                                               "unevaluatedProperties",
                                               "unevaluatedItems",
                                               "uniqueItems"};
  return k;
}

bool is_annotation(std::string_view key) {
  return annotation_keywords().count(key) > 0 || key.substr(0, 2) == "x-";
}

std::string json_text(const J& value) {
  return value.dump(-1, ' ', false, J::error_handler_t::replace);
}

std::string child_path(const std::string& path, std::string_view key) {
  return path + "/" + std::string(key);
}

std::string shown(const std::string& path) {
  return path.empty() ? "/" : path;
}

// Merges the keywords of `extra` into `base` (allOf, or anyOf siblings); kInvalidArgument
// when both constrain the same keyword differently.
Status merge_into(J* base, const J& extra, const std::string& path) {
  for (auto it = extra.begin(); it != extra.end(); ++it) {
    const std::string& key = it.key();
    if (is_annotation(key)) continue;
    auto existing = base->find(key);
    if (existing == base->end()) {
      (*base)[key] = it.value();
    } else if (key == "properties" && existing->is_object() && it->is_object()) {
      for (auto p = it->begin(); p != it->end(); ++p) {
        auto same = existing->find(p.key());
        if (same != existing->end() && *same != p.value()) {
          return make_error(ErrorCode::kInvalidArgument,
                            "allOf at {}: property '{}' is defined twice differently, which is "
                            "not supported",
                            shown(path), p.key());
        }
        (*existing)[p.key()] = p.value();
      }
    } else if (key == "required" && existing->is_array() && it->is_array()) {
      for (const J& name : *it) {
        if (std::find(existing->begin(), existing->end(), name) == existing->end()) {
          existing->push_back(name);
        }
      }
    } else if (*existing != it.value()) {
      return make_error(ErrorCode::kInvalidArgument,
                        "combining schemas at {} that both set '{}' is not supported", shown(path),
                        key);
    }
  }
  return Status::ok();
}

class SchemaCompiler {
 public:
  SchemaCompiler(const J& root, const JsonGrammarOptions& options) : root_(root), o_(options) {}

  Expected<Grammar> compile_schema() {
    VLLM_RETURN_IF_ERROR(init());
    const int32_t root = g_.add_rule("root");
    g_.set_root(root);
    ref_rules_["#"] = root;
    pending_.push_back({root, "#", &root_});
    VLLM_RETURN_IF_ERROR(drain());
    return std::move(g_);
  }

  Expected<Grammar> compile_json_object() {
    VLLM_RETURN_IF_ERROR(init());
    const int32_t root = g_.add_rule("root");
    g_.set_root(root);
    any_value();
    g_.set_body(root, g_.choice({g_.ref(any_object_rule_), g_.ref(any_array_rule_)}));
    return std::move(g_);
  }

 private:
  struct Pending {
    int32_t rule;
    std::string path;
    const J* schema;
  };

  Status init() {
    if (o_.whitespace_pattern) {
      auto ws = add_regex(&g_, *o_.whitespace_pattern);
      if (!ws) return ws.status().with_context("whitespace_pattern");
      ws_ = *ws;
    } else if (o_.any_whitespace) {
      ws_ = g_.star(g_.char_class({{' ', ' '}, {'\n', '\n'}, {'\t', '\t'}}));
    }
    const bool compact = ws_ < 0;
    item_sep_ = compact ? g_.literal(", ") : g_.sequence({ws_, g_.literal(","), ws_});
    kv_sep_ = compact ? g_.literal(": ") : g_.sequence({ws_, g_.literal(":"), ws_});
    return Status::ok();
  }

  int32_t ws() { return ws_ >= 0 ? ws_ : g_.empty(); }

  // "{" ws inner ws "}" (no whitespace in compact mode).
  int32_t bracketed(std::string_view open, int32_t inner, std::string_view close) {
    return g_.sequence({g_.literal(open), ws(), inner, ws(), g_.literal(close)});
  }

  Status drain() {
    while (!pending_.empty()) {
      Pending p = pending_.front();
      pending_.pop_front();
      depth_ = 0;
      VLLM_ASSIGN_OR_RETURN(int32_t body, schema(*p.schema, p.path == "#" ? "" : p.path.substr(1)));
      g_.set_body(p.rule, body);
    }
    return Status::ok();
  }

  // Free-form JSON: any value (json_object and json_array rules are made on first use).
  int32_t any_value() {
    if (any_value_ >= 0) return any_value_;
    any_object_rule_ = g_.add_rule("json_object");
    any_array_rule_ = g_.add_rule("json_array");
    any_value_ =
        g_.choice({g_.ref(any_object_rule_), g_.ref(any_array_rule_), json_string(&g_),
                   json_number(&g_), g_.literal("true"), g_.literal("false"), g_.literal("null")});
    const int32_t member = g_.sequence({json_string(&g_), kv_sep_, any_value_});
    g_.set_body(
        any_object_rule_,
        bracketed("{",
                  g_.optional(g_.sequence({member, g_.star(g_.sequence({item_sep_, member}))})),
                  "}"));
    g_.set_body(
        any_array_rule_,
        bracketed(
            "[",
            g_.optional(g_.sequence({any_value_, g_.star(g_.sequence({item_sep_, any_value_}))})),
            "]"));
    return any_value_;
  }

  Status error(const std::string& path, std::string_view what) const {
    return make_error(ErrorCode::kInvalidArgument, "{} at {}", what, shown(path));
  }

  Status check_keywords(const J& s, const std::string& path) const {
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& key = it.key();
      if (is_annotation(key) || supported_keywords().count(key) > 0) continue;
      return make_error(ErrorCode::kInvalidArgument, "unsupported JSON Schema keyword '{}' at {}",
                        key, shown(path));
    }
    return Status::ok();
  }

  Expected<int32_t> schema(const J& s, const std::string& path) {
    if (++depth_ > kMaxDepth) {
      return error(path, fmt::format("the schema nests deeper than {} levels", kMaxDepth));
    }
    auto result = schema_inner(s, path);
    --depth_;
    return result;
  }

  Expected<int32_t> schema_inner(const J& s, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return any_value();
      return error(path, "the schema is false, so no value can match it");
    }
    if (!s.is_object()) return error(path, "a schema must be an object or a boolean");
    VLLM_RETURN_IF_ERROR(check_keywords(s, path));
    if (auto ref = s.find("$ref"); ref != s.end()) return reference(s, *ref, path);
    if (auto all = s.find("allOf"); all != s.end()) {
      if (!all->is_array() || all->empty())
        return error(path + "/allOf", "allOf must be a non-empty list");
      J merged = s;
      merged.erase("allOf");
      for (size_t i = 0; i < all->size(); ++i) {
        const J& part = (*all)[i];
        if (!part.is_object())
          return error(fmt::format("{}/allOf/{}", path, i), "allOf parts must be objects");
        if (part.contains("$ref")) {
          return error(fmt::format("{}/allOf/{}", path, i), "$ref inside allOf is not supported");
        }
        VLLM_RETURN_IF_ERROR(merge_into(&merged, part, path));
      }
      return schema(merged, path);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (auto any = s.find(key); any != s.end()) return alternatives(s, key, *any, path);
    }
    std::vector<std::string> types;
    VLLM_RETURN_IF_ERROR(read_types(s, path, &types));
    if (auto values = s.find("enum"); values != s.end())
      return enumeration(*values, types, path + "/enum");
    if (auto value = s.find("const"); value != s.end()) return g_.literal(json_text(*value));
    std::vector<int32_t> options;
    for (const std::string& type : types) {
      VLLM_ASSIGN_OR_RETURN(int32_t e, typed(s, type, path));
      options.push_back(e);
    }
    if (auto nullable = s.find("nullable");
        nullable != s.end() && nullable->is_boolean() && nullable->get<bool>() &&
        std::find(types.begin(), types.end(), "null") == types.end()) {
      options.push_back(g_.literal("null"));
    }
    return g_.choice(std::move(options));
  }

  // The types a schema allows: its "type", else inferred from its keywords, else all.
  Status read_types(const J& s, const std::string& path, std::vector<std::string>* types) const {
    static const std::set<std::string_view> kTypes = {"string", "number", "integer", "boolean",
                                                      "null",   "object", "array"};
    auto type = s.find("type");
    if (type != s.end()) {
      const std::vector<J> list =
          type->is_array() ? type->get<std::vector<J>>() : std::vector<J>{*type};
      for (const J& t : list) {
        if (!t.is_string() || kTypes.count(t.get<std::string>()) == 0) {
          return error(path + "/type", fmt::format("unknown type {}", json_text(t)));
        }
        types->push_back(t.get<std::string>());
      }
      if (types->empty()) return error(path + "/type", "the type list is empty");
      return Status::ok();
    }
    auto has = [&](std::initializer_list<const char*> keys) {
      for (const char* k : keys) {
        if (s.contains(k)) return true;
      }
      return false;
    };
    if (has({"properties", "required", "additionalProperties", "minProperties", "maxProperties"})) {
      types->push_back("object");
    }
    if (has({"items", "prefixItems", "minItems", "maxItems", "additionalItems"}))
      types->push_back("array");
    if (has({"minLength", "maxLength", "pattern", "format"})) types->push_back("string");
    if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}))
      types->push_back("number");
    if (types->empty()) *types = {"object", "array", "string", "number", "boolean", "null"};
    return Status::ok();
  }

  Expected<int32_t> reference(const J& s, const J& ref, const std::string& path) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& key = it.key();
      if (key == "$ref" || key == "$defs" || key == "definitions" || is_annotation(key)) continue;
      return error(path, fmt::format("'{}' beside $ref is not supported", key));
    }
    if (!ref.is_string()) return error(path + "/$ref", "$ref must be a string");
    const std::string target = ref.get<std::string>();
    if (target.empty() || target[0] != '#') {
      return error(path + "/$ref",
                   fmt::format("only local references (\"#...\") are supported, got "
                               "\"{}\"",
                               target));
    }
    auto it = ref_rules_.find(target);
    if (it != ref_rules_.end()) return g_.ref(it->second);
    VLLM_ASSIGN_OR_RETURN(const J* resolved, resolve_pointer(target, path));
    const int32_t rule = g_.add_rule(fmt::format("ref{}", ref_rules_.size()));
    ref_rules_[target] = rule;
    pending_.push_back({rule, target, resolved});
    return g_.ref(rule);
  }

  Expected<const J*> resolve_pointer(const std::string& target, const std::string& path) const {
    const J* at = &root_;
    size_t pos = 1;
    if (pos < target.size() && target[pos] != '/') {
      return error(path + "/$ref", fmt::format("\"{}\" is not a JSON pointer (anchors are not "
                                               "supported)",
                                               target));
    }
    while (pos < target.size()) {
      const size_t next = target.find('/', pos + 1);
      std::string token =
          target.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
      std::string unescaped;
      for (size_t i = 0; i < token.size(); ++i) {
        if (token[i] == '~' && i + 1 < token.size() &&
            (token[i + 1] == '0' || token[i + 1] == '1')) {
          unescaped.push_back(token[i + 1] == '0' ? '~' : '/');
          ++i;
        } else {
          unescaped.push_back(token[i]);
        }
      }
      if (at->is_object() && at->contains(unescaped)) {
        at = &(*at)[unescaped];
      } else if (at->is_array() && !unescaped.empty() &&
                 unescaped.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoull(unescaped.substr(0, 9)) < at->size()) {
        at = &(*at)[std::stoull(unescaped.substr(0, 9))];
      } else {
        return error(path + "/$ref", fmt::format("\"{}\" does not point into the schema", target));
      }
      if (next == std::string::npos) break;
      pos = next;
    }
    return at;
  }

  Expected<int32_t> alternatives(const J& s, const char* key, const J& list,
                                 const std::string& path) {
    const std::string list_path = child_path(path, key);
    if (!list.is_array() || list.empty())
      return error(list_path, fmt::format("{} must be a non-empty list", key));
    // Keywords beside anyOf apply to every branch.
    J siblings = J::object();
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() != key && it.key() != "$defs" && it.key() != "definitions" &&
          !is_annotation(it.key())) {
        siblings[it.key()] = it.value();
      }
    }
    std::vector<int32_t> options;
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string branch_path = fmt::format("{}/{}", list_path, i);
      if (siblings.empty()) {
        VLLM_ASSIGN_OR_RETURN(int32_t e, schema(list[i], branch_path));
        options.push_back(e);
        continue;
      }
      if (!list[i].is_object()) return error(branch_path, "a branch must be an object here");
      if (list[i].contains("$ref")) {
        return error(branch_path, "a $ref branch beside other keywords is not supported");
      }
      J merged = siblings;
      VLLM_RETURN_IF_ERROR(merge_into(&merged, list[i], branch_path));
      VLLM_ASSIGN_OR_RETURN(int32_t e, schema(merged, branch_path));
      options.push_back(e);
    }
    return g_.choice(std::move(options));
  }

  static bool value_has_type(const J& v, const std::string& type) {
    if (type == "string") return v.is_string();
    if (type == "integer")
      return v.is_number_integer() ||
             (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    if (type == "number") return v.is_number();
    if (type == "boolean") return v.is_boolean();
    if (type == "null") return v.is_null();
    if (type == "object") return v.is_object();
    if (type == "array") return v.is_array();
    return false;
  }

  Expected<int32_t> enumeration(const J& values, const std::vector<std::string>& types,
                                const std::string& path) {
    if (!values.is_array() || values.empty()) return error(path, "enum must be a non-empty list");
    std::vector<int32_t> options;
    for (const J& v : values) {
      bool ok = false;
      for (const std::string& t : types) ok = ok || value_has_type(v, t);
      if (ok) options.push_back(g_.literal(json_text(v)));
    }
    if (options.empty()) return error(path, "no enum value has the schema's type");
    return g_.choice(std::move(options));
  }

  Expected<int32_t> typed(const J& s, const std::string& type, const std::string& path) {
    if (type == "null") return g_.literal("null");
    if (type == "boolean") return g_.choice({g_.literal("true"), g_.literal("false")});
    if (type == "string") return string_schema(s, path);
    if (type == "integer") return integer_schema(s, path);
    if (type == "number") return number_schema(s, path);
    if (type == "array") return array_schema(s, path);
    return object_schema(s, path);
  }

  Expected<std::optional<int64_t>> read_count(const J& s, const char* key,
                                              const std::string& path) const {
    auto it = s.find(key);
    if (it == s.end()) return std::optional<int64_t>();
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      return error(child_path(path, key), fmt::format("{} must be a non-negative integer", key));
    }
    if (it->get<int64_t>() > kMaxCount) {
      return error(child_path(path, key),
                   fmt::format("{} above {} is not supported", key, kMaxCount));
    }
    return std::optional<int64_t>(it->get<int64_t>());
  }

  Expected<int32_t> string_schema(const J& s, const std::string& path) {
    VLLM_ASSIGN_OR_RETURN(auto min_length, read_count(s, "minLength", path));
    VLLM_ASSIGN_OR_RETURN(auto max_length, read_count(s, "maxLength", path));
    const bool has_length = min_length.has_value() || max_length.has_value();
    auto pattern = s.find("pattern");
    auto format = s.find("format");
    if (pattern != s.end() && (has_length || format != s.end())) {
      return error(path, "pattern together with minLength, maxLength or format is not supported");
    }
    if (format != s.end() && has_length) {
      return error(path, "format together with minLength or maxLength is not supported");
    }
    if (pattern != s.end()) {
      if (!pattern->is_string()) return error(path + "/pattern", "pattern must be a string");
      auto e = json_string_matching(&g_, pattern->get<std::string>());
      if (!e) return e.status().with_context(fmt::format("pattern at {}", shown(path)));
      return *e;
    }
    if (format != s.end()) {
      if (!format->is_string()) return error(path + "/format", "format must be a string");
      auto e = json_string_format(&g_, format->get<std::string>());
      if (!e) return error(path + "/format", e.status().message());
      return *e;
    }
    const int64_t lo = min_length.value_or(0);
    const int64_t hi = max_length.value_or(-1);
    if (hi >= 0 && hi < lo) return error(path, "maxLength is below minLength");
    return json_string(&g_, static_cast<int32_t>(lo), static_cast<int32_t>(hi));
  }

  // A bound as a double: draft-6 numbers, or draft-4 booleans beside minimum / maximum.
  struct Bounds {
    std::optional<double> lo, hi;
    bool lo_exclusive = false, hi_exclusive = false;
  };
  Expected<Bounds> read_bounds(const J& s, const std::string& path) const {
    Bounds b;
    auto number = [&](const char* key, std::optional<double>* out) -> Status {
      auto it = s.find(key);
      if (it == s.end() || it->is_boolean()) return Status::ok();
      if (!it->is_number())
        return error(child_path(path, key), fmt::format("{} must be a number", key));
      *out = it->get<double>();
      return Status::ok();
    };
    VLLM_RETURN_IF_ERROR(number("minimum", &b.lo));
    VLLM_RETURN_IF_ERROR(number("maximum", &b.hi));
    std::optional<double> xlo, xhi;
    VLLM_RETURN_IF_ERROR(number("exclusiveMinimum", &xlo));
    VLLM_RETURN_IF_ERROR(number("exclusiveMaximum", &xhi));
    auto flag = [&](const char* key) {
      auto it = s.find(key);
      return it != s.end() && it->is_boolean() && it->get<bool>();
    };
    if (flag("exclusiveMinimum")) b.lo_exclusive = true;
    if (flag("exclusiveMaximum")) b.hi_exclusive = true;
    if (xlo && (!b.lo || *xlo >= *b.lo)) b.lo = xlo, b.lo_exclusive = true;
    if (xhi && (!b.hi || *xhi <= *b.hi)) b.hi = xhi, b.hi_exclusive = true;
    for (const auto& v : {b.lo, b.hi}) {
      if (v && (!std::isfinite(*v) || std::fabs(*v) > 9e18)) {
        return error(path, "numeric bounds beyond +-9e18 are not supported");
      }
    }
    return b;
  }

  Expected<int32_t> integer_schema(const J& s, const std::string& path) {
    if (s.contains("multipleOf"))
      return error(path, "unsupported JSON Schema keyword 'multipleOf'");
    VLLM_ASSIGN_OR_RETURN(Bounds b, read_bounds(s, path));
    if (!b.lo && !b.hi) return json_integer(&g_);
    std::optional<int64_t> lo, hi;
    if (b.lo) lo = static_cast<int64_t>(b.lo_exclusive ? std::floor(*b.lo) + 1 : std::ceil(*b.lo));
    if (b.hi) hi = static_cast<int64_t>(b.hi_exclusive ? std::ceil(*b.hi) - 1 : std::floor(*b.hi));
    auto e = integer_in_range(&g_, lo, hi);
    if (!e) return error(path, e.status().message());
    return *e;
  }

  Expected<int32_t> number_schema(const J& s, const std::string& path) {
    VLLM_ASSIGN_OR_RETURN(Bounds b, read_bounds(s, path));
    if (!b.lo && !b.hi) return json_number(&g_);
    for (const auto& v : {b.lo, b.hi}) {
      if (v && std::floor(*v) != *v) {
        return error(path,
                     fmt::format("a non-integer bound ({}) on a number is not supported", *v));
      }
    }
    std::optional<NumberBound> lo, hi;
    if (b.lo) lo = NumberBound{static_cast<int64_t>(*b.lo), b.lo_exclusive};
    if (b.hi) hi = NumberBound{static_cast<int64_t>(*b.hi), b.hi_exclusive};
    auto e = number_in_range(&g_, lo, hi);
    if (!e) return error(path, e.status().message());
    return *e;
  }

  // The items after `prefix` positional ones: a schema expression, or -1 when none may follow.
  Expected<int32_t> rest_items(const J& s, const J* rest, const std::string& path) {
    if (rest == nullptr) return o_.allow_additional_properties ? any_value() : -1;
    if (rest->is_boolean() && !rest->get<bool>()) return -1;
    return schema(*rest, path);
  }

  Expected<int32_t> array_schema(const J& s, const std::string& path) {
    if (auto u = s.find("uniqueItems"); u != s.end() && !(u->is_boolean() && !u->get<bool>())) {
      return error(path, "uniqueItems is not supported");
    }
    if (s.contains("contains")) return error(path, "unsupported JSON Schema keyword 'contains'");
    VLLM_ASSIGN_OR_RETURN(auto min_items, read_count(s, "minItems", path));
    VLLM_ASSIGN_OR_RETURN(auto max_items, read_count(s, "maxItems", path));
    const int64_t min = min_items.value_or(0);
    const int64_t max = max_items.value_or(-1);
    if (max >= 0 && max < min) return error(path, "maxItems is below minItems");
    std::vector<int32_t> prefix;
    int32_t rest = -1;
    auto items = s.find("items");
    auto prefix_items = s.find("prefixItems");
    const J* prefix_list = nullptr;
    std::string prefix_path;
    const J* rest_schema = nullptr;
    std::string rest_path;
    if (prefix_items != s.end()) {
      prefix_list = &*prefix_items, prefix_path = path + "/prefixItems";
      if (items != s.end())
        rest_schema = &*items, rest_path = path + "/items";
      else if (auto u = s.find("unevaluatedItems"); u != s.end())
        rest_schema = &*u, rest_path = path + "/unevaluatedItems";
    } else if (items != s.end() && items->is_array()) {
      prefix_list = &*items, prefix_path = path + "/items";
      if (auto a = s.find("additionalItems"); a != s.end())
        rest_schema = &*a, rest_path = path + "/additionalItems";
    }
    if (prefix_list != nullptr) {
      if (!prefix_list->is_array()) return error(prefix_path, "must be a list of schemas");
      for (size_t i = 0; i < prefix_list->size(); ++i) {
        VLLM_ASSIGN_OR_RETURN(int32_t e,
                              schema((*prefix_list)[i], fmt::format("{}/{}", prefix_path, i)));
        prefix.push_back(e);
      }
      VLLM_ASSIGN_OR_RETURN(rest, rest_items(s, rest_schema, rest_path));
    } else if (items != s.end()) {
      if (items->is_boolean() && !items->get<bool>()) {
        rest = -1;
      } else {
        VLLM_ASSIGN_OR_RETURN(rest, schema(*items, path + "/items"));
      }
    } else {
      rest = any_value();
    }
    const auto k = static_cast<int64_t>(prefix.size());
    if (rest < 0 && min > k) {
      return error(
          path, fmt::format("minItems {} needs more items than the {} the schema allows", min, k));
    }
    // count items: each beyond the first is preceded by a separator.
    auto item_at = [&](int64_t i) { return i < k ? prefix[static_cast<size_t>(i)] : rest; };
    const int64_t limit = rest < 0 ? k : max;  // -1: unbounded
    const int64_t upper = max >= 0 && (limit < 0 || max < limit) ? max : limit;
    if (upper == 0) return bracketed("[", g_.empty(), "]");
    // tail(i): the items from index i on, each preceded by a separator, given i already present.
    int32_t tail = g_.empty();
    if (rest >= 0 && (upper < 0 || upper > k)) {
      const int64_t first_rest =
          std::max<int64_t>(k, 1);  // index of the first rest item after the head
      const int64_t need = std::max<int64_t>(0, min - first_rest);
      const int64_t allow = upper < 0 ? -1 : upper - first_rest;
      if (allow != 0) {
        tail = g_.repeat(g_.sequence({item_sep_, rest}), static_cast<int32_t>(need),
                         static_cast<int32_t>(allow));
      }
    }
    const int64_t positional_end = std::min<int64_t>(k, upper < 0 ? k : upper);
    for (int64_t i = positional_end - 1; i >= 1; --i) {
      const int32_t step = g_.sequence({item_sep_, item_at(i), tail});
      tail = i < min ? step : g_.optional(step);
    }
    int32_t list = g_.sequence({item_at(0), tail});
    if (min == 0) list = g_.optional(list);
    return bracketed("[", list, "]");
  }

  Expected<int32_t> object_schema(const J& s, const std::string& path) {
    struct Property {
      std::string name;
      int32_t value;
      bool required;
    };
    std::vector<Property> props;
    std::set<std::string> required;
    if (auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) return error(path + "/required", "required must be a list of names");
      for (const J& name : *r) {
        if (!name.is_string()) return error(path + "/required", "required must be a list of names");
        required.insert(name.get<std::string>());
      }
    }
    if (auto p = s.find("properties"); p != s.end()) {
      if (!p->is_object()) return error(path + "/properties", "properties must be an object");
      for (auto it = p->begin(); it != p->end(); ++it) {
        VLLM_ASSIGN_OR_RETURN(int32_t value, schema(it.value(), path + "/properties/" + it.key()));
        props.push_back({it.key(), value, required.count(it.key()) > 0});
      }
    }
    for (const std::string& name : required) {
      bool known = false;
      for (const Property& p : props) known = known || p.name == name;
      if (!known) props.push_back({name, any_value(), true});
    }
    int32_t additional = -1;
    const J* extra = nullptr;
    std::string extra_path;
    if (auto a = s.find("additionalProperties"); a != s.end()) {
      extra = &*a, extra_path = path + "/additionalProperties";
    } else if (auto u = s.find("unevaluatedProperties"); u != s.end()) {
      extra = &*u, extra_path = path + "/unevaluatedProperties";
    }
    if (extra == nullptr) {
      if (o_.allow_additional_properties) additional = any_value();
    } else if (!(extra->is_boolean() && !extra->get<bool>())) {
      VLLM_ASSIGN_OR_RETURN(additional, schema(*extra, extra_path));
    }
    VLLM_ASSIGN_OR_RETURN(auto min_props, read_count(s, "minProperties", path));
    VLLM_ASSIGN_OR_RETURN(auto max_props, read_count(s, "maxProperties", path));
    int64_t num_required = 0;
    for (const Property& p : props) num_required += p.required ? 1 : 0;
    if (min_props && *min_props > num_required) {
      return error(path, "minProperties above the number of required properties is not supported");
    }
    if (max_props && (additional >= 0 || *max_props < static_cast<int64_t>(props.size()))) {
      return error(path,
                   "maxProperties below the number of properties the schema allows is not "
                   "supported");
    }
    // S(i): the rest from property i on when one was already written (each pair after a
    // separator); F(i): the rest when none was written yet.
    const int32_t extra_pair =
        additional >= 0 ? g_.sequence({json_string(&g_), kv_sep_, additional}) : -1;
    int32_t after = extra_pair >= 0 ? g_.star(g_.sequence({item_sep_, extra_pair})) : g_.empty();
    int32_t first = extra_pair >= 0 ? g_.optional(g_.sequence({extra_pair, after})) : g_.empty();
    for (size_t i = props.size(); i-- > 0;) {
      const Property& p = props[i];
      const int32_t pair = g_.sequence({g_.literal(json_text(J(p.name))), kv_sep_, p.value});
      const int32_t with_sep = g_.sequence({item_sep_, pair});
      const int32_t next_after =
          p.required ? g_.sequence({with_sep, after}) : g_.sequence({g_.optional(with_sep), after});
      const int32_t next_first =
          p.required ? g_.sequence({pair, after}) : g_.choice({g_.sequence({pair, after}), first});
      after = next_after;
      first = next_first;
    }
    return bracketed("{", first, "}");
  }

  const J& root_;
  const JsonGrammarOptions& o_;
  Grammar g_;
  int32_t ws_ = -1;
  int32_t item_sep_ = -1;
  int32_t kv_sep_ = -1;
  int32_t any_value_ = -1;
  int32_t any_object_rule_ = -1;
  int32_t any_array_rule_ = -1;
  std::map<std::string, int32_t> ref_rules_;
  std::deque<Pending> pending_;
  int depth_ = 0;
};

}  // namespace

Expected<Grammar> json_schema_to_grammar(const nlohmann::ordered_json& schema,
                                         const JsonGrammarOptions& options) {
  SchemaCompiler compiler(schema, options);
  return compiler.compile_schema();
}

Expected<Grammar> json_object_grammar(const JsonGrammarOptions& options) {
  SchemaCompiler compiler(nlohmann::ordered_json::object(), options);
  return compiler.compile_json_object();
}

}  // namespace vllm::structured
