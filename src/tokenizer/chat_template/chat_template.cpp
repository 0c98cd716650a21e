// ChatTemplate: parse once (lexer -> parser), render many times (a fresh Interpreter per
// render, so renders share no state and may run on several threads at once). Also finds a
// model folder's template and special tokens the way transformers loads them.
#include "tokenizer/chat_template/chat_template.h"

#include <fstream>
#include <sstream>

#include "tokenizer/chat_template/evaluator.h"
#include "tokenizer/chat_template/lexer.h"
#include "tokenizer/chat_template/parser.h"

namespace vllm {

struct ChatTemplate::Impl {
  std::string name;
  jinja::Body body;
};

ChatTemplate::ChatTemplate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

Expected<ChatTemplate> ChatTemplate::parse(std::string_view source, std::string_view name) {
  auto impl = std::make_unique<Impl>();
  impl->name = std::string(name);
  VLLM_ASSIGN_OR_RETURN(std::vector<jinja::Token> tokens, jinja::tokenize(source, impl->name));
  VLLM_ASSIGN_OR_RETURN(impl->body, jinja::parse_template(std::move(tokens), impl->name));
  return ChatTemplate(std::move(impl));
}

Expected<std::string> ChatTemplate::render(const nlohmann::json& context) const {
  return render(nlohmann::ordered_json(context));
}

Expected<std::string> ChatTemplate::render(const nlohmann::ordered_json& context,
                                           const ChatTemplateOptions& options) const {
  if (!context.is_object()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "chat template '{}': the render context must be a JSON object, not {}",
                      impl_->name, context.type_name());
  }
  jinja::RenderLimits limits;
  limits.max_output_bytes = options.max_output_bytes;
  limits.max_items = options.max_items;
  limits.max_steps = options.max_steps;
  limits.max_call_depth = options.max_call_depth;
  jinja::Interpreter interpreter(impl_->name, limits, options.now_unix);
  return interpreter.render(impl_->body, jinja::from_json(context));
}

namespace {

Expected<std::string> read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::kIoError, "{}: cannot open file", path.string());
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

Expected<nlohmann::json> read_json(const std::filesystem::path& path) {
  VLLM_ASSIGN_OR_RETURN(std::string text, read_text(path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) {
    return make_error(ErrorCode::kInvalidFormat, "{}: not valid JSON", path.string());
  }
  return j;
}

// tokenizer_config.json's "chat_template": a string, or a list of {"name", "template"} of
// which transformers uses "default".
Expected<std::string> template_from_config(const nlohmann::json& value,
                                           const std::filesystem::path& file) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array()) {
    std::string names;
    for (const auto& entry : value) {
      if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
          !entry["name"].is_string() || !entry["template"].is_string()) {
        return make_error(ErrorCode::kInvalidFormat,
                          "{}: chat_template list entries must be {{\"name\", \"template\"}}",
                          file.string());
      }
      if (entry["name"].get<std::string>() == "default") {
        return entry["template"].get<std::string>();
      }
      names += (names.empty() ? "" : ", ") + entry["name"].get<std::string>();
    }
    return make_error(ErrorCode::kNotFound,
                      "{}: the model has several chat templates ({}) and none is named "
                      "\"default\"; pass one with --chat-template",
                      file.string(), names);
  }
  return make_error(ErrorCode::kInvalidFormat,
                    "{}: chat_template must be a string or a list of named templates",
                    file.string());
}

}  // namespace

Expected<ModelChatTemplate> load_model_chat_template(const std::filesystem::path& model_dir,
                                                     const std::filesystem::path& override_path) {
  ModelChatTemplate result;
  result.special_tokens = nlohmann::json::object();
  std::filesystem::path config_path = model_dir / "tokenizer_config.json";
  nlohmann::json config = nlohmann::json::object();
  std::error_code ec;
  if (std::filesystem::exists(config_path, ec)) {
    VLLM_ASSIGN_OR_RETURN(config, read_json(config_path));
    if (!config.is_object()) {
      return make_error(ErrorCode::kInvalidFormat, "{}: expected a JSON object",
                        config_path.string());
    }
  }
  nlohmann::json special_map = nlohmann::json::object();
  std::filesystem::path map_path = model_dir / "special_tokens_map.json";
  if (std::filesystem::exists(map_path, ec)) {
    auto parsed = read_json(map_path);
    if (parsed.has_value() && parsed->is_object()) special_map = *parsed;
  }
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    for (const nlohmann::json* source : {&config, &special_map}) {
      if (!source->contains(key)) continue;
      const nlohmann::json& v = (*source)[key];
      if (v.is_string()) {
        result.special_tokens[key] = v;
      } else if (v.is_object() && v.contains("content") && v["content"].is_string()) {
        result.special_tokens[key] = v["content"];
      } else {
        continue;
      }
      break;
    }
  }

  // transformers also names the tokens of a dict-valued "extra_special_tokens"
  // (image_token, ...) in special_tokens_map; the list form carries no names.
  if (config.contains("extra_special_tokens") && config["extra_special_tokens"].is_object()) {
    for (const auto& [key, v] : config["extra_special_tokens"].items()) {
      if (result.special_tokens.contains(key)) continue;
      if (v.is_string()) {
        result.special_tokens[key] = v;
      } else if (v.is_object() && v.contains("content") && v["content"].is_string()) {
        result.special_tokens[key] = v["content"];
      }
    }
  }

  if (!override_path.empty()) {
    if (std::filesystem::is_regular_file(override_path, ec)) {
      VLLM_ASSIGN_OR_RETURN(result.source, read_text(override_path));
      return result;
    }
    // vLLM also accepts the template itself in place of a path.
    std::string inline_template = override_path.string();
    if (inline_template.find_first_of("{}\n") != std::string::npos) {
      result.source = inline_template;
      return result;
    }
    return make_error(ErrorCode::kNotFound, "--chat-template {}: no such file",
                      override_path.string());
  }
  std::filesystem::path jinja_path = model_dir / "chat_template.jinja";
  if (std::filesystem::is_regular_file(jinja_path, ec)) {
    VLLM_ASSIGN_OR_RETURN(result.source, read_text(jinja_path));
    return result;
  }
  std::filesystem::path json_path = model_dir / "chat_template.json";
  if (std::filesystem::is_regular_file(json_path, ec)) {
    VLLM_ASSIGN_OR_RETURN(nlohmann::json j, read_json(json_path));
    if (j.is_object() && j.contains("chat_template")) {
      VLLM_ASSIGN_OR_RETURN(result.source, template_from_config(j["chat_template"], json_path));
      return result;
    }
  }
  if (config.contains("chat_template") && !config["chat_template"].is_null()) {
    VLLM_ASSIGN_OR_RETURN(result.source,
                          template_from_config(config["chat_template"], config_path));
    return result;
  }
  return make_error(ErrorCode::kNotFound,
                    "{}: no chat template (no chat_template.jinja, and tokenizer_config.json has "
                    "no \"chat_template\"); pass one with --chat-template",
                    model_dir.string());
}

}  // namespace vllm
