// A minimal writer of GGUF (version 3), the file format llama.cpp loads: key/value metadata,
// then tensor descriptions, then the tensor data, each tensor aligned to 32 bytes. Only what
// the peer benchmark's converter needs: scalar, string and integer-array values; F32, F16
// and BF16 tensors. Shapes are given in PyTorch order (outermost first) and written in
// ggml's order (innermost first).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "base/status.h"

namespace vllm::peers {

// ggml_type values of the element types written here.
enum class GgmlType : uint32_t { kF32 = 0, kF16 = 1, kBF16 = 30 };

class GgufWriter {
 public:
  void add_u32(const std::string& key, uint32_t value);
  void add_f32(const std::string& key, float value);
  void add_bool(const std::string& key, bool value);
  void add_string(const std::string& key, const std::string& value);
  void add_i32_array(const std::string& key, const std::vector<int32_t>& values);
  void add_bool_array(const std::string& key, const std::vector<bool>& values);

  // `bytes` holds the tensor row-major in `shape` (PyTorch order), elements of `type`.
  void add_tensor(const std::string& name, const std::vector<int64_t>& shape, GgmlType type,
                  std::vector<uint8_t> bytes);

  Status write(const std::filesystem::path& path) const;

 private:
  struct TensorEntry {
    std::string name;
    std::vector<int64_t> shape;
    GgmlType type;
    std::vector<uint8_t> bytes;
  };
  std::vector<uint8_t> kv_;  // serialized key/value pairs
  uint64_t kv_count_ = 0;
  std::vector<TensorEntry> tensors_;
};

}  // namespace vllm::peers
