// Internal to the Gated DeltaNet .cu files: the host-side check of a GdnBatch (gdn.cuh), the
// device-side reading of one request's rows and state slot, and the host-side test of
// whether two row views share memory (outputs that overlap inputs are refused, except where
// an op allows out to be the input itself).
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

// Some byte of `a` (elements of a_size bytes) is also a byte of `b`. Exact for views with
// one row stride (column slices of one tensor that interleave are disjoint); views of
// different row strides whose address ranges intersect count as overlapping.
bool rows_overlap(const Rows& a, size_t a_size, const Rows& b, size_t b_size);
// The same elements in the same places: an op that allows out to alias an input needs this.
bool same_rows(const Rows& a, const Rows& b);
// An error naming `out_arg` when it overlaps `in_arg` (and, if allow_same, is not in itself).
Status check_no_overlap(std::string_view op, std::string_view out_arg, const Rows& out,
                        size_t out_size, std::string_view in_arg, const Rows& in, size_t in_size,
                        bool allow_same = false);

// Request r's rows [begin, end) and its slot (-1: none, the request is padding).
struct RequestRows {
  int begin = 0;
  int end = 0;
  int slot = -1;
};

// kL2: through L2 only (ld.global.cg), for a read before pdl_wait: the batch arrays are
// copied from the host before the step's kernels (docs/design.md, launch_pdl).
template <bool kL2 = false>
__device__ __forceinline__ RequestRows request_rows(const GdnBatchView& b, int r) {
  auto load = [](const int32_t* p) {
    if constexpr (kL2) return __ldcg(p);
    return *p;
  };
  RequestRows rows;
  rows.begin = min(max(load(b.query_start_loc + r), 0), b.num_tokens);
  rows.end = min(max(load(b.query_start_loc + r + 1), rows.begin), b.num_tokens);
  const int slot = load(b.state_indices + r);
  rows.slot = slot >= 0 && slot < b.num_slots ? slot : -1;
  return rows;
}

}  // namespace vllm::cuda::detail
