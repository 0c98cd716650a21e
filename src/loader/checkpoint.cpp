// Checkpoint discovery and lookup (see checkpoint.h for the file-selection order).
//
// std::filesystem calls use their error_code overloads: nothing here throws.
#include "loader/checkpoint.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

namespace vllm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool file_exists(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

Expected<std::string> read_text_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::kIoError, "{}: cannot open for reading", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return make_error(ErrorCode::kIoError, "{}: read failed", path.string());
  return text.str();
}

// A shard name from the weight map must be a relative path that stays inside the folder.
bool is_safe_shard_name(const std::string& shard) {
  if (shard.empty()) return false;
  fs::path p = fs::path(shard).lexically_normal();
  if (p.is_absolute() || p.empty()) return false;
  for (const auto& part : p) {
    if (part == "..") return false;
  }
  return true;
}

}  // namespace

Status Checkpoint::add_file_tensors(size_t index,
                                    const std::map<std::string, size_t, std::less<>>& pinned) {
  for (const SafetensorsEntry& entry : files_[index].entries()) {
    if (pinned.count(entry.name) != 0) continue;
    auto [it, inserted] = locations_.emplace(entry.name, index);
    if (!inserted) {
      return make_error(ErrorCode::kInvalidFormat,
                        "checkpoint {}: tensor '{}' is in both {} and {}", dir_.string(),
                        entry.name, files_[it->second].path().filename().string(),
                        files_[index].path().filename().string());
    }
  }
  return Status::ok();
}

Expected<Checkpoint> Checkpoint::open(const fs::path& model_dir) {
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec)) {
    return make_error(ErrorCode::kNotFound, "model folder {} does not exist or is not a folder",
                      model_dir.string());
  }
  Checkpoint ckpt;
  ckpt.dir_ = model_dir;
  std::map<std::string, size_t, std::less<>> pinned;

  const fs::path index_path = model_dir / kSafetensorsIndexFile;
  const fs::path single_path = model_dir / kSafetensorsSingleFile;
  if (file_exists(index_path)) {
    const std::string index_name = index_path.string();
    VLLM_ASSIGN_OR_RETURN(std::string text, read_text_file(index_path));
    json index = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (index.is_discarded()) {
      return make_error(ErrorCode::kInvalidFormat, "{}: not valid JSON", index_name);
    }
    auto map_it = index.is_object() ? index.find("weight_map") : index.end();
    if (map_it == index.end() || !map_it->is_object()) {
      return make_error(ErrorCode::kInvalidFormat,
                        "{}: missing \"weight_map\" object (tensor name -> shard file)",
                        index_name);
    }
    if (map_it->empty()) {
      return make_error(ErrorCode::kInvalidFormat, "{}: \"weight_map\" is empty", index_name);
    }
    std::map<std::string, size_t> shard_index;                // shard file name -> index in files_
    std::vector<std::pair<std::string, std::string>> mapped;  // (tensor, shard)
    for (const auto& [tensor, shard_value] : map_it->items()) {
      const auto* shard = shard_value.get_ptr<const std::string*>();
      if (shard == nullptr || !is_safe_shard_name(*shard)) {
        return make_error(ErrorCode::kInvalidFormat,
                          "{}: \"weight_map\" entry for tensor '{}' must be a shard file name "
                          "inside the model folder",
                          index_name, tensor);
      }
      shard_index.emplace(*shard, 0);
      mapped.emplace_back(tensor, *shard);
    }
    for (auto& [shard, position] : shard_index) {
      const fs::path shard_path = model_dir / shard;
      if (!file_exists(shard_path)) {
        return make_error(ErrorCode::kNotFound, "{} names shard '{}', but {} does not exist",
                          index_name, shard, shard_path.string());
      }
      VLLM_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(shard_path));
      position = ckpt.files_.size();
      ckpt.files_.push_back(std::move(file));
    }
    for (const auto& [tensor, shard] : mapped) {
      const size_t position = shard_index.find(shard)->second;
      if (!ckpt.files_[position].contains(tensor)) {
        return make_error(ErrorCode::kInvalidFormat,
                          "{} maps tensor '{}' to shard '{}', but that shard does not contain "
                          "it",
                          index_name, tensor, shard);
      }
      pinned.emplace(tensor, position);
    }
  } else if (file_exists(single_path)) {
    VLLM_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(single_path));
    ckpt.files_.push_back(std::move(file));
  } else {
    std::vector<fs::path> found;
    for (fs::directory_iterator it(model_dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().extension() == ".safetensors" && file_exists(it->path())) {
        found.push_back(it->path());
      }
    }
    if (ec) {
      return make_error(ErrorCode::kIoError, "cannot list model folder {}: {}", model_dir.string(),
                        ec.message());
    }
    std::sort(found.begin(), found.end());
    for (const fs::path& path : found) {
      VLLM_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(path));
      ckpt.files_.push_back(std::move(file));
    }
  }
  if (ckpt.files_.empty()) {
    return make_error(ErrorCode::kNotFound,
                      "no safetensors weights in {} (looked for {}, {} and *.safetensors)",
                      model_dir.string(), kSafetensorsIndexFile, kSafetensorsSingleFile);
  }
  ckpt.locations_ = pinned;
  for (size_t i = 0; i < ckpt.files_.size(); ++i) {
    VLLM_RETURN_IF_ERROR(ckpt.add_file_tensors(i, pinned));
  }
  return ckpt;
}

Expected<Tensor> Checkpoint::tensor(std::string_view name) const {
  const SafetensorsFile* file = file_of(name);
  if (file == nullptr) {
    return make_error(ErrorCode::kNotFound, "tensor '{}' not found in checkpoint {}", name,
                      dir_.string());
  }
  return file->tensor(name);
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(locations_.size());
  for (const auto& [name, index] : locations_) out.push_back(name);
  return out;
}

const SafetensorsFile* Checkpoint::file_of(std::string_view name) const {
  auto it = locations_.find(name);
  return it == locations_.end() ? nullptr : &files_[it->second];
}

}  // namespace vllm
