// Gated DeltaNet on the GPU: the counterparts of the CPU ops in src/backend/cpu/gdn.h (same
// semantics and argument layouts; see there), over a varlen flat batch of requests that
// continue from per-request state slots.
//
// Request r owns rows [query_start_loc[r], query_start_loc[r + 1]) and state slot
// state_indices[r]. The conv and recurrent states are F32, BF16 or F16 (each its own; read
// into f32 once per call and request, rounded once when stored: gdn_state.cuh); activations
// F32 or BF16; g and beta F32. Each op reads the slot as left by the request's previous tokens
// and writes it back, so a prefill in chunks equals one call. Slots of one batch are distinct.
//
// The batch's values stay on the device and are not validated by the host. A request whose
// slot is outside [0, num_slots) -- padding rows use -1 -- reads and writes no state and gets
// zero outputs; row bounds outside [0, T] are clamped. No batch value makes a kernel access
// memory out of bounds. Outputs and states must not share memory with the inputs (refused),
// except where an op says out may be x itself. Implementations: gdn_conv.cu, gdn_rule.cu,
// gdn.cu (the rest).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "base/status.h"
#include "tensor/tensor.h"

namespace vllm::cuda {

struct GdnBatch {
  Tensor query_start_loc;     // I32 [R + 1] on the device
  Tensor state_indices;       // I32 [R] on the device
  int32_t max_query_len = 0;  // host-known bound, for the grid
  // The caller vouches that the kernel launched just before the op wrote neither these arrays
  // nor the states the op reads (docs/design.md, launch_pdl): the conv at decode and the wide
  // delta rule kernel then load them before pdl_wait. The model's layers do (ops::): the
  // arrays are copied from the host before a step's kernels and other kernels run between two
  // calls on the same states. Ops called back to back on the same states must not.
  bool states_settled = false;
};

// Causal depthwise conv1d + SiLU continuing from conv_state (cpu::causal_conv1d).
// x [T, C] (row stride allowed); weight F32/BF16 [C, K]; bias [C] or undefined;
// conv_state F32/BF16/F16 [num_slots, C, K - 1]; out [T, C] in x's dtype (may alias x).
Status causal_conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                     const GdnBatch& batch, Tensor& conv_state, Tensor& out, cudaStream_t stream);

// g = -exp(A_log) * softplus(a + dt_bias); beta = sigmoid(b) (cpu::gdn_gating).
// a, b [T, Hv] (row strides allowed) in the activation dtype; A_log, dt_bias F32/BF16 [Hv];
// g, beta F32 [T, Hv].
Status gdn_gating(const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias,
                  Tensor& g, Tensor& beta, cudaStream_t stream);

struct GatedDeltaRuleParams {
  bool use_qk_l2norm = true;
  float l2norm_eps = 1e-6f;
  float scale = 0.0f;  // 0: 1 / sqrt(Dk)
  // BF16 requests of at least this many rows (and Dk <= 128) run in the chunked tensor-core
  // form; the others token by token. 0: the default (32); INT_MAX: always token by token.
  int chunked_min_rows = 0;
  // Device scratch of gated_delta_rule_workspace_size() bytes, needed when that is not 0 (the
  // chunked form's per-chunk products). Refused when missing or too small.
  Tensor workspace;
};

// Bytes of workspace gated_delta_rule needs for these arguments (0: none): the chunked form's
// per-chunk products (q, k, k^T normalised per key head; W, U~ per value head, in BF16; G) for
// the most chunks the batch can hold, (T + 63 min(R, T / 32)) / 64: ~1.8 MB a chunk at
// Qwen3.5-4B's heads, 28 KB a token when the chunks are full.
size_t gated_delta_rule_workspace_size(const Tensor& q, const Tensor& state, const GdnBatch& batch,
                                       const GatedDeltaRuleParams& params);

// The gated delta rule (cpu::gated_delta_rule): token by token per request, or, for BF16
// requests of chunked_min_rows rows or more, in chunks of 64 tokens on tensor cores (the same
// function to BF16 rounding: its products round T, W, U, the state's copy and q, k, v to
// BF16). q, k [T, Hk * Dk]; v [T, Hv * Dv] (row strides allowed); g, beta F32 [T, Hv];
// state F32/BF16/F16 [num_slots, Hv, Dk, Dv] updated in place; out [T, Hv * Dv] in q's dtype.
// Dk is 1 .. 256 (larger is refused: the state column lives in registers), Dv any size.
Status gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                        const Tensor& beta, const GdnBatch& batch,
                        const GatedDeltaRuleParams& params, Tensor& state, Tensor& out,
                        cudaStream_t stream);

// out[t, h, :] = x / sqrt(mean(x^2) + eps) * weight * silu(z[t, h, :]) per head of
// D = weight.size(0) values (cpu::gated_rms_norm). x, z [T, H * D] (row strides allowed);
// weight F32/BF16 [D]; out [T, H * D] (may alias x).
Status gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& weight, float eps,
                      Tensor& out, cudaStream_t stream);

}  // namespace vllm::cuda
