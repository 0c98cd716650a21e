// The model that `vllm serve`, `vllm generate` and `vllm chat` use when none is given: the
// small demo model shipped in the repository's models/ folder (its model card is
// models/qwen35-moe-demo/README.md; scripts/train_demo_model.py trains it).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "base/status.h"

namespace vllm::cli {

// The folder name of the demo model under models/.
inline constexpr const char* kDefaultModelName = "qwen35-moe-demo";

// Where models/<kDefaultModelName>/config.json is looked for, in order: the folder of the
// running executable and each folder above it (a build tree inside the repository, or an
// installed bin/ beside models/), then the current directory and each folder above it.
std::vector<std::filesystem::path> default_model_search_dirs();

// The demo model's folder, or kNotFound naming the places searched and what to do.
Expected<std::filesystem::path> default_model_dir();

// `model` when it is given (non-empty), else default_model_dir().
Expected<std::string> resolve_model_dir(const std::string& model);

}  // namespace vllm::cli
