// `--tool-call-parser qwen3_coder`: XML-ish blocks (Qwen3-Coder, Qwen3.5, Qwen3.6)
//   <function=NAME>
//   <parameter=P>
//   VALUE
//   </parameter>
//   </function>
// Values are raw text; as vLLM's Qwen3CoderToolParser, each is converted by the type the
// request's tool schema gives the parameter (string, integer, number, boolean, object /
// array as JSON), "null" is null, and a parameter the schema does not know stays a string.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <utility>

#include "server/tool_parser.h"

namespace vllm::server {
namespace {

using nlohmann::ordered_json;

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool starts_with_any(std::string_view s, std::initializer_list<std::string_view> prefixes) {
  for (std::string_view p : prefixes) {
    if (s.substr(0, p.size()) == p) return true;
  }
  return false;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Python's int(text): optional sign and digits, surrounding whitespace allowed.
std::optional<int64_t> parse_int(std::string_view text) {
  text = trim(text);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

std::optional<double> parse_float(std::string_view text) {
  text = trim(text);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

ordered_json convert_value(const std::string& value, const ordered_json* schema) {
  if (lower(value) == "null") return nullptr;
  if (schema == nullptr) return value;
  std::string type = "string";
  if (schema->is_object()) {
    auto t = schema->find("type");
    if (t != schema->end() && t->is_string()) type = lower(trim(t->get<std::string>()));
  }
  if (type == "string" || type == "str" || type == "text" || type == "varchar" || type == "char" ||
      type == "enum") {
    return value;
  }
  if (starts_with_any(type, {"int", "uint", "long", "short", "unsigned"})) {
    if (auto v = parse_int(value)) return *v;
    return value;
  }
  if (starts_with_any(type, {"num", "float"})) {
    auto v = parse_float(value);
    if (!v || !std::isfinite(*v)) return value;
    if (*v == std::trunc(*v) && std::fabs(*v) < 9.0e15) return static_cast<int64_t>(*v);
    return *v;
  }
  if (type == "boolean" || type == "bool" || type == "binary") return lower(value) == "true";
  ordered_json parsed = ordered_json::parse(value, nullptr, false);
  if (!parsed.is_discarded()) return parsed;
  return value;
}

class Qwen3CoderToolParser final : public ToolParser {
 public:
  explicit Qwen3CoderToolParser(ordered_json tools) : tools_(std::move(tools)) {}

 protected:
  std::optional<std::vector<ToolCall>> parse_block(std::string_view block) const override {
    static constexpr std::string_view kFunction = "<function=";
    static constexpr std::string_view kFunctionEnd = "</function>";
    std::vector<ToolCall> calls;
    size_t at = block.find(kFunction);
    if (at == std::string_view::npos) return std::nullopt;
    while (at != std::string_view::npos) {
      const size_t name_start = at + kFunction.size();
      const size_t name_end = block.find('>', name_start);
      if (name_end == std::string_view::npos) return std::nullopt;
      const std::string name(trim(block.substr(name_start, name_end - name_start)));
      if (name.empty()) return std::nullopt;
      size_t body_end = block.find(kFunctionEnd, name_end);
      const std::string_view body =
          block.substr(name_end + 1, body_end == std::string_view::npos ? std::string_view::npos
                                                                        : body_end - name_end - 1);
      calls.push_back({make_tool_call_id(), name, python_json_dumps(parse_parameters(name, body))});
      if (body_end == std::string_view::npos) break;
      at = block.find(kFunction, body_end);
    }
    return calls;
  }

 private:
  const ordered_json* parameter_schema(const std::string& function,
                                       const std::string& parameter) const {
    if (!tools_.is_array()) return nullptr;
    for (const ordered_json& tool : tools_) {
      const auto f = tool.find("function");
      if (f == tool.end() || !f->is_object()) continue;
      const auto n = f->find("name");
      if (n == f->end() || !n->is_string() || n->get<std::string>() != function) continue;
      const auto params = f->find("parameters");
      if (params == f->end() || !params->is_object()) return nullptr;
      const auto props = params->find("properties");
      if (props == params->end() || !props->is_object()) return nullptr;
      const auto p = props->find(parameter);
      return p == props->end() ? nullptr : &*p;
    }
    return nullptr;
  }

  ordered_json parse_parameters(const std::string& function, std::string_view body) const {
    static constexpr std::string_view kParam = "<parameter=";
    static constexpr std::string_view kParamEnd = "</parameter>";
    ordered_json args = ordered_json::object();
    size_t at = body.find(kParam);
    while (at != std::string_view::npos) {
      const size_t name_start = at + kParam.size();
      const size_t name_end = body.find('>', name_start);
      if (name_end == std::string_view::npos) break;
      const std::string name(trim(body.substr(name_start, name_end - name_start)));
      // The value runs to </parameter>, or to the next <parameter=, or to the end.
      const size_t close = body.find(kParamEnd, name_end);
      const size_t next = body.find(kParam, name_end);
      size_t value_end = std::min(close, next);
      std::string_view value =
          body.substr(name_end + 1, value_end == std::string_view::npos ? std::string_view::npos
                                                                        : value_end - name_end - 1);
      if (!value.empty() && value.front() == '\n') value.remove_prefix(1);
      if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
      args[name] = convert_value(std::string(value), parameter_schema(function, name));
      if (value_end == std::string_view::npos) break;
      at = value_end == close ? body.find(kParam, close + kParamEnd.size()) : next;
    }
    return args;
  }

  ordered_json tools_;
};

}  // namespace

std::unique_ptr<ToolParser> make_qwen3_coder_tool_parser(const nlohmann::ordered_json& tools) {
  return std::make_unique<Qwen3CoderToolParser>(tools);
}

}  // namespace vllm::server
