// A counter-based uniform generator: element i of a random tensor is a pure function of
// (seed, i), so a GPU kernel can fill any element independently and host code (a test, a CPU
// dummy-weight loader) can reproduce the same values bit for bit.
//
// Element i is the (i + 1)-th output of splitmix64 started at state `seed` (the state
// advances by the golden-ratio increment, then the output is mixed), so a sequential
// splitmix64 generator seeded with `seed` produces the same stream. Its top 24 bits give
// u in [0, 1) exactly; the value is fma(high - low, u, low) in f32, a single rounding that
// host and device perform identically. Header-only and usable from nvcc device code.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define VLLM_HOST_DEVICE __host__ __device__
#else
#define VLLM_HOST_DEVICE
#endif

namespace vllm {

inline constexpr uint64_t kSplitMix64Increment = 0x9E3779B97F4A7C15ULL;

// The (index + 1)-th splitmix64 output from state `seed`.
VLLM_HOST_DEVICE inline uint64_t splitmix64_at(uint64_t seed, uint64_t index) {
  uint64_t z = seed + (index + 1) * kSplitMix64Increment;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Uniform in [low, high) before any rounding to a narrower dtype (f32 rounding of the fma
// may reach `high` itself when high - low is large relative to the ulp of high).
VLLM_HOST_DEVICE inline float counter_uniform(uint64_t seed, uint64_t index, float low,
                                              float high) {
  const float u = static_cast<float>(splitmix64_at(seed, index) >> 40) * 0x1p-24f;
  return fmaf(high - low, u, low);
}

}  // namespace vllm
