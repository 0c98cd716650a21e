// zeroed_mapping / zeroed_storage (cache_memory.h): mmap of anonymous memory, unmapped with
// its last user.
#include "backend/cpu/cache_memory.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>

namespace vllm::cpu {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// `bytes` of fresh anonymous memory; from 2 MiB up, 2 MiB-aligned and marked MADV_HUGEPAGE,
// so that first touches fault in a huge page at a time (the kernel's "madvise" THP mode
// honours the advice; without THP it is ignored and 4 KiB pages are used as before).
void* map_zeroed(size_t bytes) {
  if (bytes < kHugePage) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
  }
  void* raw =
      mmap(nullptr, bytes + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) munmap(raw, aligned - start);
  const size_t tail = start + bytes + kHugePage - (aligned + bytes);
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  void* p = reinterpret_cast<void*>(aligned);
  madvise(p, bytes, MADV_HUGEPAGE);  // advice only
  return p;
}

// map_zeroed(nbytes) (at least one byte), unmapped when the last owner goes.
Expected<std::shared_ptr<void>> owned_mapping(size_t nbytes) {
  const size_t mapped = nbytes == 0 ? 1 : nbytes;
  void* data = map_zeroed(mapped);
  if (data == nullptr) {
    return make_error(ErrorCode::kResourceExhausted, "cannot map {} bytes of CPU memory: {}",
                      nbytes, std::strerror(errno));
  }
  return std::shared_ptr<void>(data, [mapped](void* p) { munmap(p, mapped); });
}

}  // namespace

Expected<Tensor> zeroed_mapping(const Shape& shape, DType dtype) {
  VLLM_ASSIGN_OR_RETURN(const int64_t numel, checked_numel(shape));
  VLLM_ASSIGN_OR_RETURN(std::shared_ptr<void> owner,
                        owned_mapping(static_cast<size_t>(numel) * dtype_size(dtype)));
  void* data = owner.get();
  return Tensor::borrow(data, shape, dtype, Device::cpu(), std::move(owner));
}

Expected<std::shared_ptr<Storage>> zeroed_storage(size_t nbytes) {
  VLLM_ASSIGN_OR_RETURN(std::shared_ptr<void> owner, owned_mapping(nbytes));
  void* data = owner.get();
  return std::make_shared<Storage>(data, nbytes, Device::cpu(), std::move(owner));
}

}  // namespace vllm::cpu
