// Structured outputs on the GPU: the logits of the tokens a request's grammar disallows are
// set to -inf in place, before the sampler reads them (vLLM applies its grammar bitmask to
// the logits in place the same way). The CPU counterpart is vllm::apply_token_bitmask
// (src/engine/sampling_ops.h), with the same rule: token i of a row is kept when bit i % 32
// of word i / 32 of the row's mask is set; tokens past the mask's end are disallowed too.
//
// TokenBitmaskApplier keeps a pinned host buffer and a device buffer that grow with the
// largest step (cudaMalloc only then). A step packs the rows that carry a mask (their row
// index, then their words) into the pinned buffer and queues one host->device copy and one
// kernel on the caller's stream; it does not wait for them. An event recorded after the copy
// makes the next step wait before it rewrites the pinned buffer.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>

#include "base/status.h"
#include "tensor/tensor.h"

namespace vllm::cuda {

// One row of the logits and its allowed-token mask (host memory, valid for the call).
struct RowBitmask {
  int64_t row = 0;
  std::span<const uint32_t> words;
};

class TokenBitmaskApplier {
 public:
  explicit TokenBitmaskApplier(Device device);
  ~TokenBitmaskApplier();
  TokenBitmaskApplier(const TokenBitmaskApplier&) = delete;
  TokenBitmaskApplier& operator=(const TokenBitmaskApplier&) = delete;

  // logits F32 [R, V] on this applier's device (unit stride along V, row stride >= V), edited
  // in place: for each entry of `masks`, the tokens of row `row` its words disallow become
  // -inf; rows without an entry are not touched. Rows must be in [0, R); masks may differ in
  // length (a shorter mask disallows more). kInvalidArgument for bad arguments.
  Status apply(const Tensor& logits, std::span<const RowBitmask> masks, cudaStream_t stream);

  Device device() const { return device_; }

 private:
  struct Buffers;
  Device device_;
  std::unique_ptr<Buffers> buffers_;
};

// The kernel's launcher, for callers that keep the packed masks on the device themselves.
// logits: rows of `vocab` floats, `row_stride` apart; rows I32 [num_rows] (indices into the
// logits); masks U32 [num_rows, words_per_row] (words_per_row may be 0: all disallowed).
Status launch_apply_token_bitmask(float* logits, int64_t row_stride, int32_t vocab,
                                  const int32_t* rows, const uint32_t* masks, int32_t words_per_row,
                                  int32_t num_rows, cudaStream_t stream);

}  // namespace vllm::cuda
