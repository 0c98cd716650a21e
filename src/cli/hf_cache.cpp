#include "cli/hf_cache.h"

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>

namespace vllm::cli {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// One part of a repo id: word characters, '-' and '.', starting and ending with a word
// character (huggingface_hub's \b[\w\-.]+\b).
bool is_id_part(std::string_view part) {
  if (part.empty() || !is_word_char(part.front()) || !is_word_char(part.back())) return false;
  for (char c : part) {
    if (!is_word_char(c) && c != '-' && c != '.') return false;
  }
  return true;
}

bool is_commit_hash(std::string_view s) {
  if (s.size() != 40) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

bool is_hf_repo_id(std::string_view name) {
  if (name.empty() || name.size() > 96) return false;
  if (name.find("--") != std::string_view::npos || name.find("..") != std::string_view::npos)
    return false;
  const size_t slash = name.find('/');
  if (slash == std::string_view::npos) return is_id_part(name);
  if (name.find('/', slash + 1) != std::string_view::npos) return false;
  return is_id_part(name.substr(0, slash)) && is_id_part(name.substr(slash + 1));
}

fs::path hf_hub_cache_dir(const std::optional<std::string>& download_dir) {
  if (download_dir && !download_dir->empty()) return *download_dir;
  if (auto dir = env("HF_HUB_CACHE")) return *dir;
  if (auto dir = env("HUGGINGFACE_HUB_CACHE")) return *dir;  // the older name
  if (auto home = env("HF_HOME")) return fs::path(*home) / "hub";
  if (auto xdg = env("XDG_CACHE_HOME")) return fs::path(*xdg) / "huggingface" / "hub";
  if (auto home = env("HOME")) return fs::path(*home) / ".cache" / "huggingface" / "hub";
  return fs::path(".cache") / "huggingface" / "hub";
}

Expected<fs::path> find_hf_snapshot(std::string_view repo_id, std::string_view revision,
                                    const std::optional<std::string>& download_dir) {
  std::string folder = "models--";
  for (char c : repo_id) folder += c == '/' ? std::string("--") : std::string(1, c);
  const fs::path repo = hf_hub_cache_dir(download_dir) / folder;
  const std::string how = fmt::format(
      "download it first (e.g. `huggingface-cli download {}`), point HF_HOME or "
      "HF_HUB_CACHE at the cache that has it, or pass the model's folder",
      repo_id);
  const fs::path ref = repo / "refs" / std::string(revision);
  std::string commit;
  if (fs::is_regular_file(ref)) {
    std::ifstream in(ref);
    std::getline(in, commit);
    while (!commit.empty() &&
           (commit.back() == '\n' || commit.back() == '\r' || commit.back() == ' '))
      commit.pop_back();
  } else if (is_commit_hash(revision)) {
    commit = std::string(revision);
  } else {
    return make_error(ErrorCode::kNotFound,
                      "model {} is not a folder and not in the Hugging Face cache: {} does not "
                      "exist; {}",
                      repo_id, ref.string(), how);
  }
  const fs::path snapshot = repo / "snapshots" / commit;
  if (!fs::is_directory(snapshot)) {
    return make_error(ErrorCode::kNotFound,
                      "model {} at revision {}: snapshot folder {} does not exist; {}", repo_id,
                      revision, snapshot.string(), how);
  }
  return snapshot;
}

}  // namespace vllm::cli
