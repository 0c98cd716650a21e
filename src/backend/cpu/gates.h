// CPU reference ops for the small steps models used to write as host loops: the gated
// attention's q/gate split and output gate, the shared expert's sigmoid-gated add, the
// logits row gather and the GDN state-slot reset. The CUDA backend has the same ops
// (src/backend/cuda/elementwise.cuh); the op layer (src/ops) dispatches between them.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "tensor/tensor.h"

namespace vllm::cpu {

// q_gate F32 [T, Hq * 2 * D] (per head: D query values, then D gate values; strided rows
// allowed) -> query, gate F32 [T, Hq * D].
Status split_q_gate(const Tensor& q_gate, int64_t head_dim, Tensor& query, Tensor& gate);

// x *= sigmoid(gate). x, gate F32 [T, N].
Status sigmoid_gate_mul(Tensor& x, const Tensor& gate);

// out[t, :] += sigmoid(gate[t]) * x[t, :]. out, x F32 [T, H]; gate F32 [T, 1] or [T].
Status add_sigmoid_gated(Tensor& out, const Tensor& x, const Tensor& gate);

// out[i, :] = x[rows[i], :]. x F32 [T, H]; rows I64 [N] (each in [0, T), else kOutOfRange);
// out F32 [N, H].
Status gather_rows(const Tensor& x, const Tensor& rows, Tensor& out);

// Zeroes state[s, ...] for every non-negative s in slots (I32 [N]; s < num_slots).
// state F32/BF16/F16 [num_slots, ...] contiguous.
Status zero_slots(Tensor& state, const Tensor& slots);

}  // namespace vllm::cpu
