// `vllm tokenize`: text -> token ids with a model's tokenizer.json, for users and for
// scripted checks against Hugging Face (`tokenizers`' encode(text, add_special_tokens)).
//
// stdin: one JSON string per line (blank lines are skipped). stdout: one JSON array of ids
// per input line. A line that is not a JSON string, or that fails to encode, prints `null`
// in its place and its error, naming the line number, on stderr; the remaining lines are
// still processed (so output lines stay aligned with input lines) and the exit code is 2.
// A model that cannot be loaded is exit code 1.
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "tokenizer/tokenizer.h"

namespace vllm::cli {
namespace {

struct TokenizeArgs {
  std::string model;
  bool no_special_tokens = false;
};

Expected<std::vector<int32_t>> encode_line(const Tokenizer& tokenizer, const std::string& line,
                                           bool add_special_tokens) {
  nlohmann::json value = nlohmann::json::parse(line, nullptr, false);
  if (value.is_discarded()) return make_error(ErrorCode::kInvalidArgument, "not valid JSON");
  if (!value.is_string()) {
    return make_error(ErrorCode::kInvalidArgument, "expected a JSON string, got {}",
                      value.type_name());
  }
  return tokenizer.encode(value.get_ref<const std::string&>(), add_special_tokens);
}

int run_tokenize(const TokenizeArgs& args) {
  auto tokenizer = Tokenizer::from_file(args.model);
  if (!tokenizer.has_value()) {
    std::fprintf(stderr, "tokenize: %s\n", tokenizer.status().to_string().c_str());
    return 1;
  }
  int exit_code = 0;
  std::string line, out;
  for (int64_t line_number = 1; std::getline(std::cin, line); ++line_number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Expected<std::vector<int32_t>> ids = encode_line(*tokenizer, line, !args.no_special_tokens);
    if (!ids.has_value()) {
      std::fprintf(stderr, "tokenize: stdin line %lld: %s\n", static_cast<long long>(line_number),
                   ids.status().to_string().c_str());
      std::fputs("null\n", stdout);
      exit_code = 2;
      continue;
    }
    out.assign("[");
    for (size_t i = 0; i < ids->size(); ++i) {
      if (i > 0) out += ", ";
      out += std::to_string((*ids)[i]);
    }
    out += "]\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  std::fflush(stdout);
  return exit_code;
}

}  // namespace

Runner add_tokenize_command(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Encode JSON strings (one per line on stdin) to token ids (JSON arrays)");
  cmd->add_option("--model", args->model, "Model directory holding tokenizer.json (or the file)")
      ->required();
  cmd->add_flag("--no-special-tokens", args->no_special_tokens,
                "Do not add the post-processor's special tokens (BOS/EOS)");
  return [args] { return run_tokenize(*args); };
}

}  // namespace vllm::cli
