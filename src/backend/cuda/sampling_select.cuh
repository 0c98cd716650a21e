// Internal to sampling.cu: the block-wide building blocks of the sampling kernel, for one
// thread block working on one logits row.
//
// Radix select. Floats map to order-preserving 32-bit keys (float_key), and a select
// descends 8 bits per level: a histogram of the next digit over the candidates that match
// the digits chosen so far, then one warp picks the bucket holding the answer. Two modes:
//   count: the k-th largest key (top_k thresholds, top-N logprobs, the c-th smallest id);
//   mass:  vLLM's top_p boundary, the smallest key whose mass strictly above it still
//          satisfies  1 - above / total > 1 - p  (mass = exp(v - max) per candidate).
// Masses are fixed-point integers (kMassBits fractional bits), so histogram sums are exact
// and the result does not depend on the order the atomics land in. Once the bucket holding
// the answer has at most kListCap candidates, they are copied into shared memory and the
// remaining levels read only that list instead of the whole row.
//
// Histograms avoid same-address atomic storms (logits crowd into a few top-byte buckets) with
// a small per-thread cache of (digit, count, mass) slots flushed to shared memory on misses.
#pragma once

#include <cstdint>

namespace vllm::cuda::sampling {

constexpr int kThreads = 512;  // one block per row
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kBins = 256;      // 8-bit digits, four levels
constexpr int kListCap = 4096;  // candidates a select may hold in shared memory (32 KiB)
constexpr int kHistSlots = 4;   // per-thread histogram cache
constexpr int kMassBits = 40;   // fixed point of the weights exp(v - max) in (0, 1]
constexpr uint32_t kKeyNegInf = 0x007FFFFFu;  // float_key(-inf)

// Larger float -> larger key; -0 and +0 share a key, as they compare equal.
__device__ __forceinline__ uint32_t float_key(float v) {
  uint32_t u = __float_as_uint(v);
  if (u == 0x80000000u) u = 0;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float key_float(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// exp(v - max) in fixed point; v <= max.
__device__ __forceinline__ unsigned long long fixed_weight(float v, float max) {
  return __float2ull_rn(expf(v - max) * 0x1p40f);
}
static_assert(kMassBits == 40, "fixed_weight scales by 2^40");

__device__ __forceinline__ int lane_id() {
  return static_cast<int>(threadIdx.x) & 31;
}
__device__ __forceinline__ int warp_id() {
  return static_cast<int>(threadIdx.x) >> 5;
}

// ---- Block reductions ------------------------------------------------------------------
// Every thread gets the result; the combine order is fixed, so results are deterministic.
// `scratch` holds kWarps values; the call ends with a barrier so scratch may be reused.

template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

template <typename T, typename Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T* scratch) {
  v = warp_reduce(v, op);
  if (lane_id() == 0) scratch[warp_id()] = v;
  __syncthreads();
  T r = scratch[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) r = op(r, scratch[w]);
  __syncthreads();
  return r;
}

struct Sum {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct Max {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a > b ? a : b;
  }
};

// ---- Row traversal ---------------------------------------------------------------------

// Calls f(i, row[i]) once for every i in [0, n), spread over the block: 16-byte loads for
// the aligned body, single floats for the ends. `row` need only be float-aligned.
template <typename F>
__device__ __forceinline__ void for_each_element(const float* row, int n, F&& f) {
  const int misaligned = static_cast<int>((reinterpret_cast<uintptr_t>(row) >> 2) & 3);
  const int head = min(n, misaligned == 0 ? 0 : 4 - misaligned);
  const int tid = static_cast<int>(threadIdx.x);
  if (tid < head) f(tid, row[tid]);
  const int num_vecs = (n - head) / 4;
  const float4* vecs = reinterpret_cast<const float4*>(row + head);
  for (int j = tid; j < num_vecs; j += 2 * kThreads) {
    // Two loads in flight per thread.
    const float4 a = vecs[j];
    const bool has_b = j + kThreads < num_vecs;
    const float4 b = has_b ? vecs[j + kThreads] : a;
    const int i = head + 4 * j;
    f(i, a.x);
    f(i + 1, a.y);
    f(i + 2, a.z);
    f(i + 3, a.w);
    if (has_b) {
      const int ib = i + 4 * kThreads;
      f(ib, b.x);
      f(ib + 1, b.y);
      f(ib + 2, b.z);
      f(ib + 3, b.w);
    }
  }
  for (int i = head + 4 * num_vecs + tid; i < n; i += kThreads) f(i, row[i]);
}

// ---- Radix select ----------------------------------------------------------------------

struct SelectShared {
  unsigned int count[kBins];
  unsigned long long mass[kBins];
  uint32_t list_key[kListCap];
  int32_t list_id[kListCap];
  int list_size;
  // choose_digit's decision, read by the whole block after a barrier.
  uint32_t digit;
  unsigned long long above;
  unsigned long long total;
  int found_id;
};

// vLLM keeps a token while the mass from it downwards exceeds 1 - p.
__device__ __forceinline__ bool top_p_keeps(unsigned long long before, unsigned long long total,
                                            double p) {
  return 1.0 - static_cast<double>(before) / static_cast<double>(total) > 1.0 - p;
}

// Per-thread cache of histogram increments. Arrays are only indexed by unrolled constants,
// so they live in registers.
template <bool kMass>
struct HistCache {
  uint32_t digit[kHistSlots];
  unsigned int count[kHistSlots];
  unsigned long long mass[kHistSlots];
  int victim;

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int k = 0; k < kHistSlots; ++k) {
      digit[k] = 0xffffffffu;
      count[k] = 0;
      mass[k] = 0;
    }
    victim = 0;
  }
  __device__ __forceinline__ void flush_slot(int k, SelectShared& s) {
    if (count[k] > 0) {
      atomicAdd(&s.count[digit[k]], count[k]);
      if (kMass) atomicAdd(&s.mass[digit[k]], mass[k]);
    }
  }
  __device__ __forceinline__ void add(uint32_t d, unsigned long long w, SelectShared& s) {
    bool hit = false;
#pragma unroll
    for (int k = 0; k < kHistSlots; ++k) {
      if (digit[k] == d) {
        count[k] += 1;
        if (kMass) mass[k] += w;
        hit = true;
      }
    }
    if (!hit) {
#pragma unroll
      for (int k = 0; k < kHistSlots; ++k) {
        if (k == victim) {
          flush_slot(k, s);
          digit[k] = d;
          count[k] = 1;
          mass[k] = w;
        }
      }
      victim = (victim + 1) & (kHistSlots - 1);
    }
  }
  __device__ __forceinline__ void flush(SelectShared& s) {
#pragma unroll
    for (int k = 0; k < kHistSlots; ++k) flush_slot(k, s);
  }
};
static_assert((kHistSlots & (kHistSlots - 1)) == 0);

