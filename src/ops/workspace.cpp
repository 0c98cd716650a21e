#include "ops/workspace.h"

#include "base/logging.h"

namespace vllm {
namespace {

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

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
  VLLM_ASSIGN_OR_RETURN(arena_, Storage::allocate(bytes, device_));
  return Status::ok();
}

Status Workspace::reset() {
  overflow_.clear();
  used_ = 0;
  if (high_water_ > capacity() && !frozen_ && !pinned_) return reserve(high_water_);
  return Status::ok();
}

void Workspace::release(const Mark& m) {
  if (m.used > used_ || m.overflow_count > overflow_.size()) return;  // not a mark of this step
  used_ = m.used;
  overflow_.resize(m.overflow_count);
}

Expected<Tensor> Workspace::allocate(const Shape& shape, DType dtype) {
  VLLM_ASSIGN_OR_RETURN(int64_t numel, checked_numel(shape));
  const size_t bytes = align_up(static_cast<size_t>(numel) * dtype_size(dtype), kAlignment);
  std::shared_ptr<Storage> owner;
  void* data = nullptr;
  if (arena_ && used_ + bytes <= arena_->nbytes()) {
    owner = arena_;
    data = static_cast<char*>(arena_->data()) + used_;
  } else {
    if (frozen_) {
      return make_error(ErrorCode::kResourceExhausted,
                        "workspace: {} bytes requested with {} of {} in use while frozen", bytes,
                        used_, capacity());
    }
    if (!warned_ && arena_) {
      VLLM_LOG_DEBUG("workspace: step needs more than the {} reserved bytes; growing", capacity());
      warned_ = true;
    }
    VLLM_ASSIGN_OR_RETURN(owner, Storage::allocate(bytes, device_));
    data = owner->data();
    overflow_.push_back(owner);
  }
  used_ += bytes;
  if (used_ > high_water_) high_water_ = used_;
  return Tensor::borrow(data, shape, dtype, device_, owner);
}

}  // namespace vllm
