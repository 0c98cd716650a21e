// zeroed_mapping (cache_memory.h): mmap of anonymous memory, unmapped with its last tensor.
#include "backend/cpu/cache_memory.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

namespace vllm::cpu {

Expected<Tensor> zeroed_mapping(const Shape& shape, DType dtype) {
  VLLM_ASSIGN_OR_RETURN(const int64_t numel, checked_numel(shape));
  const size_t nbytes = static_cast<size_t>(numel) * dtype_size(dtype);
  const size_t mapped = nbytes == 0 ? 1 : nbytes;
  void* data = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) {
    return make_error(ErrorCode::kResourceExhausted, "cannot map {} bytes of CPU memory: {}",
                      nbytes, std::strerror(errno));
  }
  std::shared_ptr<void> owner(data, [mapped](void* p) { munmap(p, mapped); });
  return Tensor::borrow(data, shape, dtype, Device::cpu(), std::move(owner));
}

}  // namespace vllm::cpu
