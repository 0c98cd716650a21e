// Inner loops of paged attention, the gated delta rule and the GDN conv's SiLU, one per ISA
// (internal to the CPU backend). The portable versions live with their ops (attention.cpp,
// gdn_rule.cpp) and are the reference; the AVX2 / AVX-512 ones (vec_kernels_avx2.cpp,
// vec_kernels_avx512.cpp) compute in f32 with FMA and differ from them only by rounding. Call a
// variant only where cpu_isa.h says the CPU has it.
#pragma once

#include <cstdint>

namespace vllm::cpu::detail {

// One query row of one head against its paged context: keys and values of position j are at
// cache + (table[j / block_size] * 2 + {0, 1}) * block_size * kv_row + (j % block_size) *
// kv_row + kv_offset. out = softmax(q . k_j * scale) . v_j over j in [0, ctx).
struct AttentionRow {
  const float* q = nullptr;
  float* out = nullptr;
  const float* cache = nullptr;
  const int32_t* table = nullptr;
  int64_t block_size = 0, kv_row = 0, kv_offset = 0, head_dim = 0, ctx = 0;
  float scale = 1.0f;
  float* scores = nullptr;  // scratch of ctx floats
};
void attention_row_avx2(const AttentionRow& a);
void attention_row_avx512(const AttentionRow& a);

// One token of the gated delta rule on one value head's state S [dk, dv]:
//   S = decay * S;  delta = (v - S^T k) * beta;  S += k delta^T;  out = S^T q.
struct DeltaRuleStep {
  float* state = nullptr;
  const float* q = nullptr;  // [dk], normalised and scaled
  const float* k = nullptr;  // [dk], normalised
  const float* v = nullptr;  // [dv]
  float* out = nullptr;      // [dv]
  float* scratch = nullptr;  // [dv]
  float decay = 1.0f, beta = 0.0f;
  int64_t dk = 0, dv = 0;
};
void delta_rule_step_avx2(const DeltaRuleStep& s);
void delta_rule_step_avx512(const DeltaRuleStep& s);

// out[i] = x[i] / (1 + exp(-x[i])) (SiLU, the GDN conv's activation), the exponential by a
// polynomial (vec_kernels_avx512.cpp) within a few f32 ulps of std::exp.
void silu_avx512(const float* x, int64_t n, float* out);

}  // namespace vllm::cpu::detail
