// Small random-weight Hugging Face checkpoints of the supported dense architectures, for
// the demo (`make_tiny_checkpoint`) and for model tests. Weights are bf16, drawn from a
// seeded generator and scaled 1/sqrt(fan_in) so logits are not flat; the dims are small and
// deliberately not powers of two.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "base/status.h"

namespace vllm::testing {

// arch: "llama" (tied embeddings, llama3 rope scaling) or "qwen3" (q/k norm, untied head).
// vocab_size 0 keeps the small default (512); a real tokenizer's size pairs the checkpoint
// with that tokenizer.
Status write_tiny_checkpoint(const std::filesystem::path& dir, const std::string& arch,
                             uint64_t seed, int64_t vocab_size = 0);

}  // namespace vllm::testing
