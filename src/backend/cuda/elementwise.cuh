// Small memory-bound ops of the decoder on the GPU: the CUDA counterparts of the CPU ops in
// src/backend/cpu/ops.h (same semantics; see there) and of the host loops the models used to
// run between ops (attention output gate, shared-expert gate, logits row gather, GDN state
// slot reset).
//
// Conventions for every op in this backend (also rope.cuh, cache.cuh, attention.cuh,
// gdn.cuh, gemm.cuh): activations are F32 or BF16, all activation arguments of one call in
// one dtype; weights F32 or BF16 (F16 where noted); arithmetic in f32, each result rounded
// once on store. A 2-D activation may have a row stride larger than its width (a column
// slice of a fused projection); other ranks must be contiguous. Ops launch asynchronously on
// `stream` and return argument and launch errors as Status; they never allocate.
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "tensor/tensor.h"

namespace vllm::cuda {

// out[t, :] = table[token_ids[t], :]. token_ids I32/I64 [T]; table F32/BF16 [V, H];
// out F32/BF16 [T, H]. An id outside [0, V) cannot be reported from the device: the row is
// written as zeros (the engine validates ids before they reach the model).
Status embedding(const Tensor& token_ids, const Tensor& table, Tensor& out, cudaStream_t stream);

// dst += src. dst, src [T, H] of one dtype.
Status add_inplace(Tensor& dst, const Tensor& src, cudaStream_t stream);

// out[t, i] = silu(x[t, i]) * x[t, I + i]. x [T, 2I]; out [T, I].
Status silu_and_mul(const Tensor& x, Tensor& out, cudaStream_t stream);

// Gated attention's q_proj output holds, per token and head, head_dim query values then
// head_dim gate values: q_gate [T, Hq * 2 * D] -> query [T, Hq * D], gate [T, Hq * D].
Status split_q_gate(const Tensor& q_gate, int64_t head_dim, Tensor& query, Tensor& gate,
                    cudaStream_t stream);

// x *= sigmoid(gate), elementwise. x, gate [T, N].
Status sigmoid_gate_mul(Tensor& x, const Tensor& gate, cudaStream_t stream);

// out[t, :] += sigmoid(gate[t]) * x[t, :]: the shared expert's gated add.
// out, x [T, H]; gate [T, 1] (or [T]).
Status add_sigmoid_gated(Tensor& out, const Tensor& x, const Tensor& gate, cudaStream_t stream);

// out[i, :] = x[rows[i], :]. x [T, H]; rows I64 [N] on the device, each in [0, T) (a row
// outside it is written as zeros, as in embedding); out [N, H] (F32 or x's dtype: the gather
// may widen BF16 to F32).
Status gather_rows(const Tensor& x, const Tensor& rows, Tensor& out, cudaStream_t stream);

// For each slot s in `slots` (I32 or I64 [N] on the device; entries outside
// [0, num_slots), e.g. -1 padding, skipped), zeroes state[s, ...]. state [num_slots, ...]
// F32 (also BF16/F16), contiguous. Resets the GDN conv and recurrent state of requests that
// start at position 0.
Status zero_slots(Tensor& state, const Tensor& slots, cudaStream_t stream);

// Converts a contiguous tensor between F32, BF16 and F16 (same element count), e.g. a
// checkpoint's F32 weight into the model's BF16. Round to nearest even.
Status convert(const Tensor& src, Tensor& dst, cudaStream_t stream);

// Fills a contiguous F32, BF16, F16 or F8_E4M3 tensor with uniform random values in [low,
// high) from a counter-based generator: element i is vllm::counter_uniform(seed, i, low,
// high) (base/counter_rng.h) rounded to the dtype (e4m3: to nearest, saturated to +-448), so
// host code can reproduce it exactly.
// --load-format dummy weights on the device.
Status fill_uniform(Tensor& t, float low, float high, uint64_t seed, cudaStream_t stream);

}  // namespace vllm::cuda
