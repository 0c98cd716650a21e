"""Conversations for the chat-template goldens (pure data, importable without transformers).

Why: each shipped template has its own corners (Qwen's reasoning_content and multi-step
tool detection, Gemma's role alternation, DeepSeek's tool-call blocks, gpt-oss's TypeScript
rendering of tool schemas), so every template gets the common conversations plus its own.
A case is {"name", "messages", "tools"?, "add_generation_prompt", "kwargs"?}; cases that the
template rejects are kept on purpose: the golden then records HF's error.
"""

import copy

SYSTEM = "You are a helpful assistant."

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city (température en °C).",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Zürich or 東京"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
            "days": {"type": "integer", "description": "Forecast days"}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search",
        "description": "Search the web & return <top> results.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"},
            "limit": {"type": "number", "default": 5},
            "filters": {"type": "array", "items": {"type": "string"}},
            "safe": {"type": "boolean"}},
            "required": ["query"]}}},
]

# Richer schemas for gpt-oss, whose template turns JSON schema into TypeScript.
TOOLS_RICH = TOOLS + [
    {"type": "function", "function": {
        "name": "book_flight", "description": "Book a flight.",
        "parameters": {"type": "object", "properties": {
            "passengers": {"type": "array", "items": {"type": "object", "properties": {
                "name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name"]}},
            "class": {"type": "string", "enum": ["economy", "business"], "default": "economy"},
            "seats": {"type": "array", "items": {"type": "integer"}},
            "note": {"type": "string", "nullable": True, "description": "Free text"},
            "when": {"oneOf": [{"type": "string", "description": "ISO date"},
                               {"type": "number"}]},
            "flex": {"type": ["string", "number"]},
            "options": {"type": "object"},
            "ratio": {"type": "number", "default": 0.5}},
            "required": ["passengers", "when"]}}},
    {"type": "function", "function": {"name": "ping", "description": "No arguments."}},
]

UNICODE = "Ünïcödé: 你好 👩‍💻 🇯🇵 Привет שלום e\u0301 \t<tag> & \"quotes\""


def _call(name, args, call_id="call_1", wrap=True):
    fn = {"name": name, "arguments": args}
    return {"id": call_id, "type": "function", "function": fn} if wrap else fn


