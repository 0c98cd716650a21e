// Huge-page weight memory for CPU models (weight_memory.h).
#include "backend/cpu/weight_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

namespace vllm::cpu {
namespace {

constexpr size_t kTensorAlign = 64;

size_t round_up(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

Expected<std::shared_ptr<void>> allocate_chunk(size_t bytes) {
  void* p = std::aligned_alloc(WeightArena::kHugePage, bytes);
  if (p == nullptr) {
    return make_error(ErrorCode::kResourceExhausted,
                      "cannot allocate {} bytes of host memory for the weights (set "
                      "VLLM_CPU_MMAP_WEIGHTS=1 to read them from the checkpoint's mapping)",
                      bytes);
  }
#if defined(MADV_HUGEPAGE)
  madvise(p, bytes, MADV_HUGEPAGE);  // advice only: without THP the copy still works
#endif
  return std::shared_ptr<void>(p, std::free);
}

}  // namespace

bool weights_in_huge_pages() {
  const char* env = std::getenv("VLLM_CPU_MMAP_WEIGHTS");
  return env == nullptr || *env == '\0' || std::string(env) == "0";
}

Expected<Tensor> WeightArena::allocate(const Shape& shape, DType dtype) {
  VLLM_ASSIGN_OR_RETURN(int64_t numel, checked_numel(shape));
  const size_t nbytes = static_cast<size_t>(numel) * dtype_size(dtype);
  const size_t bytes = round_up(std::max<size_t>(nbytes, 1), kTensorAlign);
  std::lock_guard<std::mutex> lock(mutex_);
  std::shared_ptr<void> owner;
  char* dst = nullptr;
  if (bytes > kChunkBytes / 4) {
    VLLM_ASSIGN_OR_RETURN(owner, allocate_chunk(round_up(bytes, kHugePage)));
    dst = static_cast<char*>(owner.get());
  } else {
    if (chunk_ == nullptr || used_ + bytes > size_) {
      VLLM_ASSIGN_OR_RETURN(chunk_, allocate_chunk(kChunkBytes));
      base_ = static_cast<char*>(chunk_.get());
      used_ = 0;
      size_ = kChunkBytes;
    }
    owner = chunk_;
    dst = base_ + used_;
    used_ += bytes;
  }
  return Tensor::borrow(dst, shape, dtype, Device::cpu(), std::move(owner));
}

Expected<Tensor> WeightArena::copy(const Tensor& src) {
  if (!src.defined() || !src.device().is_cpu() || !src.is_contiguous() || src.nbytes() == 0) {
    return src;
  }
  VLLM_ASSIGN_OR_RETURN(Tensor out, allocate(src.shape(), src.dtype()));
  std::memcpy(out.data_ptr(), src.data_ptr(), src.nbytes());
  return out;
}

}  // namespace vllm::cpu
