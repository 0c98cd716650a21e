// Internal to the Gated DeltaNet .cu files: the host-side check of a GdnBatch (gdn.cuh) and
// the device-side reading of one request's rows and state slot.
//
// The batch lives in device memory, so the host checks only its tensors, never its values
// (that would need a copy back each step). Kernels therefore treat the values defensively:
// row bounds are clamped into [0, T], and a request whose slot is outside [0, num_slots) --
// padding rows use -1 -- touches no state and gets zero outputs. No value can make a kernel
// read or write out of bounds.
#pragma once

#include <cstdint>
#include <string_view>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gdn.cuh"

namespace vllm::cuda::detail {

// A checked GdnBatch as kernels see it.
struct GdnBatchView {
  const int32_t* query_start_loc = nullptr;  // [num_requests + 1]
  const int32_t* state_indices = nullptr;    // [num_requests]
  int num_requests = 0;
  int num_tokens = 0;
  int num_slots = 0;
};

// query_start_loc I32 [R + 1] and state_indices I32 [R], contiguous, on `like`'s device;
// max_query_len >= 0; T, R and num_slots within int32 (query_start_loc is I32).
Expected<GdnBatchView> check_gdn_batch(std::string_view op, const GdnBatch& batch,
                                       const Tensor& like, int64_t num_tokens, int64_t num_slots);

// Request r's rows [begin, end) and its slot (-1: none, the request is padding).
struct RequestRows {
  int begin = 0;
  int end = 0;
  int slot = -1;
};

__device__ __forceinline__ RequestRows request_rows(const GdnBatchView& b, int r) {
  RequestRows rows;
  rows.begin = min(max(b.query_start_loc[r], 0), b.num_tokens);
  rows.end = min(max(b.query_start_loc[r + 1], rows.begin), b.num_tokens);
  const int slot = b.state_indices[r];
  rows.slot = slot >= 0 && slot < b.num_slots ? slot : -1;
  return rows;
}

}  // namespace vllm::cuda::detail
