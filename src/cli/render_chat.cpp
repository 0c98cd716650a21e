// `vllm render-chat`: renders chat requests with a model's chat template, as transformers'
// apply_chat_template(messages, tools=..., documents=..., add_generation_prompt=..., **kwargs)
// does, for users and for scripted checks against Hugging Face.
//
// stdin: one JSON object per line: {"messages": [...], "tools": [...], "documents": [...],
// "add_generation_prompt": true, ...}; every other key (enable_thinking, reasoning_effort,
// ...) becomes a template variable, as do the keys of an optional "chat_template_kwargs"
// object. The special tokens of tokenizer_config.json (bos_token, eos_token, ...) are
// variables too, overridable per line. stdout: one JSON string per input line, or `null`
// for a line that failed (the error, naming the line, goes to stderr; the exit code is 1).
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "tokenizer/chat_template/chat_template.h"

namespace vllm::cli {
namespace {

struct RenderChatArgs {
  std::string model;
  std::string chat_template;
};

Expected<nlohmann::ordered_json> build_context(const std::string& line,
                                               const nlohmann::json& special_tokens) {
  nlohmann::ordered_json request = nlohmann::ordered_json::parse(line, nullptr, false);
  if (request.is_discarded()) {
    return make_error(ErrorCode::kInvalidArgument, "not valid JSON");
  }
  if (!request.is_object()) {
    return make_error(ErrorCode::kInvalidArgument, "expected a JSON object, got {}",
                      request.type_name());
  }
  if (!request.contains("messages") || !request["messages"].is_array()) {
    return make_error(ErrorCode::kInvalidArgument, "\"messages\" must be a list of messages");
  }
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  for (auto it = special_tokens.begin(); it != special_tokens.end(); ++it) {
    context[it.key()] = it.value();
  }
  // transformers passes these four explicitly, so they are always defined.
  context["tools"] = nullptr;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = false;
  for (auto it = request.begin(); it != request.end(); ++it) {
    if (it.key() == "chat_template_kwargs") {
      if (!it.value().is_object()) {
        return make_error(ErrorCode::kInvalidArgument, "\"chat_template_kwargs\" must be an object");
      }
      for (auto kw = it.value().begin(); kw != it.value().end(); ++kw) context[kw.key()] = kw.value();
      continue;
    }
    context[it.key()] = it.value();
  }
  return context;
}

int run_render_chat(const RenderChatArgs& args) {
  auto loaded = load_model_chat_template(args.model, args.chat_template);
  if (!loaded.has_value()) {
    std::fprintf(stderr, "render-chat: %s\n", loaded.status().to_string().c_str());
    return 1;
  }
  std::string name = args.chat_template.empty() ? args.model : args.chat_template;
  if (name.size() > 200) name = name.substr(0, 200) + "...";
  auto parsed = ChatTemplate::parse(loaded->source, name);
  if (!parsed.has_value()) {
    std::fprintf(stderr, "render-chat: %s\n", parsed.status().to_string().c_str());
    return 1;
  }
  const ChatTemplate& tmpl = parsed.value();
  int exit_code = 0;
  std::string line;
  for (int64_t line_number = 1; std::getline(std::cin, line); ++line_number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Expected<std::string> rendered = [&]() -> Expected<std::string> {
      VLLM_ASSIGN_OR_RETURN(nlohmann::ordered_json context, build_context(line, loaded->special_tokens));
      return tmpl.render(context);
    }();
    if (!rendered.has_value()) {
      std::fprintf(stderr, "render-chat: stdin line %lld: %s\n", static_cast<long long>(line_number),
                   rendered.status().to_string().c_str());
      std::fputs("null\n", stdout);
      exit_code = 1;
      continue;
    }
    std::string out = nlohmann::json(rendered.value())
                          .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    out.push_back('\n');
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  std::fflush(stdout);
  return exit_code;
}

}  // namespace

Runner add_render_chat_command(CLI::App& app) {
  auto args = std::make_shared<RenderChatArgs>();
  CLI::App* cmd = app.add_subcommand(
      "render-chat", "Render chat requests (JSON lines on stdin) with the model's chat template");
  cmd->add_option("--model", args->model,
                  "Model directory (tokenizer_config.json and/or chat_template.jinja)")
      ->required();
  cmd->add_option("--chat-template", args->chat_template,
                  "Chat template file (or the template text) to use instead of the model's");
  return [args] { return run_render_chat(*args); };
}

}  // namespace vllm::cli
