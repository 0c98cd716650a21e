// SafetensorsFile: a validated, read-only memory mapping of one safetensors file.
//
// The mapping lives in a shared Mapping object; every Tensor handed out holds a reference,
// so weights stay valid after the SafetensorsFile (or the Checkpoint holding it) is gone and
// the kernel pages them in on first touch. Header validation is in safetensors_header.cpp.
#include "loader/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace vllm {

struct SafetensorsFile::Mapping {
  void* address = nullptr;
  size_t length = 0;

  Mapping(void* a, size_t n) : address(a), length(n) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (address != nullptr) munmap(address, length);
  }
};

namespace {

Status os_error(ErrorCode code, const std::filesystem::path& path, std::string_view what, int err) {
  return make_error(code, "{}: cannot {}: {}", path.string(), what, std::strerror(err));
}

// Closes the descriptor on every return path.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Expected<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string name = path.string();
  FdGuard fd{::open(name.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) {
    int err = errno;
    return os_error(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIoError, path, "open", err);
  }
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) return os_error(ErrorCode::kIoError, path, "stat", errno);
  if (!S_ISREG(st.st_mode)) {
    return make_error(ErrorCode::kInvalidFormat, "{}: not a regular file", name);
  }
  const auto file_size = static_cast<uint64_t>(st.st_size);

  SafetensorsFile file;
  file.path_ = path;
  if (file_size == 0) {
    // mmap refuses length 0; let the parser report the empty file.
    VLLM_ASSIGN_OR_RETURN(file.header_, parse_header({}, name));
  } else {
    void* address = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd.fd, 0);
    if (address == MAP_FAILED) return os_error(ErrorCode::kIoError, path, "mmap", errno);
    file.mapping_ = std::make_shared<Mapping>(address, file_size);
    VLLM_ASSIGN_OR_RETURN(file.header_, parse_header(file.bytes(), name));
  }
  for (size_t i = 0; i < file.header_.entries.size(); ++i) {
    file.index_.emplace(file.header_.entries[i].name, i);
  }
  return file;
}

std::span<const uint8_t> SafetensorsFile::bytes() const {
  if (!mapping_) return {};
  return {static_cast<const uint8_t*>(mapping_->address), mapping_->length};
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(header_.entries.size());
  for (const SafetensorsEntry& e : header_.entries) out.push_back(e.name);
  return out;
}

const SafetensorsEntry* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.entries[it->second];
}

Expected<Tensor> SafetensorsFile::tensor(std::string_view name) const {
  const SafetensorsEntry* entry = find(name);
  if (entry == nullptr) {
    return make_error(ErrorCode::kNotFound, "tensor '{}' not found in {}", name, path_.string());
  }
  return safetensors_entry_tensor(*entry, header_, bytes(), mapping_);
}

Tensor safetensors_entry_tensor(const SafetensorsEntry& entry, const SafetensorsHeader& header,
                                std::span<const uint8_t> file_bytes,
                                std::shared_ptr<void> keepalive) {
  VLLM_CHECK(header.data_start + entry.data_end <= file_bytes.size());
  const uint8_t* data = file_bytes.data() + header.data_start + entry.data_begin;
  Tensor view = Tensor::borrow(const_cast<uint8_t*>(data), entry.shape, entry.dtype, Device::cpu(),
                               std::move(keepalive));
  if (reinterpret_cast<uintptr_t>(data) % dtype_size(entry.dtype) != 0) {
    // Typed access to misaligned memory is undefined behaviour: hand out an aligned copy.
    return view.clone();
  }
  return view;
}

}  // namespace vllm
