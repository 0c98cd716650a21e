// Writes safetensors files: small test checkpoints, tools that cut or convert weights.
//
// The output is what the Hugging Face writer produces: tensors ordered by decreasing element
// size, then by name, so that every tensor starts at an offset aligned to its element size
// (the data section itself starts 8-aligned, as the header is padded with spaces to a
// multiple of 8); the tensors tile the data section with no gaps. Non-contiguous tensors are
// written in row-major order. Only CPU tensors can be written.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "tensor/tensor.h"

namespace vllm {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// The whole file as bytes. kInvalidArgument for a duplicate, reserved ("__metadata__") or
// non-UTF-8 name, an undefined tensor or a non-CPU tensor.
Expected<std::vector<uint8_t>> serialize_safetensors(
    const NamedTensors& tensors, const std::map<std::string, std::string>& metadata = {});

// Writes the file (through a temporary name and a rename, so readers never see half a file).
Status write_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace vllm
