// The Gated DeltaNet gating values (gdn_gating, gdn.cuh) element by element, shared by the
// gating kernel (gdn.cu) and the conv kernel's gating blocks (gdn_conv.cu), so both give the
// same bits: g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b), f32 arithmetic in the
// CPU op's order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string_view>

#include "backend/cuda/common.cuh"
#include "base/status.h"
#include "tensor/tensor.h"

namespace vllm::cuda::detail {

template <typename T>
struct GatingParams {
  const T* a = nullptr;
  const T* b = nullptr;
  float* g = nullptr;
  float* beta = nullptr;
  ParamVec A_log;    // [heads]
  ParamVec dt_bias;  // [heads]
  int64_t a_stride = 0, b_stride = 0, g_stride = 0, beta_stride = 0;
  int64_t total = 0;  // tokens * heads (0: no gating)
  int heads = 0;
};

// torch.nn.functional.softplus with beta 1 and threshold 20.
__device__ __forceinline__ float gating_softplus(float v) {
  return v > 20.0f ? v : log1pf(expf(v));
}

// Element i < p.total: token i / heads, value head i % heads.
template <typename T>
__device__ __forceinline__ void gdn_gate(const GatingParams<T>& p, int64_t i) {
  const int64_t t = i / p.heads;
  const int h = static_cast<int>(i % p.heads);
  const float neg_a = -expf(load_param(p.A_log, h));
  const float a = to_float(p.a[t * p.a_stride + h]);
  p.g[t * p.g_stride + h] = neg_a * gating_softplus(a + load_param(p.dt_bias, h));
  const float b = to_float(p.b[t * p.b_stride + h]);
  p.beta[t * p.beta_stride + h] = 1.0f / (1.0f + expf(-b));
}

// gdn_gating's operands, checked (gdn.cu; `op` names the caller in messages).
struct GatingOperands {
  Rows a, b, g, beta;
  ParamVec A_log, dt_bias;
  int64_t tokens = 0, heads = 0;
};
Expected<GatingOperands> check_gating(std::string_view op, const Tensor& a, const Tensor& b,
                                      const Tensor& A_log, const Tensor& dt_bias, Tensor& g,
                                      Tensor& beta);

template <typename T>
GatingParams<T> gating_params(const GatingOperands& o) {
  GatingParams<T> p;
  p.a = static_cast<const T*>(o.a.data);
  p.b = static_cast<const T*>(o.b.data);
  p.g = static_cast<float*>(o.g.data);
  p.beta = static_cast<float*>(o.beta.data);
  p.A_log = o.A_log;
  p.dt_bias = o.dt_bias;
  p.a_stride = o.a.row_stride;
  p.b_stride = o.b.row_stride;
  p.g_stride = o.g.row_stride;
  p.beta_stride = o.beta.row_stride;
  p.total = o.tokens * o.heads;
  p.heads = static_cast<int>(o.heads);
  return p;
}

}  // namespace vllm::cuda::detail
