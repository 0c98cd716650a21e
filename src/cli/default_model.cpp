// Finds the shipped demo model (see default_model.h).
#include "cli/default_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <system_error>

namespace vllm::cli {
namespace fs = std::filesystem;

namespace {

void add_with_parents(fs::path dir, std::vector<fs::path>& out) {
  while (!dir.empty()) {
    if (std::find(out.begin(), out.end(), dir) == out.end()) out.push_back(dir);
    fs::path parent = dir.parent_path();
    if (parent == dir) break;
    dir = parent;
  }
}

}  // namespace

std::vector<fs::path> default_model_search_dirs() {
  std::vector<fs::path> dirs;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) add_with_parents(fs::weakly_canonical(exe, ec).parent_path(), dirs);
  const fs::path cwd = fs::current_path(ec);
  if (!ec) add_with_parents(cwd, dirs);
  return dirs;
}

Expected<fs::path> default_model_dir() {
  const std::vector<fs::path> dirs = default_model_search_dirs();
  std::error_code ec;
  for (const fs::path& dir : dirs) {
    const fs::path candidate = dir / "models" / kDefaultModelName;
    if (fs::is_regular_file(candidate / "config.json", ec)) return candidate;
  }
  std::string searched;
  for (const fs::path& dir : dirs) {
    if (!searched.empty()) searched += ", ";
    searched += dir.string();
  }
  return make_error(ErrorCode::kNotFound,
                    "no model given, and the demo model models/{}/ was not found in the "
                    "executable's folder, the current directory or any folder above them "
                    "(searched {}); pass --model DIR (a Hugging Face model folder), or run "
                    "from a checkout of vllm.cpp",
                    kDefaultModelName, searched);
}

Expected<std::string> resolve_model_dir(const std::string& model) {
  if (!model.empty()) return model;
  VLLM_ASSIGN_OR_RETURN(fs::path dir, default_model_dir());
  return dir.string();
}

}  // namespace vllm::cli
