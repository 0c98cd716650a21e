// Writes a small random-weight checkpoint for demos:
//   make_tiny_checkpoint OUT_DIR [--arch llama|qwen3] [--seed N] [--vocab-size N]
// --vocab-size pairs the checkpoint with a real tokenizer (e.g. 151936 for Qwen3's).
#include <cstdio>
#include <cstring>
#include <string>

#include "tools/tiny_checkpoint.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc % 2 != 0) {
    std::fprintf(stderr,
                 "usage: make_tiny_checkpoint OUT_DIR [--arch llama|qwen3] [--seed N] "
                 "[--vocab-size N]\n");
    return 2;
  }
  std::string arch = "llama";
  uint64_t seed = 1234;
  int64_t vocab_size = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--arch") == 0) {
      arch = argv[i + 1];
    } else if (std::strcmp(argv[i], "--seed") == 0) {
      char* end = nullptr;
      seed = std::strtoull(argv[i + 1], &end, 10);
      if (*end != '\0') {
        std::fprintf(stderr, "make_tiny_checkpoint: --seed must be an integer\n");
        return 2;
      }
    } else if (std::strcmp(argv[i], "--vocab-size") == 0) {
      char* end = nullptr;
      vocab_size = std::strtoll(argv[i + 1], &end, 10);
      if (*end != '\0' || vocab_size <= 0) {
        std::fprintf(stderr, "make_tiny_checkpoint: --vocab-size must be a positive integer\n");
        return 2;
      }
    } else {
      std::fprintf(stderr, "make_tiny_checkpoint: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  vllm::Status status = vllm::testing::write_tiny_checkpoint(argv[1], arch, seed, vocab_size);
  if (!status.is_ok()) {
    std::fprintf(stderr, "make_tiny_checkpoint: %s\n", status.to_string().c_str());
    return 1;
  }
  std::printf("wrote %s (%s)\n", argv[1], arch.c_str());
  return 0;
}
