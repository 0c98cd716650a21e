// Where CPU models keep their weights: in anonymous memory backed by transparent huge pages,
// not in the page cache's mapping of the checkpoint.
//
// Decode reads every weight once per step, so the weights' pages cycle through the TLB each
// step; with 4 KiB pages (a file mapping) the page walks cost as much as the arithmetic (the
// demo model's decode step measured about twice as long from the mapping as from huge-page
// memory). The CPU runtime owns a WeightArena (ExecContext::weight_arena): at load every
// weight is copied into it, and weights the model builds (fused projections, stacked
// experts) are allocated from it. Tensors are packed into 2 MiB-aligned chunks marked
// MADV_HUGEPAGE (the kernel's "madvise" THP mode honours it); each tensor keeps its chunk
// alive. VLLM_CPU_MMAP_WEIGHTS=1 keeps the weights in the mapping instead (no arena, no copy:
// less memory when the checkpoint is larger than RAM).
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>

#include "base/status.h"
#include "tensor/tensor.h"

namespace vllm::cpu {

// False when VLLM_CPU_MMAP_WEIGHTS is set to a non-empty value other than "0".
bool weights_in_huge_pages();

class WeightArena {
 public:
  // An uninitialised CPU tensor in huge-page memory.
  Expected<Tensor> allocate(const Shape& shape, DType dtype);
  // A copy of `src` (a contiguous CPU tensor) in huge-page memory; other tensors are
  // returned as they are.
  Expected<Tensor> copy(const Tensor& src);

  // Chunk size for small tensors; larger tensors get a chunk of their own.
  static constexpr size_t kChunkBytes = size_t{32} << 20;
  static constexpr size_t kHugePage = size_t{2} << 20;

 private:
  std::mutex mutex_;
  std::shared_ptr<void> chunk_;
  char* base_ = nullptr;
  size_t used_ = 0, size_ = 0;
};

}  // namespace vllm::cpu
