// POST /tokenize and POST /detokenize (vLLM's OpenAIServingTokenization): a prompt, or chat
// messages rendered with the template, to token ids; token ids back to text.
#include "server/protocol.h"
#include "server/serving.h"

namespace vllm::server {

Expected<std::string> OpenAIServing::tokenize(std::string_view body) {
  VLLM_ASSIGN_OR_RETURN(nlohmann::ordered_json json, parse_ordered_json_object(body));
  VLLM_ASSIGN_OR_RETURN(TokenizeRequest request, parse_tokenize_request(json));
  VLLM_RETURN_IF_ERROR(check_model(request.model));
  std::vector<int32_t> ids;
  if (request.chat) {
    request.chat->add_special_tokens = request.add_special_tokens;
    VLLM_ASSIGN_OR_RETURN(auto rendered, render_chat(*request.chat));
    ids = std::move(rendered.token_ids);
  } else {
    VLLM_ASSIGN_OR_RETURN(ids, encode(*request.prompt, request.add_special_tokens));
  }
  nlohmann::ordered_json out = {
      {"count", ids.size()}, {"max_model_len", max_model_len()}, {"tokens", ids}};
  if (request.return_token_strs) {
    nlohmann::ordered_json strs = nlohmann::ordered_json::array();
    for (int32_t id : ids) {
      auto token = tokenizer_->id_to_token(id);
      strs.push_back(token ? *token : std::string());
    }
    out["token_strs"] = std::move(strs);
  } else {
    out["token_strs"] = nullptr;
  }
  return dump_json(out);
}

Expected<std::string> OpenAIServing::detokenize(std::string_view body) {
  VLLM_ASSIGN_OR_RETURN(nlohmann::json json, parse_json_object(body));
  VLLM_ASSIGN_OR_RETURN(DetokenizeRequest request, parse_detokenize_request(json));
  VLLM_RETURN_IF_ERROR(check_model(request.model));
  if (tokenizer_ == nullptr) {
    return make_error(ErrorCode::kInvalidArgument, "the model folder has no tokenizer.json");
  }
  DecodeOptions options;
  options.skip_special_tokens = false;
  auto text = tokenizer_->decode(request.tokens, options);
  if (!text) return make_error(ErrorCode::kInvalidArgument, "{}", text.status().message());
  return dump_json({{"prompt", *text}});
}

}  // namespace vllm::server