// Warp 0 only: picks this level's bucket from the histogram and writes s.digit and
// s.above (count or mass strictly above the bucket, including `above` from earlier levels);
// on the first level of a mass select also s.total.
//   count mode: the highest bucket d with above + (count of buckets >= d) >= k;
//   mass mode:  the lowest non-empty bucket d with top_p_keeps(above + mass above d).
// Lane l owns buckets [8l, 8l + 8).
template <bool kMass>
__device__ __forceinline__ void choose_digit(SelectShared& s, unsigned long long above,
                                             unsigned long long k, double p, bool first_level) {
  const int lane = lane_id();
  const int first_bin = 8 * lane;
  unsigned long long lane_count = 0, lane_mass = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    lane_count += s.count[first_bin + j];
    if (kMass) lane_mass += s.mass[first_bin + j];
  }
  // Inclusive suffix sums over lanes: lane l gets the sum over lanes >= l.
  unsigned long long suffix = kMass ? lane_mass : lane_count;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const unsigned long long v = __shfl_down_sync(kFullMask, suffix, offset);
    if (lane + offset < 32) suffix += v;
  }
  unsigned long long total = 0;
  if (kMass) total = first_level ? __shfl_sync(kFullMask, suffix, 0) : s.total;

  int best = kMass ? kBins : -1;
  unsigned long long best_above = 0;
  // Count or mass of the buckets above bucket first_bin + 7.
  unsigned long long run = above + suffix - (kMass ? lane_mass : lane_count);
#pragma unroll
  for (int j = 7; j >= 0; --j) {
    const unsigned int count = s.count[first_bin + j];
    if (kMass) {
      if (count > 0 && top_p_keeps(run, total, p)) {
        best = first_bin + j;  // ends at the lowest qualifying bucket of this lane
        best_above = run;
      }
      run += s.mass[first_bin + j];
    } else {
      if (best < 0 && run + count >= k) {
        best = first_bin + j;  // the highest qualifying bucket of this lane
        best_above = run;
      }
      run += count;
    }
  }
  const int chosen = kMass ? warp_reduce(best, [](int a, int b) { return a < b ? a : b; })
                           : warp_reduce(best, Max{});
  const bool none = kMass ? chosen >= kBins : chosen < 0;
  if (none) {
    // Unreachable for finite logits; keeps NaN input from indexing out of range.
    if (lane == 0) {
      s.digit = 0;
      s.above = above;
    }
  } else if (best == chosen) {
    s.digit = static_cast<uint32_t>(chosen);
    s.above = best_above;
  }
  if (kMass && first_level && lane == 0) s.total = total;
}

struct SelectResult {
  uint32_t key;              // the selected key
  unsigned long long above;  // count (count mode) or mass (mass mode) of larger keys
  unsigned long long total;  // mass mode: the mass of all candidates
  unsigned int at_count;     // candidates whose key is `key`
  bool on_list;              // s.list holds every candidate whose key is `key`
};

