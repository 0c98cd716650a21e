// The `vllm` binary's chat command and its default model, run as a user runs them: stdin
// piped in, stdout read back. The expected transcript is computed here with the same pieces
// (chat template, tokenizer, engine, greedy), so the test checks that `vllm chat` keeps the
// whole conversation, renders it with the model's template and prints each reply once.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "engine/output_processor.h"
#include "loader/hf_config.h"
#include "tokenizer/chat_template/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "unit/temp_dir.h"

namespace vllm {
namespace test_cli_chat {
namespace {

namespace fs = std::filesystem;

const fs::path kModelDir = fs::path(VLLM_SOURCE_DIR) / "models" / "qwen35-moe-demo";
// A small KV cache (the default 1 GiB takes seconds to allocate); the same in both.
constexpr int64_t kKvCacheBytes = 16 << 20;
const std::string kSmallCache = " --kv-cache-memory-bytes " + std::to_string(kKvCacheBytes);

struct RunResult {
  int exit_code = -1;
  std::string out;
};

// Runs `vllm ARGS --kv-cache-memory-bytes 16MiB < stdin_text` in `cwd`; stdout comes back,
// stderr is dropped.
RunResult run_vllm(const std::string& args, const std::string& stdin_text, const fs::path& cwd) {
  testing::TempDir tmp("vllm_cli");
  const fs::path in = tmp / "stdin.txt", out = tmp / "stdout.txt";
  std::ofstream(in) << stdin_text;
  const std::string cmd = "cd '" + cwd.string() + "' && '" + std::string(VLLM_CLI_PATH) + "' " +
                          args + kSmallCache + " < '" + in.string() + "' > '" + out.string() +
                          "' 2>/dev/null";
  RunResult r;
  const int status = std::system(cmd.c_str());
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream f(out);
  std::stringstream ss;
  ss << f.rdbuf();
  r.out = ss.str();
  return r;
}

// The assistant's greedy reply to `messages`, computed in process as `vllm chat` should.
std::string expected_reply(const nlohmann::ordered_json& messages, int max_tokens) {
  auto loaded = load_model_chat_template(kModelDir);
  EXPECT_TRUE(loaded.has_value()) << loaded.status().to_string();
  auto tmpl = ChatTemplate::parse(loaded->source, "demo");
  EXPECT_TRUE(tmpl.has_value()) << tmpl.status().to_string();
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  for (auto it = loaded->special_tokens.begin(); it != loaded->special_tokens.end(); ++it) {
    context[it.key()] = it.value();
  }
  context["messages"] = messages;
  context["add_generation_prompt"] = true;
  auto prompt = tmpl->render(context);
  EXPECT_TRUE(prompt.has_value()) << prompt.status().to_string();
  auto tokenizer = Tokenizer::from_file(kModelDir);
  EXPECT_TRUE(tokenizer.has_value());
  auto ids = tokenizer->encode(*prompt, /*add_special_tokens=*/false);
  EXPECT_TRUE(ids.has_value());

  auto model = load_model(kModelDir, LoadOptions{});
  EXPECT_TRUE(model.has_value()) << model.status().to_string();
  std::vector<int32_t> eos;
  for (int64_t id : (*model)->config().eos_token_ids) eos.push_back(static_cast<int32_t>(id));
  auto generation = load_generation_config(kModelDir);
  for (int64_t id : generation->eos_token_ids) eos.push_back(static_cast<int32_t>(id));
  engine::EngineConfig config;
  config.kv_cache_memory_bytes = kKvCacheBytes;
  auto core = engine::EngineCore::create(std::move(*model), config, eos);
  EXPECT_TRUE(core.has_value()) << core.status().to_string();
  SamplingParams greedy;
  greedy.temperature = 0.0;
  greedy.max_tokens = max_tokens;
  engine::OutputProcessor processor(&*tokenizer);
  EXPECT_TRUE(processor.add_request("r", *ids, greedy).has_value());
  EXPECT_TRUE((*core)->add_request("r", *ids, greedy).is_ok());
  std::string text;
  while ((*core)->has_unfinished_requests()) {
    auto outputs = (*core)->step();
    EXPECT_TRUE(outputs.has_value());
    if (!outputs.has_value()) break;
    std::vector<std::string> to_abort;
    for (const auto& r : processor.process(*outputs, &to_abort)) {
      if (r.finished) text = r.outputs[0].text;
    }
  }
  return text;
}

TEST(CliChatTest, KeepsTheConversationAndStreamsReplies) {
  const std::string first =
      "Write a Python function named fibonacci. Return the n-th Fibonacci number.";
  const std::string second =
      "Write a Python function named gcd. Return the greatest common divisor.";
  testing::TempDir cwd("vllm_cli_cwd");
  const RunResult r = run_vllm(
      "chat --model '" + kModelDir.string() +
          "' --temperature 0 --max-tokens 12 --system-prompt 'You are a helpful assistant.'",
      first + "\n\n" + second + "\n", cwd.path());
  ASSERT_EQ(r.exit_code, 0) << r.out;

  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back({{"role", "system"}, {"content", "You are a helpful assistant."}});
  messages.push_back({{"role", "user"}, {"content", first}});
  const std::string reply1 = expected_reply(messages, 12);
  messages.push_back({{"role", "assistant"}, {"content", reply1}});
  messages.push_back({{"role", "user"}, {"content", second}});
  const std::string reply2 = expected_reply(messages, 12);
  EXPECT_FALSE(reply1.empty());
  EXPECT_EQ(r.out, "> " + first + "\n" + reply1 + "\n> " + second + "\n" + reply2 + "\n");
}

TEST(CliChatTest, QuitEndsTheSession) {
  testing::TempDir cwd("vllm_cli_cwd");
  const RunResult r =
      run_vllm("chat --model '" + kModelDir.string() + "' --temperature 0 --max-tokens 4",
               "Hello\nquit\nnot answered\n", cwd.path());
  ASSERT_EQ(r.exit_code, 0);
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back({{"role", "user"}, {"content", "Hello"}});
  EXPECT_EQ(r.out, "> Hello\n" + expected_reply(messages, 4) + "\n> quit\n");
}

// With no --model, generate and chat find models/qwen35-moe-demo from the executable's
// location, whatever the current directory.
TEST(CliChatTest, DefaultModelFromAnyDirectory) {
  testing::TempDir cwd("vllm_cli_cwd");
  RunResult r = run_vllm("generate --prompt 'def fibonacci(n):' --max-tokens 8 --temperature 0", "",
                         cwd.path());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("Prompt: def fibonacci(n):\nGenerated: ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("(8 tokens, finish_reason=length)"), std::string::npos) << r.out;

  r = run_vllm("chat -q 'Hello' --temperature 0 --max-tokens 4", "", cwd.path());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_FALSE(r.out.empty());
  EXPECT_EQ(r.out.back(), '\n');
}

}  // namespace
}  // namespace test_cli_chat
}  // namespace vllm
