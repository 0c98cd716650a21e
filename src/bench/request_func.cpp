// One streaming OpenAI request, timed; see request_func.h.
#include "bench/request_func.h"

#include <fmt/format.h>
#include <httplib.h>

#include <cstdlib>
#include <exception>

#include "bench/sse.h"

namespace vllm::bench {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// "http://host:8000/prefix" -> ("http://host:8000", "/prefix"): httplib::Client takes the
// first part, and the prefix goes in front of the endpoint path (vLLM joins them as strings).
std::pair<std::string, std::string> split_base_url(const std::string& base_url) {
  const size_t scheme = base_url.find("://");
  const size_t slash = base_url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  if (slash == std::string::npos) return {base_url, ""};
  std::string prefix = base_url.substr(slash);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  return {base_url.substr(0, slash), prefix};
}

double seconds_between(BenchClock::time_point a, BenchClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Reads one stream event into `output`; `st` is when the request was sent.
class StreamTimer {
 public:
  StreamTimer(bool chat, RequestOutput& output, BenchClock::time_point st)
      : chat_(chat), output_(output), st_(st), most_recent_(st) {}

  void on_event(const std::string& data) {
    if (data == "[DONE]") return;
    const BenchClock::time_point now = BenchClock::now();
    auto j = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return;
    if (j.contains("error") && !j.contains("choices")) {
      error_ = j["error"].is_object() && j["error"].contains("message") ? j["error"]["message"].dump()
                                                                        : j["error"].dump();
      return;
    }
    const auto choices = j.find("choices");
    if (choices != j.end() && choices->is_array() && !choices->empty()) {
      const nlohmann::json& c = (*choices)[0];
      const nlohmann::json* text = nullptr;
      if (chat_) {
        if (c.contains("delta") && c["delta"].contains("content")) text = &c["delta"]["content"];
      } else if (c.contains("text")) {
        text = &c["text"];
      }
      if (output_.num_chunks == 0) {
        output_.ttft = seconds_between(st_, now);
      } else {
        output_.itl.push_back(seconds_between(most_recent_, now));
      }
      ++output_.num_chunks;
      if (text != nullptr && text->is_string()) output_.generated_text += text->get<std::string>();
      most_recent_ = now;
    } else if (auto usage = j.find("usage"); usage != j.end() && usage->is_object()) {
      if (usage->contains("completion_tokens") && (*usage)["completion_tokens"].is_number_integer()) {
        output_.usage_output_tokens = (*usage)["completion_tokens"].get<int64_t>();
      }
      // The chat client moves the end mark on every event, usage included (as vLLM's does).
      if (chat_) most_recent_ = now;
    }
  }

  BenchClock::time_point most_recent() const { return most_recent_; }
  const std::string& error() const { return error_; }

 private:
  bool chat_;
  RequestOutput& output_;
  BenchClock::time_point st_;
  BenchClock::time_point most_recent_;
  std::string error_;
};

}  // namespace

Status validate_endpoint(const Endpoint& endpoint) {
  if (endpoint.backend == "openai") {
    if (!ends_with(endpoint.path, "completions")) {
      return make_error(ErrorCode::kInvalidArgument,
                        "--endpoint {}: the openai backend needs a completions endpoint "
                        "(e.g. /v1/completions)",
                        endpoint.path);
    }
  } else if (endpoint.backend == "openai-chat") {
    if (!ends_with(endpoint.path, "chat/completions")) {
      return make_error(ErrorCode::kInvalidArgument,
                        "--endpoint {}: the openai-chat backend needs a chat/completions "
                        "endpoint (e.g. /v1/chat/completions)",
                        endpoint.path);
    }
  } else {
    return make_error(ErrorCode::kInvalidArgument, "--backend {}: use openai or openai-chat",
                      endpoint.backend);
  }
  if (endpoint.base_url.rfind("http://", 0) != 0 && endpoint.base_url.rfind("https://", 0) != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--base-url {}: expected http://HOST:PORT or https://HOST:PORT",
                      endpoint.base_url);
  }
  return Status::ok();
}

nlohmann::json request_payload(const Endpoint& endpoint, const RequestFuncInput& input) {
  nlohmann::json p;
  p["model"] = input.model;
  if (endpoint.backend == "openai-chat") {
    p["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", input.prompt}}});
    p["temperature"] = 0.0;
    p["max_completion_tokens"] = input.output_len;
  } else {
    if (input.prompt.empty() && !input.prompt_token_ids.empty()) {
      p["prompt"] = input.prompt_token_ids;
    } else {
      p["prompt"] = input.prompt;
    }
    p["temperature"] = 0.0;
    p["repetition_penalty"] = 1.0;
    p["max_tokens"] = input.output_len;
  }
  p["stream"] = true;
  p["stream_options"] = {{"include_usage", true}};
  if (input.ignore_eos) p["ignore_eos"] = true;
  if (input.extra_body.is_object()) {
    for (auto it = input.extra_body.begin(); it != input.extra_body.end(); ++it) p[it.key()] = it.value();
  }
  return p;
}

RequestOutput send_request(const Endpoint& endpoint, const RequestFuncInput& input,
                           BenchClock::time_point bench_start) {
  RequestOutput output;
  output.prompt_len = input.prompt_len;
  try {
    const auto [host, prefix] = split_base_url(endpoint.base_url);
    httplib::Client client(host);
    client.set_connection_timeout(std::chrono::seconds(60));
    client.set_read_timeout(std::chrono::hours(6));  // vLLM's aiohttp total timeout
    client.set_write_timeout(std::chrono::seconds(60));

    httplib::Request req;
    req.method = "POST";
    req.path = prefix + endpoint.path;
    req.body = request_payload(endpoint, input).dump();
    req.set_header("Content-Type", "application/json");
    if (const char* key = std::getenv("OPENAI_API_KEY")) {
      req.set_header("Authorization", std::string("Bearer ") + key);
    }
    if (!input.request_id.empty()) req.set_header("x-request-id", input.request_id);

    const BenchClock::time_point st = BenchClock::now();
    output.start_time = seconds_between(bench_start, st);
    StreamTimer timer(endpoint.backend == "openai-chat", output, st);
    SseParser parser;
    int status = 0;
    std::string error_body;
    req.response_handler = [&](const httplib::Response& res) {
      status = res.status;
      return true;
    };
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      if (status != 200) {
        if (error_body.size() < 4096) error_body.append(data, n);
        return true;
      }
      for (const std::string& event : parser.add_chunk(std::string_view(data, n))) timer.on_event(event);
      return true;
    };
    httplib::Result result = client.send(req);
    if (!result) {
      output.error = "request failed: " + httplib::to_string(result.error());
      return output;
    }
    if (status != 200) {
      output.error = fmt::format("HTTP {} {}: {}", result->status, result->reason, error_body);
      return output;
    }
    for (const std::string& event : parser.finish()) timer.on_event(event);
    if (output.num_chunks == 0) {
      output.error = timer.error().empty()
                         ? "Never received a valid chunk to calculate TTFT. This response will be "
                           "marked as failed!"
                         : timer.error();
      return output;
    }
    output.latency = seconds_between(st, timer.most_recent());
    output.success = true;
  } catch (const std::exception& e) {
    output.success = false;
    output.error = e.what();
  }
  return output;
}

}  // namespace vllm::bench