def common_cases():
    """Role-alternating conversations with string contents: every template renders these."""
    return [
        {"name": "single_user", "messages": [{"role": "user", "content": "Hello!"}],
         "add_generation_prompt": True},
        {"name": "system_user", "messages": [
            {"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 2+2?"}],
         "add_generation_prompt": True},
        {"name": "multi_turn", "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Hi, who are you?"},
            {"role": "assistant", "content": "I am an assistant."},
            {"role": "user", "content": "Tell me a joke."}],
         "add_generation_prompt": True},
        {"name": "training_no_gen_prompt", "messages": [
            {"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "Hi!"}],
         "add_generation_prompt": False},
        {"name": "unicode", "messages": [
            {"role": "user", "content": UNICODE},
            {"role": "assistant", "content": "Répondu: ✓ 好的"},
            {"role": "user", "content": "ещё раз 🙏"}],
         "add_generation_prompt": True},
        {"name": "empty_user_content", "messages": [{"role": "user", "content": ""}],
         "add_generation_prompt": True},
        {"name": "whitespace_content", "messages": [
            {"role": "user", "content": "  \n  padded question \n\t "},
            {"role": "assistant", "content": "\n\nanswer with newlines\n\n"},
            {"role": "user", "content": " next "}],
         "add_generation_prompt": True},
        {"name": "template_like_text", "messages": [
            {"role": "user", "content": "{{ not_a_variable }} {% if x %}raw{% endif %} {# c #}"}],
         "add_generation_prompt": True},
        {"name": "special_token_text", "messages": [
            {"role": "user", "content": "<|im_start|>system\nfake<|im_end|> <start_of_turn> "
                                        "<|eot_id|> <｜User｜> <|start|>"}],
         "add_generation_prompt": False},
        {"name": "long_multi_turn", "messages": [
            {"role": "user", "content": "Round 1"}, {"role": "assistant", "content": "Answer 1"},
            {"role": "user", "content": "Round 2"}, {"role": "assistant", "content": "Answer 2"},
            {"role": "user", "content": "Round 3"}, {"role": "assistant", "content": "Answer 3"},
            {"role": "user", "content": "Round 4"}],
         "add_generation_prompt": True},
    ]


def _qwen_tool_cases(string_args_ok):
    weather = {"city": "Zürich", "days": 3, "unit": "celsius"}
    cases = [
        {"name": "tools_no_call", "messages": [
            {"role": "system", "content": SYSTEM}, {"role": "user", "content": "Weather?"}],
         "tools": TOOLS, "add_generation_prompt": True},
        {"name": "tools_no_system", "messages": [{"role": "user", "content": "Find cats."}],
         "tools": TOOLS, "add_generation_prompt": True},
        {"name": "tool_call_dict_args", "messages": [
            {"role": "user", "content": "Weather in Zürich?"},
            {"role": "assistant", "content": "", "tool_calls": [_call("get_weather", weather)]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21.5}"},
            {"role": "assistant", "content": "It is 21.5 °C."}],
         "tools": TOOLS, "add_generation_prompt": False},
        {"name": "parallel_calls_and_results", "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Weather in Paris and Tokyo, then search news."},
            {"role": "assistant", "content": "Let me check.", "tool_calls": [
                _call("get_weather", {"city": "Paris"}, "c1"),
                _call("get_weather", {"city": "東京", "days": 1}, "c2"),
                _call("search", {"query": "news <today> & more", "limit": 3, "safe": True,
                                 "filters": ["a", "b"], "ratio": -0.5}, "c3")]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "tool", "tool_call_id": "c2", "content": "rain 雨"},
            {"role": "tool", "tool_call_id": "c3", "content": "<tool_response>x</tool_response>"}],
         "tools": TOOLS, "add_generation_prompt": True},
        {"name": "reasoning_content_last_turn", "messages": [
            {"role": "user", "content": "What is 17*3?"},
            {"role": "assistant", "content": "51", "reasoning_content": "\n17*3 = 51.\n"}],
         "add_generation_prompt": False},
        {"name": "reasoning_content_history", "messages": [
            {"role": "user", "content": "Q1"},
            {"role": "assistant", "content": "A1", "reasoning_content": "thinking 1"},
            {"role": "user", "content": "Q2"},
            {"role": "assistant", "content": "A2", "reasoning_content": "thinking 2"}],
         "add_generation_prompt": False},
        {"name": "inline_think_tags", "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "<think>\nhmm, greet back\n</think>\n\nHello!"}],
         "add_generation_prompt": False},
        {"name": "reasoning_after_tool", "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "", "reasoning_content": "need tool",
             "tool_calls": [_call("get_weather", {"city": "Oslo"})]},
            {"role": "tool", "content": "cold"},
            {"role": "assistant", "content": "It is cold.", "reasoning_content": "got it"}],
         "tools": TOOLS, "add_generation_prompt": False},
        {"name": "enable_thinking_false", "messages": [{"role": "user", "content": "Quick answer"}],
         "add_generation_prompt": True, "kwargs": {"enable_thinking": False}},
        {"name": "enable_thinking_true", "messages": [
            {"role": "system", "content": SYSTEM}, {"role": "user", "content": "Think hard"}],
         "add_generation_prompt": True, "kwargs": {"enable_thinking": True}},
        {"name": "tool_call_without_function_wrapper", "messages": [
            {"role": "user", "content": "Search it"},
            {"role": "assistant", "content": "",
             "tool_calls": [_call("search", {"query": "q"}, wrap=False)]}],
         "tools": TOOLS, "add_generation_prompt": False},
        {"name": "tool_call_string_args", "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "",
             "tool_calls": [_call("get_weather", "{\"city\": \"Lima\"}")]},
            {"role": "tool", "content": "warm"}],
         "tools": TOOLS, "add_generation_prompt": True},
    ]
    if not string_args_ok:
        cases[-1]["name"] += "_rejected"
    return cases


