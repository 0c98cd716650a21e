// A ForwardBatch as the op layer sees it: every index tensor on the model's device, plus the
// host copies and bounds kernels need to size their grids. Built once at the start of each
// forward pass (model code never touches host vectors after this).
#pragma once

#include <span>
#include <vector>

#include "base/status.h"
#include "model/forward_batch.h"
#include "ops/exec_context.h"
#include "ops/ops.h"

namespace vllm {

struct StepInputs {
  Tensor token_ids;       // I64 [T]
  Tensor positions;       // I64 [T]
  Tensor slot_mapping;    // I64 [T]
  Tensor logits_indices;  // I64 [N]
  // GDN state slots of the requests that start at position 0 this step (their state is
  // zeroed before the first layer); empty when none.
  Tensor reset_slots;  // I32 [n]
  ops::BatchLayout layout;
  int64_t num_tokens = 0;
  int64_t num_logits = 0;
};

// Validates the batch's host-side structure (query_start_loc from 0 to T, one seq_len per
// request, seq_len >= query length, slots in range when `num_state_slots` > 0) and copies
// what the device needs into the context's workspace. `batch` must outlive the result (the
// layout's host spans point into it).
// kInvalidArgument / kOutOfRange unless `state_indices` holds one distinct slot in
// [0, num_state_slots) per request.
Status check_state_indices(std::span<const int32_t> state_indices, int64_t requests,
                           int64_t num_state_slots);

Expected<StepInputs> prepare_step(const ExecContext& ctx, const ForwardBatch& batch,
                                  int64_t num_state_slots);

}  // namespace vllm
