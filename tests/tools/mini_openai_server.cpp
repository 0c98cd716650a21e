// A stand-in OpenAI completions server over our EngineClient, so `vllm bench serve` can be
// run against this engine on the CPU before `vllm serve` (src/server/) exists. It is not
// the product server: POST /v1/completions only, token-id or text prompts, streaming only,
// temperature / max_tokens / ignore_eos / seed honoured, one SSE chunk per engine step with
// new tokens, then a usage chunk and [DONE]; GET /health answers 200.
//   mini_openai_server MODEL_DIR PORT [--load-format dummy] [--max-num-seqs N]
// Once `vllm serve` lands, benchmark that instead (scripts/bench_smoke.sh, BENCHMARKS.md).
#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/engine_args.h"
#include "engine/engine_client.h"

using namespace vllm;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: mini_openai_server MODEL_DIR PORT [--load-format dummy] [--max-num-seqs N]\n");
    return 2;
  }
  engine::EngineArgs args;
  args.model = argv[1];
  const int port = std::atoi(argv[2]);
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--load-format") args.load_format = argv[i + 1];
    else if (flag == "--max-num-seqs") args.engine.scheduler.max_num_seqs = std::atoi(argv[i + 1]);
    else if (flag == "--max-model-len") args.max_model_len = std::atoll(argv[i + 1]);
  }
  auto loaded = engine::build_engine(args);
  if (!loaded) {
    std::fprintf(stderr, "%s\n", loaded.status().to_string().c_str());
    return 1;
  }
  const Tokenizer* tokenizer = loaded->tokenizer.get();
  engine::EngineClient client(std::move(loaded->core));
  std::atomic<int64_t> next_id{0};

  httplib::Server server;
  // One thread per connection up to 256 (httplib's default pool is 8): a sweep to
  // concurrency 64 must not queue inside the server.
  server.new_task_queue = [] { return new httplib::ThreadPool(256); };
  server.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
  server.Post("/v1/completions", [&](const httplib::Request& req, httplib::Response& res) {
    auto body = nlohmann::json::parse(req.body, nullptr, false);
    std::vector<int32_t> prompt;
    if (body.is_object() && body["prompt"].is_array()) {
      for (const auto& id : body["prompt"]) prompt.push_back(id.get<int32_t>());
    } else if (body.is_object() && body["prompt"].is_string() && tokenizer != nullptr) {
      auto ids = tokenizer->encode(body["prompt"].get<std::string>(), true);
      if (ids) prompt = *ids;
    }
    if (prompt.empty()) {
      res.status = 400;
      res.set_content(R"j({"error": {"message": "prompt: token ids or text (with a tokenizer)"}})j", "application/json");
      return;
    }
    SamplingParams params;
    params.temperature = body.value("temperature", 1.0);
    params.max_tokens = body.value("max_tokens", 16);
    params.ignore_eos = body.value("ignore_eos", false);
    if (body.contains("seed")) params.seed = body["seed"].get<int64_t>();
    const std::string id = fmt::format("cmpl-{}", next_id++);
    auto stream = client.add_request(id, prompt, params);
    if (!stream) {
      res.status = 400;
      res.set_content(nlohmann::json{{"error", {{"message", stream.status().message()}}}}.dump(), "application/json");
      return;
    }
    const std::string model = body.value("model", args.model);
    const int64_t prompt_tokens = static_cast<int64_t>(prompt.size());
    res.set_chunked_content_provider(
        "text/event-stream",
        [&client, s = *stream, id, model, prompt_tokens, completion = int64_t{0}](
            size_t, httplib::DataSink& sink) mutable {
          auto out = s->next();
          std::string events;
          if (out && !out->new_token_ids.empty()) {
            completion += static_cast<int64_t>(out->new_token_ids.size());
            nlohmann::json chunk = {{"id", id}, {"object", "text_completion"}, {"model", model},
                                    {"choices", {{{"index", 0}, {"text", ""}, {"token_ids", out->new_token_ids},
                                                  {"finish_reason", nullptr}}}}};
            events += "data: " + chunk.dump() + "\n\n";
          }
          if (!out || out->finished()) {
            nlohmann::json usage = {{"id", id}, {"object", "text_completion"}, {"model", model},
                                    {"choices", nlohmann::json::array()},
                                    {"usage", {{"prompt_tokens", prompt_tokens},
                                               {"completion_tokens", completion},
                                               {"total_tokens", prompt_tokens + completion}}}};
            events += "data: " + usage.dump() + "\n\ndata: [DONE]\n\n";
            sink.write(events.data(), events.size());
            sink.done();
            return true;
          }
          if (!events.empty() && !sink.write(events.data(), events.size())) {
            client.abort_request(id);
            return false;
          }
          return true;
        });
  });
  if (!server.bind_to_port("127.0.0.1", port)) {
    std::fprintf(stderr, "mini_openai_server: cannot bind 127.0.0.1:%d\n", port);
    return 1;
  }
  // httplib 0.11.4 listens with a backlog of 5 (compiled into the library): a burst of 64
  // connects overflows it and some connections fail with read errors. Find our listening
  // socket and listen again with a deep queue (Linux updates the backlog).
  for (int fd = 3; fd < 1024; ++fd) {
    sockaddr_in addr{};
    socklen_t len = sizeof(addr);
    int listening = 0;
    socklen_t opt_len = sizeof(listening);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 && addr.sin_family == AF_INET &&
        ntohs(addr.sin_port) == port &&
        ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &opt_len) == 0 && listening) {
      ::listen(fd, 4096);
    }
  }
  std::fprintf(stderr, "mini_openai_server: %s on 127.0.0.1:%d\n", args.model.c_str(), port);
  return server.listen_after_bind() ? 0 : 1;
}
