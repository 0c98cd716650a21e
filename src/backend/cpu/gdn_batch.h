// Internal to the GDN ops (gdn.h): validation of a GdnBatch against the rows and state slots
// an op was given, shared by the conv and delta-rule files.
#pragma once

#include <cstdint>
#include <string_view>

#include "backend/cpu/gdn.h"
#include "base/status.h"

namespace vllm::cpu::detail {

// query_start_loc has R + 1 entries starting at 0, non-decreasing and ending at num_tokens;
// state_indices has R distinct entries in [0, num_slots).
Status check_gdn_batch(std::string_view op, const GdnBatch& batch, int64_t num_tokens,
                       int64_t num_slots);

}  // namespace vllm::cpu::detail
