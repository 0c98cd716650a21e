// Safetensors serialisation (see safetensors_writer.h for the layout produced).
#include "loader/safetensors_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

namespace vllm {
namespace {

using nlohmann::ordered_json;

struct Planned {
  const std::string* name;
  Tensor tensor;  // contiguous
};

}  // namespace

Expected<std::vector<uint8_t>> serialize_safetensors(
    const NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  std::vector<Planned> plan;
  plan.reserve(tensors.size());
  std::set<std::string_view> seen;
  for (const auto& [name, tensor] : tensors) {
    if (name == "__metadata__") {
      return make_error(ErrorCode::kInvalidArgument,
                        "tensor name '__metadata__' is reserved by the safetensors format");
    }
    if (!seen.insert(name).second) {
      return make_error(ErrorCode::kInvalidArgument, "tensor '{}' is listed twice", name);
    }
    if (!tensor.defined()) {
      return make_error(ErrorCode::kInvalidArgument, "tensor '{}' is undefined", name);
    }
    if (!tensor.device().is_cpu()) {
      return make_error(ErrorCode::kInvalidArgument,
                        "tensor '{}' is on {}; copy it to the CPU before writing", name,
                        tensor.device().to_string());
    }
    plan.push_back({&name, tensor.is_contiguous() ? tensor : tensor.clone()});
  }
  std::sort(plan.begin(), plan.end(), [](const Planned& a, const Planned& b) {
    if (a.tensor.element_size() != b.tensor.element_size()) {
      return a.tensor.element_size() > b.tensor.element_size();
    }
    return *a.name < *b.name;
  });

  ordered_json header = ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const Planned& p : plan) {
    const uint64_t end = offset + p.tensor.nbytes();
    header[*p.name] = {{"dtype", dtype_name(p.tensor.dtype())},
                       {"shape", p.tensor.shape()},
                       {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const ordered_json::exception& e) {  // a name or metadata string is not UTF-8
    return make_error(ErrorCode::kInvalidArgument, "cannot write safetensors header: {}", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  std::vector<uint8_t> out;
  out.reserve(8 + text.size() + offset);
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  out.insert(out.end(), text.begin(), text.end());
  for (const Planned& p : plan) {
    const auto* data = static_cast<const uint8_t*>(p.tensor.data_ptr());
    out.insert(out.end(), data, data + p.tensor.nbytes());
  }
  return out;
}

Status write_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                         const std::map<std::string, std::string>& metadata) {
  VLLM_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, serialize_safetensors(tensors, metadata));
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return make_error(ErrorCode::kIoError, "{}: cannot create: {}", tmp.string(),
                      std::strerror(errno));
  }
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    std::remove(tmp.c_str());
    return make_error(ErrorCode::kIoError, "{}: write failed (disk full?)", tmp.string());
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    return make_error(ErrorCode::kIoError, "{}: cannot rename {} to it: {}", path.string(),
                      tmp.string(), std::strerror(err));
  }
  return Status::ok();
}

}  // namespace vllm
