// The softmax normaliser of one vocabulary row, sum_i exp(x_i - m), for the sampler: it is
// computed for every sampled token (its logprob), and on a 150k-entry vocabulary the scalar
// exponentials alone cost about a millisecond per row.
//
// Exponentials in f32 (what torch's float32 softmax uses), summed in double. The portable
// kernel calls std::exp and is the reference; the AVX2 / AVX-512 kernels (chosen by
// cpu_isa.h) evaluate exp with a polynomial to within 2 ulp of it, so the sums agree to
// about 2.4e-7 relative. NaN anywhere gives NaN, as in the reference; inputs below -87
// (exp underflows) add at most 1e-38 each instead of 0 on the SIMD kernels -- invisible
// beside the row maximum's exp(0) = 1 in a double sum.
#pragma once

#include <cstdint>

namespace vllm::cpu {

// sum_{i < n} exp(x[i] - m), by the active ISA's kernel.
double sum_exp(const float* x, int64_t n, float m);

namespace detail {
double sum_exp_portable(const float* x, int64_t n, float m);
double sum_exp_avx2(const float* x, int64_t n, float m);
double sum_exp_avx512(const float* x, int64_t n, float m);
}  // namespace detail

}  // namespace vllm::cpu
