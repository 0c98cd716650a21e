// Copying GDN state slots: how the engine saves a request's recurrent state as a prefix-cache
// snapshot, and restores a snapshot into the slot of a request that hits it.
//
// A hybrid model's ModelCache holds, per linear-attention layer, a conv and an ssm state
// tensor whose leading dimension is the state slot (model.h). The engine uses some slots for
// running requests and the rest as snapshots of the state at block boundaries; it calls this
// between model steps, never inside one. Device-neutral contract: each pair copies the whole
// slot (every GDN layer, conv and ssm) from src to dst, pairs applied in order.
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"
#include "model/model.h"

namespace vllm {

// Copies state slot src_slots[i] to dst_slots[i] in every GDN layer's conv_state and
// ssm_state, for i in order. kInvalidArgument for lists of different lengths, a slot outside
// the cache or a pair with src == dst. A cache without GDN layers accepts only empty lists.
// State on a GPU is copied on ctx's stream (device to device, queued after the step that
// wrote it); without a context, state must be on the CPU.
Status copy_state_slots(const ExecContext& ctx, ModelCache& cache,
                        std::span<const int32_t> src_slots, std::span<const int32_t> dst_slots);
Status copy_state_slots(ModelCache& cache, std::span<const int32_t> src_slots,
                        std::span<const int32_t> dst_slots);

}  // namespace vllm
