// Finding a model given as a Hugging Face id ("Qwen/Qwen3.5-4B") in the local Hugging Face
// cache, offline, as vLLM (huggingface_hub's snapshot_download with local files) finds it:
//
//   <cache>/models--Qwen--Qwen3.5-4B/refs/<revision>     holds a commit hash
//   <cache>/models--Qwen--Qwen3.5-4B/snapshots/<hash>/   the model folder
//
// <cache> is --download-dir when given, else $HF_HUB_CACHE, else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub. <revision> is --revision
// (default "main"), a branch or tag name with a refs/ file, or a commit hash naming a
// snapshot directly. Nothing is downloaded.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace vllm::cli {

// Whether `name` has the shape of a Hugging Face repository id ("org/name" or "name").
bool is_hf_repo_id(std::string_view name);

// The hub cache folder, from `download_dir` or the environment as above.
std::filesystem::path hf_hub_cache_dir(const std::optional<std::string>& download_dir = {});

// The snapshot folder of `repo_id` at `revision`, or kNotFound naming where it looked and
// how to get the model.
Expected<std::filesystem::path> find_hf_snapshot(
    std::string_view repo_id, std::string_view revision = "main",
    const std::optional<std::string>& download_dir = {});

}  // namespace vllm::cli
