// StateSlotPool: one GDN state slot per running request (see the header).
#include "engine/state_slot_pool.h"

#include "base/status.h"

namespace vllm::engine {

StateSlotPool::StateSlotPool(int32_t num_slots) : num_slots_(num_slots) {
  VLLM_CHECK_MSG(num_slots > 0, "a state slot pool needs at least one slot, got {}", num_slots);
  for (int32_t slot = 0; slot < num_slots; ++slot) free_slots_.push_back(slot);
}

std::optional<int32_t> StateSlotPool::allocate(std::string_view request_id) {
  auto it = req_to_slot_.find(request_id);
  if (it != req_to_slot_.end()) return it->second;
  if (free_slots_.empty()) return std::nullopt;
  const int32_t slot = free_slots_.front();
  free_slots_.pop_front();
  req_to_slot_.emplace(std::string(request_id), slot);
  return slot;
}

void StateSlotPool::free(std::string_view request_id) {
  auto it = req_to_slot_.find(request_id);
  if (it == req_to_slot_.end()) return;
  free_slots_.push_back(it->second);
  req_to_slot_.erase(it);
}

std::optional<int32_t> StateSlotPool::get_slot(std::string_view request_id) const {
  auto it = req_to_slot_.find(request_id);
  if (it == req_to_slot_.end()) return std::nullopt;
  return it->second;
}

}  // namespace vllm::engine
