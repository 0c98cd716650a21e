// libFuzzer target for the server's request handling that needs no engine: any bytes as the
// body of /v1/completions, /v1/chat/completions, /tokenize and /detokenize must parse or be
// refused with a message (never crash, never throw), parsed sampling params must survive
// validate(), and the error body must serialize. The same bytes, taken as model output, go
// through the tool-call and reasoning parsers whole and streamed in two pieces; the streamed
// reasoning split must equal the whole one whenever the output closes its <think>.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/api_error.h"
#include "server/protocol.h"
#include "server/reasoning_parser.h"
#include "server/tool_parser.h"

namespace {

void require(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "fuzz_openai_request invariant broken: %s\n", what);
    std::abort();
  }
}

void check_status(const vllm::Status& status) {
  require(!status.is_ok(), "an error status");
  require(!status.message().empty(), "errors carry a message");
  const std::string body = vllm::server::api_error_from_status(status).body();
  require(!body.empty(), "error body serializes");
}

void parse_requests(std::string_view text) {
  using namespace vllm::server;
  auto plain = parse_json_object(text);
  auto ordered = parse_ordered_json_object(text);
  require(plain.has_value() == ordered.has_value(), "both JSON flavours agree");
  if (!plain) {
    check_status(plain.status());
    return;
  }
  auto completion = parse_completion_request(*plain, vllm::SamplingParams());
  if (completion) {
    (void)completion->params.validate(457);
  } else {
    check_status(completion.status());
  }
  auto chat = parse_chat_request(*ordered, vllm::SamplingParams());
  if (chat) {
    (void)chat->params.validate(457);
    require(chat->messages.is_array() && !chat->messages.empty(), "chat has messages");
  } else {
    check_status(chat.status());
  }
  auto tokenize = parse_tokenize_request(*ordered);
  if (!tokenize) check_status(tokenize.status());
  auto detokenize = parse_detokenize_request(*plain);
  if (!detokenize) check_status(detokenize.status());
}

void parse_output(std::string_view text, size_t cut) {
  using namespace vllm::server;
  for (int which = 0; which < 2; ++which) {
    auto parser = which == 0 ? make_hermes_tool_parser() : make_qwen3_coder_tool_parser(nullptr);
    (void)parser->parse(text);
    auto streaming = which == 0 ? make_hermes_tool_parser() : make_qwen3_coder_tool_parser(nullptr);
    std::string content;
    std::vector<ToolCall> calls;
    streaming->feed(text.substr(0, cut), &content, &calls);
    streaming->feed(text.substr(cut), &content, &calls);
    streaming->finish(&content, &calls);
  }
  const ReasoningSplit whole = split_reasoning(text);
  ReasoningStreamParser stream;
  std::string reasoning, content;
  stream.feed(text.substr(0, cut), &reasoning, &content);
  stream.feed(text.substr(cut), &reasoning, &content);
  stream.finish(&reasoning, &content);
  const size_t open = text.find("<think>");
  const size_t close = text.find("</think>");
  if (open == 0 && close != std::string_view::npos) {
    require(reasoning == whole.reasoning.value_or(""), "streamed reasoning equals whole");
    require(content == whole.content.value_or(""), "streamed content equals whole");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  parse_requests(text);
  parse_output(text, size == 0 ? 0 : data[0] % (size + 1));
  return 0;
}
