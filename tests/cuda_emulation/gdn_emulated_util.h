// Helpers of the emulated Gated DeltaNet tests (test_gdn_emulated.cpp,
// test_gdn_state_emulated.cpp): host tensors labelled CUDA for the emulated kernels, the delta
// rule's workspace poisoned with NaN, the model's gating values, and one emulated call of
// cuda::gated_delta_rule.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/gdn.h"
#include "backend/cuda/gdn.cuh"
#include "cuda/cuda_test_util.h"

namespace vllm::gdn_emu {

inline Tensor as_cuda(const Tensor& host) {
  return Tensor::borrow(host.data_ptr(), host.shape(), host.dtype(), Device::cuda(), nullptr);
}

// The op's workspace for these arguments in host memory labelled CUDA, filled with 0xff bytes
// (NaN in BF16 and F32) so that a read of anything the kernels did not write shows.
inline Tensor workspace(const Tensor& q, const Tensor& state, const cuda::GdnBatch& batch,
                        const cuda::GatedDeltaRuleParams& params, Tensor& host) {
  const size_t bytes = cuda::gated_delta_rule_workspace_size(q, state, batch, params);
  if (bytes == 0) return Tensor();
  host = Tensor::empty({static_cast<int64_t>(bytes)}, DType::kU8);
  std::memset(host.data_ptr(), 0xff, bytes);
  return as_cuda(host);
}

inline Tensor i32_tensor(const std::vector<int32_t>& values) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::kI32);
  for (size_t i = 0; i < values.size(); ++i) t.data<int32_t>()[i] = values[i];
  return t;
}

// g and beta as the model makes them (gdn_gating of random projections), decays spread over
// heads so that some heads remember across many chunks.
inline void random_gating(int64_t tokens, int64_t hv, std::mt19937& rng, Tensor& g, Tensor& beta) {
  Tensor a = cuda_test::random_tensor({tokens, hv}, DType::kF32, rng, 0.0f, 1.0f);
  Tensor b = cuda_test::random_tensor({tokens, hv}, DType::kF32, rng, 0.0f, 1.5f);
  Tensor A_log = cuda_test::random_tensor({hv}, DType::kF32, rng, -1.0f, 1.5f);
  Tensor dt_bias = cuda_test::random_tensor({hv}, DType::kF32, rng, -1.0f, 0.5f);
  g = Tensor::empty({tokens, hv}, DType::kF32);
  beta = Tensor::empty({tokens, hv}, DType::kF32);
  ASSERT_TRUE(cpu::gdn_gating(a, b, A_log, dt_bias, g, beta).is_ok());
}

// Runs cuda::gated_delta_rule in the emulator on host tensors: q | k | v are columns [q0,
// q0 + 2 key_dim + value_dim) of qkv; state is updated in place and out written. Sets *chunked
// to whether the call needed the chunked form's workspace.
inline Status run_emulated(const Tensor& qkv, int64_t q0, int64_t key_dim, int64_t value_dim,
                           const Tensor& g, const Tensor& beta, const std::vector<int32_t>& loc,
                           const std::vector<int32_t>& slots, int32_t max_len,
                           cuda::GatedDeltaRuleParams params, Tensor& state, Tensor& out,
                           bool* chunked = nullptr) {
  Tensor loc_t = i32_tensor(loc), slots_t = i32_tensor(slots);
  cuda::GdnBatch batch{as_cuda(loc_t), as_cuda(slots_t), max_len};
  batch.states_settled = true;  // the kernels' early loads (one launch at a time here)
  const Tensor qkv_dev = as_cuda(qkv);
  const Tensor q = qkv_dev.slice(1, q0, q0 + key_dim);
  Tensor state_dev = as_cuda(state), out_dev = as_cuda(out);
  Tensor ws_host;
  params.workspace = workspace(q, state_dev, batch, params, ws_host);
  if (chunked != nullptr) *chunked = params.workspace.defined();
  return cuda::gated_delta_rule(q, qkv_dev.slice(1, q0 + key_dim, q0 + 2 * key_dim),
                                qkv_dev.slice(1, q0 + 2 * key_dim, q0 + 2 * key_dim + value_dim),
                                as_cuda(g), as_cuda(beta), batch, params, state_dev, out_dev,
                                nullptr);
}

}  // namespace vllm::gdn_emu
