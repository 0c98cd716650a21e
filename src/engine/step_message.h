// The messages rank 0 sends the other ranks of a tensor-parallel group through the step
// channel (parallel/step_channel.h), in the order its engine makes the calls: allocate the
// caches, run a step, shut down. A step carries the model's flat batch and the GDN state
// copies around it (forward_step.h) -- what every rank needs to make the same forward pass
// on its shard -- never a request or the scheduler's state.
//
// The encoding is a byte string: a magic and version, the kind, then length-prefixed arrays
// in host byte order (the ranks run one build on little-endian machines). Decoding checks
// every length against what is left, so a truncated or corrupt message is an error, never
// an out-of-bounds read or a huge allocation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "engine/forward_step.h"
#include "model/model.h"

namespace vllm::engine {

enum class StepKind : uint8_t {
  kInitCache = 1,  // allocate the caches of `cache`
  kForward = 2,    // run `forward`
  kShutdown = 3,   // exit
};

struct StepMessage {
  StepKind kind = StepKind::kForward;
  CacheConfig cache;    // kInitCache
  ForwardStep forward;  // kForward
};

std::string encode_step_message(const StepMessage& message);
Expected<StepMessage> decode_step_message(std::string_view bytes);

}  // namespace vllm::engine