// The whole block calls this with the same arguments. Candidates: with on_list, the
// s.list_size entries of s.list; otherwise every i in [0, n) for which key_fn(i, row[i], key)
// returns true. weight(key) is the fixed-point mass of a candidate (mass mode). count mode
// finds the k-th largest key (1 <= k <= candidates); mass mode vLLM's top_p boundary.
// key_fn must give the same answer every time it is asked.
// Not inlined: each select gets its own registers, and key_fn / weight (small lambdas
// capturing by value) arrive as arguments.
template <bool kMass, typename KeyFn, typename WeightFn>
__device__ __noinline__ SelectResult radix_select(SelectShared& s, const float* row, int n,
                                                  KeyFn key_fn, WeightFn weight,
                                                  unsigned long long k, double p, bool on_list) {
  const int tid = static_cast<int>(threadIdx.x);
  uint32_t prefix = 0;
  unsigned long long above = 0, total = 0;
  for (int level = 0; level < 4; ++level) {
    const int shift = 24 - 8 * level;
    const uint32_t high_mask = level == 0 ? 0u : (0xffffffffu << (32 - 8 * level));
    for (int b = tid; b < kBins; b += kThreads) {
      s.count[b] = 0;
      if (kMass) s.mass[b] = 0;
    }
    __syncthreads();

    HistCache<kMass> cache;
    cache.init();
    auto add = [&](uint32_t key) {
      if ((key & high_mask) != prefix) return;
      cache.add((key >> shift) & 0xffu, kMass ? weight(key) : 0ull, s);
    };
    if (on_list) {
      const int size = s.list_size;
      for (int j = tid; j < size; j += kThreads) add(s.list_key[j]);
    } else {
      for_each_element(row, n, [&](int i, float v) {
        uint32_t key;
        if (key_fn(i, v, key)) add(key);
      });
    }
    cache.flush(s);
    __syncthreads();

    if (warp_id() == 0) choose_digit<kMass>(s, above, k, p, level == 0);
    __syncthreads();
    const uint32_t digit = s.digit;
    above = s.above;
    if (kMass && level == 0) total = s.total;
    const unsigned int bucket_count = s.count[digit];
    prefix |= digit << shift;
    __syncthreads();  // all have read s before it changes
    if (level == 3) return SelectResult{prefix, above, total, bucket_count, on_list};

    if (!on_list && bucket_count <= static_cast<unsigned int>(kListCap)) {
      // Copy the bucket's candidates to shared memory; later levels read only those.
      const uint32_t mask = 0xffffffffu << shift;
      if (tid == 0) s.list_size = 0;
      __syncthreads();
      for_each_element(row, n, [&](int i, float v) {
        uint32_t key;
        if (key_fn(i, v, key) && (key & mask) == prefix) {
          const int j = atomicAdd(&s.list_size, 1);
          if (j < kListCap) {
            s.list_key[j] = key;
            s.list_id[j] = i;
          }
        }
      });
      __syncthreads();
      if (tid == 0) s.list_size = min(s.list_size, kListCap);
      __syncthreads();
      on_list = true;
    }
  }
  return SelectResult{prefix, above, total, 0, on_list};  // not reached
}

// Fills s.list with the candidates of key_fn; the caller knows there are at most kListCap.
template <typename KeyFn>
__device__ __noinline__ void compact_candidates(SelectShared& s, const float* row, int n,
                                                KeyFn key_fn) {
  if (threadIdx.x == 0) s.list_size = 0;
  __syncthreads();
  for_each_element(row, n, [&](int i, float v) {
    uint32_t key;
    if (key_fn(i, v, key)) {
      const int j = atomicAdd(&s.list_size, 1);
      if (j < kListCap) {
        s.list_key[j] = key;
        s.list_id[j] = i;
      }
    }
  });
  __syncthreads();
  if (threadIdx.x == 0) s.list_size = min(s.list_size, kListCap);
  __syncthreads();
}

// The c-th smallest id (1-based; c <= sel.at_count) among the candidates whose key is
// sel.key, where sel came from a select over key_fn.
template <typename KeyFn>
__device__ __noinline__ int kth_smallest_tied_id(SelectShared& s, const SelectResult sel,
                                                 unsigned int c, const float* row, int n,
                                                 KeyFn key_fn) {
  const int tid = static_cast<int>(threadIdx.x);
  if (sel.on_list) {
    if (tid == 0) s.found_id = 0;
    __syncthreads();
    const int size = s.list_size;
    for (int j = tid; j < size; j += kThreads) {
      if (s.list_key[j] != sel.key) continue;
      const int id = s.list_id[j];
      unsigned int smaller = 0;
      for (int q = 0; q < size; ++q) smaller += s.list_key[q] == sel.key && s.list_id[q] < id;
      if (smaller == c - 1) s.found_id = id;
    }
    __syncthreads();
    const int found = s.found_id;
    __syncthreads();
    return found;
  }
  // Too many ties for the list: the c-th largest of ~id among them.
  const uint32_t tied_key = sel.key;
  auto id_key = [=](int i, float v, uint32_t& key) {
    uint32_t value_key;
    if (!key_fn(i, v, value_key) || value_key != tied_key) return false;
    key = ~static_cast<uint32_t>(i);
    return true;
  };
  const SelectResult r = radix_select<false>(
      s, row, n, id_key, [](uint32_t) { return 0ull; }, c, 0.0, false);
  return static_cast<int>(~r.key);
}

}  // namespace vllm::cuda::sampling
