// GGUF v3 layout: magic "GGUF", version, tensor count, kv count, the kv pairs, the tensor
// infos (name, dims innermost first, type, offset into the data section), padding to the
// alignment, the data section.
#include "gguf_writer.h"

#include <cstring>
#include <fstream>

namespace vllm::peers {
namespace {

constexpr uint64_t kAlignment = 32;  // GGUF's default (general.alignment absent)

// gguf_type values.
constexpr uint32_t kTypeU32 = 4, kTypeI32 = 5, kTypeF32 = 6, kTypeBool = 7, kTypeString = 8,
                   kTypeArray = 9;

template <typename T>
void put(std::vector<uint8_t>& out, T value) {
  const auto* p = reinterpret_cast<const uint8_t*>(&value);
  out.insert(out.end(), p, p + sizeof(T));
}

void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

uint64_t align_up(uint64_t n) {
  return (n + kAlignment - 1) / kAlignment * kAlignment;
}

}  // namespace

void GgufWriter::add_u32(const std::string& key, uint32_t value) {
  put_string(kv_, key);
  put(kv_, kTypeU32);
  put(kv_, value);
  ++kv_count_;
}

void GgufWriter::add_f32(const std::string& key, float value) {
  put_string(kv_, key);
  put(kv_, kTypeF32);
  put(kv_, value);
  ++kv_count_;
}

void GgufWriter::add_bool(const std::string& key, bool value) {
  put_string(kv_, key);
  put(kv_, kTypeBool);
  put<uint8_t>(kv_, value ? 1 : 0);
  ++kv_count_;
}

void GgufWriter::add_string(const std::string& key, const std::string& value) {
  put_string(kv_, key);
  put(kv_, kTypeString);
  put_string(kv_, value);
  ++kv_count_;
}

void GgufWriter::add_i32_array(const std::string& key, const std::vector<int32_t>& values) {
  put_string(kv_, key);
  put(kv_, kTypeArray);
  put(kv_, kTypeI32);
  put<uint64_t>(kv_, values.size());
  for (int32_t v : values) put(kv_, v);
  ++kv_count_;
}

void GgufWriter::add_bool_array(const std::string& key, const std::vector<bool>& values) {
  put_string(kv_, key);
  put(kv_, kTypeArray);
  put(kv_, kTypeBool);
  put<uint64_t>(kv_, values.size());
  for (bool v : values) put<uint8_t>(kv_, v ? 1 : 0);
  ++kv_count_;
}

void GgufWriter::add_tensor(const std::string& name, const std::vector<int64_t>& shape,
                            GgmlType type, std::vector<uint8_t> bytes) {
  tensors_.push_back({name, shape, type, std::move(bytes)});
}

Status GgufWriter::write(const std::filesystem::path& path) const {
  std::vector<uint8_t> head;
  put<uint32_t>(head, 0x46554747u);  // "GGUF"
  put<uint32_t>(head, 3);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, kv_count_);
  head.insert(head.end(), kv_.begin(), kv_.end());
  uint64_t offset = 0;
  for (const TensorEntry& t : tensors_) {
    put_string(head, t.name);
    put<uint32_t>(head, static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) put<uint64_t>(head, *it);
    put<uint32_t>(head, static_cast<uint32_t>(t.type));
    put<uint64_t>(head, offset);
    offset = align_up(offset + t.bytes.size());
  }
  head.resize(align_up(head.size()), 0);

  std::filesystem::path tmp = path;
  tmp += ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) return make_error(ErrorCode::kIoError, "cannot write {}", tmp.string());
  out.write(reinterpret_cast<const char*>(head.data()), static_cast<std::streamsize>(head.size()));
  const std::vector<char> zeros(kAlignment, 0);
  for (const TensorEntry& t : tensors_) {
    out.write(reinterpret_cast<const char*>(t.bytes.data()),
              static_cast<std::streamsize>(t.bytes.size()));
    out.write(zeros.data(),
              static_cast<std::streamsize>(align_up(t.bytes.size()) - t.bytes.size()));
  }
  out.close();
  if (!out) return make_error(ErrorCode::kIoError, "writing {} failed", tmp.string());
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return make_error(ErrorCode::kIoError, "rename to {}: {}", path.string(), ec.message());
  return Status::ok();
}

}  // namespace vllm::peers
