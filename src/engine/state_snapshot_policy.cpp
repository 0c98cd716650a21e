// Snapshot positions of a request; see state_snapshot_policy.h.
#include "engine/state_snapshot_policy.h"

#include <algorithm>

namespace vllm::engine {
namespace {

int64_t round_down(int64_t value, int64_t multiple) {
  return value / multiple * multiple;
}

// The last block boundary of the prompt, and of all tokens so far.
int64_t prompt_end(const StateSnapshotPolicy& policy, const SnapshotRequestView& r) {
  return round_down(r.num_prompt_tokens, policy.block_size);
}
int64_t tokens_end(const StateSnapshotPolicy& policy, const SnapshotRequestView& r) {
  return round_down(r.num_tokens, policy.block_size);
}

}  // namespace

std::optional<int64_t> next_snapshot_position(const StateSnapshotPolicy& policy,
                                              const SnapshotRequestView& r, int64_t computed) {
  std::optional<int64_t> next;
  auto consider = [&](int64_t position) {
    if (position > computed && position <= r.num_tokens) {
      next = next.has_value() ? std::min(*next, position) : position;
    }
  };
  const int64_t last_prompt = prompt_end(policy, r);
  consider(last_prompt);
  if (policy.interval > 0) {
    const int64_t first_interval = round_down(computed, policy.interval) + policy.interval;
    if (first_interval <= last_prompt) consider(first_interval);
  }
  if (r.junction > 0 && r.junction % policy.block_size == 0) consider(r.junction);
  const int64_t last = tokens_end(policy, r);
  if (last > last_prompt) consider(last);
  return next;
}

SnapshotKind snapshot_kind_at(const StateSnapshotPolicy& policy, const SnapshotRequestView& r,
                              int64_t end) {
  if (end <= 0 || end % policy.block_size != 0 || end > r.num_tokens) return SnapshotKind::kNone;
  const int64_t last_prompt = prompt_end(policy, r);
  if (end > last_prompt) {
    return end == tokens_end(policy, r) || end == r.junction ? SnapshotKind::kOutput
                                                             : SnapshotKind::kNone;
  }
  if (end == last_prompt || end == r.junction ||
      (policy.interval > 0 && end % policy.interval == 0)) {
    return SnapshotKind::kPrompt;
  }
  return SnapshotKind::kNone;
}

}  // namespace vllm::engine