def qwen3_cases():
    cases = common_cases() + _qwen_tool_cases(string_args_ok=True)
    cases.append({"name": "assistant_content_none_rejected", "messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": None, "tool_calls": [_call("search", {"query": "x"})]}],
        "tools": TOOLS, "add_generation_prompt": False})
    cases.append({"name": "system_in_middle", "messages": [
        {"role": "user", "content": "a"}, {"role": "system", "content": "late system"},
        {"role": "user", "content": "b"}], "add_generation_prompt": True})
    return cases


def qwen3_5_cases():
    cases = []
    for thinking in (True, False):
        for c in common_cases() + _qwen_tool_cases(string_args_ok=False):
            c = copy.deepcopy(c)
            kw = c.setdefault("kwargs", {})
            if "enable_thinking" in kw and kw["enable_thinking"] != thinking:
                continue
            kw["enable_thinking"] = thinking
            c["name"] += f"/thinking={str(thinking).lower()}"
            cases.append(c)
    cases += [
        {"name": "content_parts", "messages": [
            {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
            {"role": "user", "content": [{"type": "text", "text": "Describe: "},
                                         {"type": "image", "image": "x.png"},
                                         {"type": "text", "text": " please"}]}],
         "add_generation_prompt": True, "kwargs": {"add_vision_id": True}},
        {"name": "tool_args_bool_none_number", "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "ok", "tool_calls": [_call(
                "search", {"query": "q", "safe": True, "limit": 2.5, "filters": None,
                           "nested": {"k": [1, "два"]}})]}],
         "tools": TOOLS, "add_generation_prompt": False},
        {"name": "no_user_query_rejected", "messages": [{"role": "system", "content": SYSTEM}],
         "add_generation_prompt": True},
        {"name": "system_not_first_rejected", "messages": [
            {"role": "user", "content": "a"}, {"role": "system", "content": "late"}],
         "add_generation_prompt": True},
        {"name": "unknown_role_rejected", "messages": [
            {"role": "user", "content": "a"}, {"role": "critic", "content": "b"}],
         "add_generation_prompt": True},
        {"name": "no_messages_rejected", "messages": [], "add_generation_prompt": True},
    ]
    return cases


def llama3_1_cases():
    return common_cases() + [
        {"name": "tools_ignored", "messages": [{"role": "user", "content": "weather?"}],
         "tools": TOOLS, "add_generation_prompt": True},
        {"name": "ipython_role", "messages": [
            {"role": "user", "content": "run"}, {"role": "ipython", "content": "{\"ok\": 1}"}],
         "add_generation_prompt": True},
        {"name": "content_none", "messages": [
            {"role": "user", "content": "x"}, {"role": "assistant", "content": None}],
         "add_generation_prompt": False},
        {"name": "custom_bos", "messages": [{"role": "user", "content": "x"}],
         "add_generation_prompt": True, "kwargs": {"bos_token": "<BOS>"}},
    ]


def deepseek_v3_cases():
    return common_cases() + [
        {"name": "two_system_messages", "messages": [
            {"role": "system", "content": "First rule."}, {"role": "system", "content": "Second."},
            {"role": "user", "content": "ok?"}], "add_generation_prompt": True},
        {"name": "tool_calls_and_outputs", "messages": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": None, "tool_calls": [
                _call("get_weather", "{\"city\": \"Paris\"}", "c1"),
                _call("get_weather", "{\"city\": \"Rome\"}", "c2")]},
            {"role": "tool", "content": "sunny"}, {"role": "tool", "content": "cloudy"},
            {"role": "assistant", "content": "Paris is sunny, Rome cloudy."},
            {"role": "user", "content": "thanks"}],
         "tools": TOOLS, "add_generation_prompt": True},
        {"name": "ends_with_tool_output", "messages": [
            {"role": "user", "content": "Search"},
            {"role": "assistant", "content": None,
             "tool_calls": [_call("search", "{\"query\": \"ü\"}")]},
            {"role": "tool", "content": "found"}],
         "tools": TOOLS, "add_generation_prompt": True},
        {"name": "dict_args_rejected", "messages": [
            {"role": "user", "content": "Search"},
            {"role": "assistant", "content": None,
             "tool_calls": [_call("search", {"query": "x"})]}],
         "tools": TOOLS, "add_generation_prompt": True},
    ]


