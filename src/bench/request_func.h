// One streaming request to an OpenAI-compatible server, timed as vLLM's benchmark client
// times it (vllm/benchmarks/lib/endpoint_request_func.py).
//
// backend "openai" posts to a completions endpoint (`prompt`, `max_tokens`), "openai-chat" to
// a chat completions endpoint (one user message, `max_completion_tokens`); both stream with
// stream_options.include_usage so the server reports the exact output token count. TTFT is
// measured to the first chunk with a choice, ITL between later ones. Each call opens its own
// connection (httplib::Client), so concurrent calls from different threads are independent.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "bench/metrics.h"

namespace vllm::bench {

using BenchClock = std::chrono::steady_clock;

struct Endpoint {
  std::string base_url;                  // "http://127.0.0.1:8000"
  std::string path = "/v1/completions";  // vLLM's --endpoint
  std::string backend = "openai";        // openai | openai-chat
};

// Checks the backend and that the path fits it, as vLLM does (completions / chat/completions).
Status validate_endpoint(const Endpoint& endpoint);

struct RequestFuncInput {
  std::string prompt;                     // text prompt ...
  std::vector<int32_t> prompt_token_ids;  // ... or token ids (completions only), when no text
  int64_t prompt_len = 0;
  int64_t output_len = 0;  // max_tokens
  std::string model;
  bool ignore_eos = false;
  nlohmann::json extra_body = nlohmann::json::object();  // merged into the payload last
  std::string request_id;                                // sent as x-request-id
};

// The JSON body vLLM's client sends for this input.
nlohmann::json request_payload(const Endpoint& endpoint, const RequestFuncInput& input);

// Sends the request and reads the stream to its end. Never throws; a transport error, a
// non-200 status or a stream without any choice is a failed RequestOutput with `error` set.
// start_time is measured from `bench_start`.
RequestOutput send_request(const Endpoint& endpoint, const RequestFuncInput& input,
                           BenchClock::time_point bench_start);

}  // namespace vllm::bench
