// Checkpoint: all safetensors weights of a Hugging Face model folder, by tensor name.
//
// Which files make the checkpoint, in the order vLLM and transformers look:
//   1. model.safetensors.index.json: its "weight_map" (tensor -> shard file) names the shards;
//      each distinct shard is opened once, and every mapped tensor must be in its shard.
//      Tensors a shard holds beyond the map are also served (vLLM loads whole shards).
//   2. model.safetensors.
//   3. every *.safetensors in the folder, in sorted order.
// A name held by two files (and not settled by the weight map) is an error, not a guess.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "loader/safetensors.h"
#include "tensor/tensor.h"

namespace vllm {

inline constexpr std::string_view kSafetensorsIndexFile = "model.safetensors.index.json";
inline constexpr std::string_view kSafetensorsSingleFile = "model.safetensors";

class Checkpoint {
 public:
  // kNotFound if the folder or its safetensors files are missing; kInvalidFormat for a bad
  // index or shard; errors name the folder, index, shard and tensor involved.
  static Expected<Checkpoint> open(const std::filesystem::path& model_dir);

  const std::filesystem::path& dir() const { return dir_; }
  // A zero-copy CPU view; kNotFound "tensor 'X' not found in checkpoint DIR".
  Expected<Tensor> tensor(std::string_view name) const;
  bool contains(std::string_view name) const { return locations_.count(name) != 0; }
  // All tensor names, sorted.
  std::vector<std::string> names() const;
  size_t size() const { return locations_.size(); }
  // The file holding `name` (and so its entry: file_of(name)->find(name)), or nullptr.
  const SafetensorsFile* file_of(std::string_view name) const;
  const std::vector<SafetensorsFile>& files() const { return files_; }

 private:
  // Adds every tensor of files_[index] that `pinned` does not already place elsewhere.
  Status add_file_tensors(size_t index, const std::map<std::string, size_t, std::less<>>& pinned);

  std::filesystem::path dir_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t, std::less<>> locations_;  // tensor name -> index in files_
};

}  // namespace vllm