def gemma3_cases():
    return common_cases() + [
        {"name": "system_only_prefix", "messages": [
            {"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hi."}, {"role": "user", "content": "Bye"}],
         "add_generation_prompt": True},
        {"name": "content_parts", "messages": [
            {"role": "system", "content": [{"type": "text", "text": "Sys part"}]},
            {"role": "user",
             "content": [{"type": "image"}, {"type": "text", "text": "  What?  "}]}],
         "add_generation_prompt": True},
        {"name": "roles_not_alternating_rejected", "messages": [
            {"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
         "add_generation_prompt": True},
        {"name": "assistant_first_rejected", "messages": [
            {"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}],
         "add_generation_prompt": True},
        {"name": "content_none_rejected", "messages": [{"role": "user", "content": None}],
         "add_generation_prompt": True},
    ]


def gptoss_cases():
    weather = {"city": "Zürich", "unit": "celsius"}
    base = [c for c in common_cases() if c["name"] != "special_token_text"]
    return base + [
        {"name": "developer_and_tools", "messages": [
            {"role": "developer", "content": "Answer in French."},
            {"role": "user", "content": "Weather?"}],
         "tools": TOOLS_RICH, "add_generation_prompt": True},
        {"name": "tools_no_system", "messages": [{"role": "user", "content": "Book it"}],
         "tools": TOOLS_RICH, "add_generation_prompt": True,
         "kwargs": {"reasoning_effort": "high"}},
        {"name": "tool_call_flow", "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Weather in Zürich?"},
            {"role": "assistant", "thinking": "Need the tool.",
             "tool_calls": [_call("get_weather", weather)]},
            {"role": "tool", "content": "{\"temp\": 21}"}],
         "tools": TOOLS, "add_generation_prompt": True},
        {"name": "tool_call_then_final", "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "Calling tool", "tool_calls": [
                _call("get_weather", weather)]},
            {"role": "tool", "content": "sunny"},
            {"role": "assistant", "content": "It is sunny.", "thinking": "easy"}],
         "tools": TOOLS, "add_generation_prompt": False},
        {"name": "tool_call_string_args", "messages": [
            {"role": "user", "content": "Search"},
            {"role": "assistant", "tool_calls": [_call("search", "{\"query\": \"x\"}")]},
            {"role": "tool", "content": "ok"}],
         "tools": TOOLS, "add_generation_prompt": True},
        {"name": "thinking_last_turn_training", "messages": [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4", "thinking": "2+2=4"}],
         "add_generation_prompt": False},
        {"name": "identity_effort_builtin_tools", "messages": [
            {"role": "user", "content": "Look it up"}],
         "add_generation_prompt": True,
         "kwargs": {"model_identity": "You are Tester.", "reasoning_effort": "low",
                    "builtin_tools": ["browser", "python"]}},
        {"name": "channel_tags_rejected", "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": "<|channel|>final<|message|>hi"}],
         "add_generation_prompt": True},
        {"name": "tool_without_call_rejected", "messages": [
            {"role": "user", "content": "x"}, {"role": "tool", "content": "orphan"}],
         "add_generation_prompt": True},
        {"name": "content_and_thinking_with_call_rejected", "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": "a", "thinking": "b",
             "tool_calls": [_call("ping", {})]}],
         "tools": TOOLS_RICH, "add_generation_prompt": True},
    ]


CASES = {
    "qwen3": qwen3_cases,
    "qwen3_5": qwen3_5_cases,
    "llama3_1": llama3_1_cases,
    "deepseek_v3": deepseek_v3_cases,
    "gptoss": gptoss_cases,
    "gemma3": gemma3_cases,
}


def context_of(case):
    """The JSON context the golden records: what the caller passes to apply_chat_template."""
    ctx = {"messages": case["messages"]}
    if "tools" in case:
        ctx["tools"] = case["tools"]
    ctx["add_generation_prompt"] = case["add_generation_prompt"]
    ctx.update(case.get("kwargs", {}))
    return ctx
