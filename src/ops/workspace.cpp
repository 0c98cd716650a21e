#include "ops/workspace.h"

#include <algorithm>

#include "backend/cpu/cache_memory.h"
#include "base/logging.h"

namespace vllm {
namespace {

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// CPU: huge-page memory (cache_memory.h), so that a step's first touches fault in 2 MiB at a
// time.
Expected<std::shared_ptr<Storage>> allocate_storage(size_t bytes, Device device) {
  if (device.is_cpu()) return cpu::zeroed_storage(bytes);
  return Storage::allocate(bytes, device);
}

}  // namespace

Status Workspace::reserve(size_t bytes) {
  bytes = align_up(bytes, kAlignment);
  if (capacity() >= bytes) return Status::ok();
  if (pinned_) {
    return make_error(ErrorCode::kResourceExhausted,
                      "workspace: cannot grow to {} bytes once CUDA graphs point into it", bytes);
  }
  // The old arena stays alive as long as a tensor still borrows from it.
  arena_.reset();
  VLLM_ASSIGN_OR_RETURN(arena_, allocate_storage(bytes, device_));
  return Status::ok();
}

Status Workspace::reset() {
  overflow_.clear();
  level_ = offset_ = used_ = 0;
  if (high_water_ > capacity() && !frozen_ && !pinned_) return reserve(high_water_);
  return Status::ok();
}

void Workspace::release(const Mark& m) {
  // Not a mark of this step (or of this stack): leave things as they are.
  if (m.used > used_ || m.level > level_ || (m.level == level_ && m.offset > offset_)) return;
  used_ = m.used;
  level_ = m.level;
  offset_ = m.offset;
}

Expected<Tensor> Workspace::allocate(const Shape& shape, DType dtype) {
  VLLM_ASSIGN_OR_RETURN(int64_t numel, checked_numel(shape));
  // An empty tensor still takes one aligned slot, so that it has an address in a level.
  const size_t bytes =
      align_up(std::max<size_t>(static_cast<size_t>(numel) * dtype_size(dtype), 1), kAlignment);
  auto level_size = [&](size_t level) {
    if (level == 0) return capacity();
    return level <= overflow_.size() ? overflow_[level - 1]->nbytes() : size_t{0};
  };
  // The rest of the current level, else the next level that holds `bytes` (overflow chunks
  // past the current one are kept from earlier in the step; one too small is replaced).
  if (offset_ + bytes > level_size(level_)) {
    if (frozen_) {
      return make_error(ErrorCode::kResourceExhausted,
                        "workspace: {} bytes requested with {} of {} in use while frozen", bytes,
                        used_, capacity());
    }
    if (!warned_ && arena_) {
      VLLM_LOG_DEBUG("workspace: step needs more than the {} reserved bytes; growing", capacity());
      warned_ = true;
    }
    ++level_;
    offset_ = 0;
    if (level_size(level_) < bytes) {
      VLLM_ASSIGN_OR_RETURN(auto chunk, allocate_storage(std::max(bytes, kMinChunkBytes), device_));
      if (level_ <= overflow_.size()) {
        overflow_[level_ - 1] = std::move(chunk);
      } else {
        overflow_.push_back(std::move(chunk));
      }
    }
  }
  const std::shared_ptr<Storage>& owner = level_ == 0 ? arena_ : overflow_[level_ - 1];
  void* data = static_cast<char*>(owner->data()) + offset_;
  offset_ += bytes;
  used_ += bytes;
  if (used_ > high_water_) high_water_ = used_;
  return Tensor::borrow(data, shape, dtype, device_, owner);
}

}  // namespace vllm
