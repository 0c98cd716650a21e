// copy_state_slots: see state_copy.h.
#include "model/state_copy.h"

#include <cstring>

#include "ops/ops.h"

namespace vllm {

Status copy_state_slots(ModelCache& cache, std::span<const int32_t> src_slots,
                        std::span<const int32_t> dst_slots) {
  return copy_state_slots(ExecContext{}, cache, src_slots, dst_slots);
}

Status copy_state_slots(const ExecContext& ctx, ModelCache& cache,
                        std::span<const int32_t> src_slots, std::span<const int32_t> dst_slots) {
  if (src_slots.size() != dst_slots.size()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "copy_state_slots: {} source slots but {} destination slots",
                      src_slots.size(), dst_slots.size());
  }
  if (src_slots.empty()) return Status::ok();
  if (cache.conv_state.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "copy_state_slots: this model keeps no GDN state slots");
  }
  const int64_t num_slots = cache.conv_state.front().size(0);
  for (size_t i = 0; i < src_slots.size(); ++i) {
    const int32_t src = src_slots[i], dst = dst_slots[i];
    if (src < 0 || src >= num_slots || dst < 0 || dst >= num_slots || src == dst) {
      return make_error(ErrorCode::kInvalidArgument,
                        "copy_state_slots: pair {} copies slot {} to slot {}; slots are distinct "
                        "and in [0, {})",
                        i, src, dst, num_slots);
    }
  }
  for (std::vector<Tensor>* states : {&cache.conv_state, &cache.ssm_state}) {
    for (Tensor& state : *states) {
      if (!state.device().is_cpu() && state.device() != ctx.device) {
        return make_error(ErrorCode::kInvalidArgument,
                          "copy_state_slots: GDN state on {} needs an execution context there",
                          state.device().to_string());
      }
      if (state.size(0) != num_slots || !state.is_contiguous()) {
        return make_error(ErrorCode::kInvalidArgument,
                          "copy_state_slots: state {} is not contiguous with {} slots",
                          state.to_string(), num_slots);
      }
    }
  }
  for (std::vector<Tensor>* states : {&cache.conv_state, &cache.ssm_state}) {
    for (Tensor& state : *states) {
      if (!state.device().is_cpu()) {
        for (size_t i = 0; i < src_slots.size(); ++i) {
          Tensor dst = state.slice(0, dst_slots[i], dst_slots[i] + 1);
          VLLM_RETURN_IF_ERROR(
              ops::copy(ctx, state.slice(0, src_slots[i], src_slots[i] + 1), dst));
        }
        continue;
      }
      const size_t slot_bytes = state.nbytes() / static_cast<size_t>(num_slots);
      auto* base = static_cast<std::byte*>(state.data_ptr());
      for (size_t i = 0; i < src_slots.size(); ++i) {
        std::memcpy(base + static_cast<size_t>(dst_slots[i]) * slot_bytes,
                    base + static_cast<size_t>(src_slots[i]) * slot_bytes, slot_bytes);
      }
    }
  }
  return Status::ok();
}

}  // namespace vllm
