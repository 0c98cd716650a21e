// Random JSON Schemas of the subset the grammar compiler supports, and a validator for
// exactly that subset written independently of the compiler (objects are strict: no
// properties beyond the schema's, as the compiler generates them). Used by the schema
// property tests on byte vocabularies and on real models.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

namespace vllm::structured::testing {

using J = nlohmann::ordered_json;

inline J random_schema(std::mt19937& rng, int depth) {
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  const int kind = depth >= 2 ? pick(6) : pick(9);
  switch (kind) {
    case 0: {
      J s = {{"type", "integer"}};
      if (pick(2)) s["minimum"] = pick(200) - 100;
      if (pick(2))
        s["maximum"] = s.contains("minimum") ? s["minimum"].get<int>() + pick(300) : pick(100);
      return s;
    }
    case 1:
      return {{"type", "number"}};
    case 2:
      return {{"type", "boolean"}};
    case 3:
      return {{"type", "null"}};
    case 4:
      return {{"type", "string"}, {"maxLength", pick(6)}, {"minLength", 0}};
    case 5:
      return {{"enum", J::array({"a", 1, "x\"y", nullptr, true})}};
    case 6: {
      J s = {{"type", "object"}, {"properties", J::object()}};
      J required = J::array();
      const int n = pick(4);
      for (int i = 0; i < n; ++i) {
        const std::string name = std::string(1, static_cast<char>('a' + i)) + (pick(2) ? "_k" : "");
        s["properties"][name] = random_schema(rng, depth + 1);
        if (pick(2)) required.push_back(name);
      }
      s["required"] = required;
      return s;
    }
    case 7: {
      J s = {{"type", "array"}, {"items", random_schema(rng, depth + 1)}};
      const int lo = pick(3);
      s["minItems"] = lo;
      s["maxItems"] = lo + pick(3);
      return s;
    }
    default:
      return {{"anyOf", J::array({{{"type", "integer"}}, {{"type", "string"}, {"maxLength", 3}}})}};
  }
}

inline size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// An independent check of the subset random_schema produces (strict objects).
inline bool valid(const nlohmann::json& v, const J& s, std::string* why) {
  auto fail = [&](const std::string& what) {
    *why = what + " for " + s.dump() + " value " + v.dump();
    return false;
  };
  if (s.contains("enum")) {
    for (const J& e : s["enum"]) {
      if (nlohmann::json(e) == v) return true;
    }
    return fail("not in enum");
  }
  if (s.contains("anyOf")) {
    for (const J& b : s["anyOf"]) {
      std::string ignored;
      if (valid(v, b, &ignored)) return true;
    }
    return fail("no anyOf branch");
  }
  const std::string type = s["type"];
  if (type == "integer") {
    // JSON Schema: any number with no fractional part (huge ones parse as doubles).
    if (!v.is_number_integer() &&
        !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>())) {
      return fail("not an integer");
    }
    const double x = v.get<double>();
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return fail("below minimum");
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return fail("above maximum");
    return true;
  }
  if (type == "number") return v.is_number() ? true : fail("not a number");
  if (type == "boolean") return v.is_boolean() ? true : fail("not a boolean");
  if (type == "null") return v.is_null() ? true : fail("not null");
  if (type == "string") {
    if (!v.is_string()) return fail("not a string");
    const size_t n = code_points(v.get<std::string>());
    if (n > s["maxLength"].get<size_t>()) return fail("too long");
    return true;
  }
  if (type == "array") {
    if (!v.is_array()) return fail("not an array");
    if (v.size() < s["minItems"].get<size_t>() || v.size() > s["maxItems"].get<size_t>()) {
      return fail("item count");
    }
    for (const auto& item : v) {
      if (!valid(item, s["items"], why)) return false;
    }
    return true;
  }
  if (!v.is_object()) return fail("not an object");
  for (const J& name : s["required"]) {
    if (!v.contains(name.get<std::string>())) return fail("missing " + name.get<std::string>());
  }
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!s["properties"].contains(it.key())) return fail("extra property " + it.key());
    if (!valid(it.value(), s["properties"][it.key()], why)) return false;
  }
  return true;
}

}  // namespace vllm::structured::testing
