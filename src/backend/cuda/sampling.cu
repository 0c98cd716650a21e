// The sampling kernel: one 512-thread block per logits row runs the CPU sampler's steps
// (src/engine/sampler.cpp, sampling_ops.cpp) with the same arithmetic where it decides
// which tokens survive. Phases of a row, each a block-wide pass over the row unless noted:
//   edits     rows with min_tokens / logit_bias / penalties: copy the row into the work
//             buffer and rewrite the few edited tokens (float ops in the CPU's order)
//   stats     raw max, sum exp (online) and count at the max; processed max and argmax
//   greedy    the argmax, ties to the lowest id. Otherwise, on logits / temperature:
//   min_p     no pass: keep v >= the smallest float reaching max + log(min_p)
//   top_k     count-mode radix select of the k-th largest (sampling_select.cuh)
//   top_p     mass-mode radix select of vLLM's boundary; ties at it kept by lowest id
//   draw      inverse CDF in id order: per-warp sums over 16 parts of the row, the part
//             where the cumulative weight passes u * total is split again (from L2) until
//             one warp scans the last <= 1024 ids
//   logprobs  top-N: radix select on the raw row; rank and the top-N tokens: one pass
// Greedy rows without edits and without top-N logprobs take the stats pass only. "Plain" rows
// (no edits, filters or top-N logprobs; greedy or not) run their passes in kSegments blocks
// each (segment_*_kernel) and only merge and finish here.
//
// The kept set after min_p / top_k / top_p is always the first tokens in (value desc, id
// asc) order, so it is held as one boundary (key, id). Weights exp(v - max) are fixed-point
// integers, so totals, the top_p boundary and the draw are exact sums, the same whatever
// else runs on the GPU.
#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/runtime.h"
#include "backend/cuda/sampling_layout.h"
#include "backend/cuda/sampling_select.cuh"

namespace vllm::cuda::sampling {
namespace {
using detail::launch_pdl;
using detail::pdl_launch_next;
using detail::pdl_wait;

constexpr int kScanTail = 32 * 32;  // the draw's last range, scanned by one warp

struct ArgMax {
  float value;
  int index;
};

// The larger value; the lower index on ties.
__device__ __forceinline__ ArgMax better(ArgMax a, ArgMax b) {
  return (b.value > a.value || (b.value == a.value && b.index < a.index)) ? b : a;
}

// log-sum-exp state: sum of exp(v - max) over the values seen, and how many equal max.
struct Online {
  float max;
  double sum;
  int at_max;
};

__device__ __forceinline__ void online_add(Online& o, float v) {
  if (v > o.max) {
    o.sum = o.max == -INFINITY ? 1.0 : o.sum * exp(static_cast<double>(o.max) - v) + 1.0;
    o.max = v;
    o.at_max = 1;
  } else if (v == o.max) {
    ++o.at_max;
    if (v != -INFINITY) o.sum += 1.0;
  } else {
    o.sum += expf(v - o.max);
  }
}

__device__ __forceinline__ Online online_merge(Online a, Online b) {
  const float m = fmaxf(a.max, b.max);
  Online r{m, 0.0, 0};
  if (a.max == m) {
    r.at_max += a.at_max;
    r.sum += a.sum;
  } else if (a.max != -INFINITY) {
    r.sum += a.sum * exp(static_cast<double>(a.max) - m);
  }
  if (b.max == m) {
    r.at_max += b.at_max;
    r.sum += b.sum;
  } else if (b.max != -INFINITY) {
    r.sum += b.sum * exp(static_cast<double>(b.max) - m);
  }
  if (m == -INFINITY) r.sum = 0.0;
  return r;
}

struct KernelShared {
  SelectShared select;
  DeviceRow row;
  // Block reductions.
  float max_value[kWarps];
  int max_index[kWarps];
  double online_sum[kWarps];
  int online_at_max[kWarps];
  int count[kWarps];
  // The draw.
  unsigned long long part_sum[kWarps];
  int part_kept[kWarps];
  int part_last[kWarps];
  int part_chosen;
  unsigned long long carry;
  unsigned long long target;
  int total_kept;
  int last_drawable;
  int token;
  // Top-N logprobs.
  int top_n;
  uint32_t top_key[kMaxDeviceLogprobs];
  int top_id[kMaxDeviceLogprobs];
};

__device__ ArgMax block_argmax(ArgMax a, KernelShared& ks) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const ArgMax other{__shfl_xor_sync(kFullMask, a.value, offset),
                       __shfl_xor_sync(kFullMask, a.index, offset)};
    a = better(a, other);
  }
  if (lane_id() == 0) {
    ks.max_value[warp_id()] = a.value;
    ks.max_index[warp_id()] = a.index;
  }
  __syncthreads();
  ArgMax r{ks.max_value[0], ks.max_index[0]};
#pragma unroll
  for (int w = 1; w < kWarps; ++w) r = better(r, ArgMax{ks.max_value[w], ks.max_index[w]});
  __syncthreads();
  return r;
}

__device__ Online block_online(Online o, KernelShared& ks) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const Online other{__shfl_xor_sync(kFullMask, o.max, offset),
                       __shfl_xor_sync(kFullMask, o.sum, offset),
                       __shfl_xor_sync(kFullMask, o.at_max, offset)};
    o = online_merge(o, other);
  }
  if (lane_id() == 0) {
    ks.max_value[warp_id()] = o.max;
    ks.online_sum[warp_id()] = o.sum;
    ks.online_at_max[warp_id()] = o.at_max;
  }
  __syncthreads();
  Online r{ks.max_value[0], ks.online_sum[0], ks.online_at_max[0]};
#pragma unroll
  for (int w = 1; w < kWarps; ++w) {
    r = online_merge(r, Online{ks.max_value[w], ks.online_sum[w], ks.online_at_max[w]});
  }
  __syncthreads();
  return r;
}

// work = raw with the row's edits applied, in the CPU sampler's order: min_tokens mask,
// logit bias, repetition penalty, frequency and presence penalties. Explicit _rn intrinsics
// keep nvcc from fusing a multiply and a subtract into one rounding.
__device__ void build_edited_row(const float* raw, float* work, int n, const DeviceEdit* edits,
                                 int num_edits, const DeviceRow& row) {
  for (int i = static_cast<int>(threadIdx.x); i < n; i += kThreads) work[i] = raw[i];
  __syncthreads();
  for (int e = static_cast<int>(threadIdx.x); e < num_edits; e += kThreads) {
    const DeviceEdit edit = edits[e];
    float v = raw[edit.token_id];
    if (edit.flags & kEditMask) v = -INFINITY;
    if (edit.flags & kEditBias) v = __fadd_rn(v, edit.bias);
    if (edit.flags & kEditRepetition) {
      v = v > 0.0f ? __fmul_rn(v, row.inv_repetition) : __fmul_rn(v, row.repetition);
    }
    if (edit.flags & kEditOutput) {
      v = __fsub_rn(v, __fmul_rn(row.frequency, static_cast<float>(edit.output_count)));
      v = __fsub_rn(v, row.presence);
    }
    work[edit.token_id] = v;
  }
  __syncthreads();
}

// The draw's weight of id i whose logit is v: exp(v / t - m) in fixed point when the token
// is kept (key(v / t) > tau_key, or == tau_key with id <= tau_id; never -inf), else 0.
__device__ __forceinline__ unsigned long long draw_weight(int i, float v, float t, float m,
                                                          uint32_t tau_key, int tau_id,
                                                          bool& kept) {
  const float x = __fdiv_rn(v, t);
  const uint32_t key = float_key(x);
  kept = x != -INFINITY && (key > tau_key || (key == tau_key && i <= tau_id));
  return kept ? fixed_weight(x, m) : 0ull;
}

// Inverse-CDF draw over the kept tokens (key(v) > tau_key, or == tau_key with id <= tau_id;
// never -inf), v = src / t, weights exp(v - m): the first id in order whose cumulative weight
// exceeds floor(u * total); the last drawable id if rounding leaves the target at the top.
// Sets *num_kept to the number of kept tokens. Returns -1 only if nothing is drawable.
// Where a draw continues when the part of the row it lands in is already known (a plain
// row's segment): the range, the weight before it and the target.
struct DrawStart {
  int begin;
  int end;
  unsigned long long carry;
  unsigned long long target;
  int last_drawable;
};

__device__ __noinline__ int draw_token(KernelShared& ks, const float* src, int n, float t, float m,
                                       uint32_t tau_key, int tau_id, double u, int* num_kept,
                                       const DrawStart* start = nullptr) {
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = lane_id(), warp = warp_id();
  // The weight of id i whose logit is v (0 unless kept).
  auto weight_of = [&](int i, float v, bool& kept) -> unsigned long long {
    return draw_weight(i, v, t, m, tau_key, tau_id, kept);
  };

  int begin = 0, end = n;
  unsigned long long carry = 0, target = 0;
  bool first = true;
  if (start != nullptr) {
    begin = start->begin;
    end = start->end;
    carry = start->carry;
    target = start->target;
    first = false;
    if (tid == 0) {
      ks.target = start->target;
      ks.last_drawable = start->last_drawable;
    }
    __syncthreads();
  }
  do {
    // Split [begin, end) into one part per warp; find the part where the draw lands.
    const int part = (end - begin + kWarps - 1) / kWarps;
    const int part_begin = min(end, begin + warp * part);
    const int part_end = min(end, part_begin + part);
    unsigned long long sum = 0;
    int kept_count = 0, last = -1;
    constexpr int kBatch = 8;  // loads in flight per lane
    for (int base = part_begin + lane; base < part_end; base += kBatch * 32) {
      float v[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int i = base + 32 * j;
        v[j] = i < part_end ? src[i] : -INFINITY;
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int i = base + 32 * j;
        bool kept;
        const unsigned long long w = weight_of(i, v[j], kept);
        if (i < part_end) {
          sum += w;
          kept_count += kept;
          if (w > 0) last = i;
        }
      }
    }
    sum = warp_reduce(sum, Sum{});
    if (first) {
      kept_count = warp_reduce(kept_count, Sum{});
      last = warp_reduce(last, Max{});
    }
    if (lane == 0) {
      ks.part_sum[warp] = sum;
      ks.part_kept[warp] = kept_count;
      ks.part_last[warp] = last;
    }
    __syncthreads();
    if (tid == 0) {
      if (first) {
        unsigned long long total = 0;
        int total_kept = 0, last_drawable = -1;
        for (int w = 0; w < kWarps; ++w) {
          total += ks.part_sum[w];
          total_kept += ks.part_kept[w];
          last_drawable = max(last_drawable, ks.part_last[w]);
        }
        ks.target = static_cast<unsigned long long>(u * static_cast<double>(total));
        ks.total_kept = total_kept;
        ks.last_drawable = last_drawable;
      }
      unsigned long long c = carry;
      int chosen = -1;
      for (int w = 0; w < kWarps; ++w) {
        if (c + ks.part_sum[w] > ks.target) {
          chosen = w;
          break;
        }
        c += ks.part_sum[w];
      }
      ks.part_chosen = chosen;
      ks.carry = c;
    }
    __syncthreads();
    const int chosen = ks.part_chosen;
    target = ks.target;
    if (first) *num_kept = ks.total_kept;
    first = false;
    if (chosen < 0) return ks.last_drawable;  // (only possible on the first split)
    carry = ks.carry;
    begin = min(end, begin + chosen * part);
    end = min(end, begin + part);
  } while (end - begin > kScanTail);

  if (warp == 0) {
    int found = -1;
    unsigned long long c = carry;
    for (int base = begin; base < end; base += 32) {
      const int i = base + lane;
      unsigned long long incl = 0;
      if (i < end) {
        bool kept;
        incl = weight_of(i, src[i], kept);
      }
#pragma unroll
      for (int offset = 1; offset < 32; offset <<= 1) {
        const unsigned long long y = __shfl_up_sync(kFullMask, incl, offset);
        if (lane >= offset) incl += y;
      }
      const unsigned int crossed = __ballot_sync(kFullMask, c + incl > target);
      if (crossed != 0) {
        found = base + __ffs(crossed) - 1;
        break;
      }
      c += __shfl_sync(kFullMask, incl, 31);
    }
    if (lane == 0) ks.token = found >= 0 ? found : ks.last_drawable;
  }
  __syncthreads();
  const int token = ks.token;
  __syncthreads();
  return token;
}

// temperature, min_p, top_k, top_p, then the draw (a non-greedy row whose max m is finite).
__device__ __noinline__ int sample_filtered(KernelShared& ks, const float* src, int n,
                                            const DeviceRow& row, float m, int* num_kept) {
  SelectShared& s = ks.select;
  const float t = row.temperature;
  auto no_weight = [](uint32_t) { return 0ull; };

  // Kept so far: keys >= low (and not -inf). min_p keeps double(v) >= max + log(min_p),
  // i.e. v >= that bound rounded up to a float.
  uint32_t low = 0;
  if (row.flags & kRowMinP) {
    low = float_key(__double2float_ru(static_cast<double>(m) + row.log_min_p));
  }
  unsigned long long survivors = ~0ull;  // an upper bound on the kept count, when known
  if (row.top_k > 0 && row.top_k < n) {
    // The k-th largest of the min_p-masked row (masked values count as -inf, as on the CPU).
    auto k_key = [=](int, float v, uint32_t& key) {
      const uint32_t value_key = float_key(__fdiv_rn(v, t));
      key = value_key >= low ? value_key : kKeyNegInf;
      return true;
    };
    const SelectResult sel = radix_select<false>(
        s, src, n, k_key, no_weight, static_cast<unsigned long long>(row.top_k), 0.0, false);
    low = max(low, sel.key);
    survivors = sel.above + sel.at_count;
  }

  uint32_t tau_key = low;
  int tau_id = 0x7fffffff;
  if (row.top_p < 1.0) {
    auto p_key = [=](int, float v, uint32_t& key) {
      const float x = __fdiv_rn(v, t);
      if (x == -INFINITY) return false;
      key = float_key(x);
      return key >= low;
    };
    auto weight = [m](uint32_t key) { return fixed_weight(key_float(key), m); };
    bool on_list = false;
    if (survivors <= static_cast<unsigned long long>(kListCap)) {
      compact_candidates(s, src, n, p_key);
      on_list = true;
    }
    const SelectResult sel = radix_select<true>(s, src, n, p_key, weight, 0, row.top_p, on_list);
    tau_key = sel.key;
    // Tokens tied at the boundary each carry weight w; the j-th of them (by id) is kept while
    // top_p_keeps(above + j * w). The first always is; find how many are.
    const unsigned long long w = weight(sel.key);
    unsigned int lo = 1, hi = max(sel.at_count, 1u);
    while (lo < hi) {
      const unsigned int mid = lo + (hi - lo + 1) / 2;
      if (top_p_keeps(sel.above + static_cast<unsigned long long>(mid - 1) * w, sel.total,
                      row.top_p)) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    if (lo < sel.at_count) tau_id = kth_smallest_tied_id(s, sel, lo, src, n, p_key);
  }
  return draw_token(ks, src, n, t, m, tau_key, tau_id, row.uniform, num_kept);
}

// ---- Plain rows: the passes over the row in kSegments blocks --------------------------------
// A plain row (kRowPlain) needs the raw log-sum-exp and argmax, the draw's weight total and
// the chosen token's rank: three passes over the vocabulary, which one block per row runs at
// one SM's pace (~70 us each for 248k logits). The segment kernels run them in kSegments
// blocks per row; sample_rows_kernel merges the segments' results in segment order and
// finishes the draw inside the segment it lands in. The weights are fixed-point integers, so
// the totals, the target and the token are those of the one-block passes exactly.

__device__ __forceinline__ void segment_range(int n, int s, int& begin, int& end) {
  const int len = ((n + kSegments - 1) / kSegments + 3) / 4 * 4;  // 16-byte aligned starts
  begin = min(n, s * len);
  end = min(n, begin + len);
}

// The row's argmax value from its segments (the draw's max is that value / t).
__device__ __forceinline__ ArgMax merged_best(const SegmentStats* seg) {
  ArgMax best{-INFINITY, 0x7fffffff};
  for (int k = 0; k < kSegments; ++k)
    best = better(best, ArgMax{seg[k].best_value, seg[k].best_index});
  return best;
}

// Pass 1 (grid kSegments x rows): raw log-sum-exp state and argmax of each segment.
__global__ void __launch_bounds__(kThreads) segment_stats_kernel(const SampleArgs args) {
  pdl_wait();
  pdl_launch_next();
  __shared__ KernelShared ks;
  const int s = static_cast<int>(blockIdx.x), r = static_cast<int>(blockIdx.y);
  if ((args.rows[r].flags & kRowPlain) == 0) return;  // the whole block
  const float* raw = args.logits + static_cast<int64_t>(r) * args.logits_stride;
  int begin, end;
  segment_range(args.vocab, s, begin, end);
  Online stats{-INFINITY, 0.0, 0};
  ArgMax best{-INFINITY, 0x7fffffff};
  for_each_element(raw + begin, end - begin, [&](int i, float v) {
    online_add(stats, v);
    best = better(best, ArgMax{v, begin + i});
  });
  stats = block_online(stats, ks);
  best = block_argmax(best, ks);
  if (threadIdx.x == 0) {
    args.segment_stats[r * kSegments + s] =
        SegmentStats{stats.sum, stats.max, stats.at_max, best.value, best.index};
  }
}

// Pass 2 (grid kSegments x rows, non-greedy plain rows): each segment's fixed-point weight
// total, kept count and last drawable id.
__global__ void __launch_bounds__(kThreads) segment_draw_kernel(const SampleArgs args) {
  pdl_wait();
  pdl_launch_next();
  __shared__ KernelShared ks;
  const int s = static_cast<int>(blockIdx.x), r = static_cast<int>(blockIdx.y);
  const DeviceRow row = args.rows[r];
  if ((row.flags & kRowPlain) == 0 || (row.flags & kRowGreedy) != 0) return;
  const float* raw = args.logits + static_cast<int64_t>(r) * args.logits_stride;
  const float t = row.temperature;
  const float m = __fdiv_rn(merged_best(args.segment_stats + r * kSegments).value, t);
  int begin, end;
  segment_range(args.vocab, s, begin, end);
  unsigned long long sum = 0;
  int kept_count = 0, last = -1;
  if (m != -INFINITY) {
    for_each_element(raw + begin, end - begin, [&](int i, float v) {
      bool kept;
      const unsigned long long w = draw_weight(begin + i, v, t, m, 0u, 0x7fffffff, kept);
      sum += w;
      kept_count += kept;
      if (w > 0) last = max(last, begin + i);
    });
  }
  sum = block_reduce(sum, Sum{}, ks.part_sum);
  kept_count = block_reduce(kept_count, Sum{}, ks.count);
  last = block_reduce(last, Max{}, ks.count);
  if (threadIdx.x == 0) args.segment_draw[r * kSegments + s] = SegmentDraw{sum, kept_count, last};
}

// Pass 3 (grid kSegments x rows, non-greedy plain rows, after sample_rows_kernel): the rank of
// the chosen token, raw logits >= its own, added up by integer atomics (exact in any order).
__global__ void __launch_bounds__(kThreads) segment_rank_kernel(const SampleArgs args) {
  pdl_wait();
  pdl_launch_next();
  __shared__ KernelShared ks;
  const int s = static_cast<int>(blockIdx.x), r = static_cast<int>(blockIdx.y);
  const DeviceRow row = args.rows[r];
  if ((row.flags & kRowPlain) == 0 || (row.flags & kRowGreedy) != 0) return;
  const float* raw = args.logits + static_cast<int64_t>(r) * args.logits_stride;
  const float chosen = raw[args.results[r].token_id];
  int begin, end;
  segment_range(args.vocab, s, begin, end);
  int at_least = 0;
  for_each_element(raw + begin, end - begin, [&](int, float v) { at_least += v >= chosen; });
  at_least = block_reduce(at_least, Sum{}, ks.count);
  if (threadIdx.x == 0 && at_least > 0) {
    atomicAdd(reinterpret_cast<unsigned long long*>(&args.results[r].rank),
              static_cast<unsigned long long>(at_least));
  }
}

// sample_rows_kernel's plain row: the segments' results merged in segment order, the draw
// finished inside its segment; the rank of a sampled token is left to segment_rank_kernel.
__device__ __noinline__ void sample_plain_row(KernelShared& ks, const SampleArgs& args, int r,
                                              const DeviceRow& row) {
  const int n = args.vocab;
  const float* raw = args.logits + static_cast<int64_t>(r) * args.logits_stride;
  const SegmentStats* seg = args.segment_stats + r * kSegments;
  Online raw_stats{-INFINITY, 0.0, 0};
  ArgMax best{-INFINITY, 0x7fffffff};
  for (int k = 0; k < kSegments; ++k) {
    raw_stats = online_merge(raw_stats, Online{seg[k].max, seg[k].sum, seg[k].at_max});
    best = better(best, ArgMax{seg[k].best_value, seg[k].best_index});
  }
  const double log_z = static_cast<double>(raw_stats.max) + log(raw_stats.sum);
  const bool greedy = (row.flags & kRowGreedy) != 0;
  int token = best.index;
  int num_kept = 1;
  if (!greedy) {
    const float t = row.temperature;
    const float m = __fdiv_rn(best.value, t);
    if (m == -INFINITY) {
      num_kept = 0;
    } else {
      const SegmentDraw* draw = args.segment_draw + r * kSegments;
      unsigned long long total = 0;
      int total_kept = 0, last_drawable = -1;
      for (int k = 0; k < kSegments; ++k) {
        total += draw[k].sum;
        total_kept += draw[k].kept;
        last_drawable = max(last_drawable, draw[k].last);
      }
      num_kept = total_kept;
      const auto target = static_cast<unsigned long long>(row.uniform * static_cast<double>(total));
      unsigned long long carry = 0;
      int chosen = -1;
      for (int k = 0; k < kSegments; ++k) {
        if (carry + draw[k].sum > target) {
          chosen = k;
          break;
        }
        carry += draw[k].sum;
      }
      if (chosen < 0) {
        token = last_drawable;
      } else {
        DrawStart start{0, 0, carry, target, last_drawable};
        segment_range(n, chosen, start.begin, start.end);
        int unused = 0;
        token = draw_token(ks, raw, n, t, m, 0u, 0x7fffffff, row.uniform, &unused, &start);
      }
      if (token < 0) token = best.index;
    }
  }
  if (token < 0 || token >= n) token = 0;  // only NaN logits get here
  if (threadIdx.x == 0) {
    DeviceResult& out = args.results[r];
    out.token_id = token;
    out.logprob = static_cast<float>(static_cast<double>(raw[token]) - log_z);
    // A greedy row chose the raw max: its rank is the count at the max. A sampled token's
    // rank is added by segment_rank_kernel.
    out.rank = greedy ? raw_stats.at_max : 0;
    out.num_kept = num_kept;
    out.num_top = 0;
  }
}

__global__ void __launch_bounds__(kThreads) sample_rows_kernel(const SampleArgs args) {
  pdl_wait();
  pdl_launch_next();
  __shared__ KernelShared ks;
  SelectShared& s = ks.select;
  const int tid = static_cast<int>(threadIdx.x);
  const int r = static_cast<int>(blockIdx.x);
  if (tid == 0) ks.row = args.rows[r];
  __syncthreads();
  const DeviceRow& row = ks.row;
  if (row.flags & kRowPlain) {
    sample_plain_row(ks, args, r, row);
    return;
  }
  const int n = args.vocab;
  const float* raw = args.logits + static_cast<int64_t>(r) * args.logits_stride;
  const float* src = raw;
  if (row.work_row >= 0) {
    float* work = args.work + static_cast<int64_t>(row.work_row) * args.work_stride;
    build_edited_row(raw, work, n, args.edits + row.edit_begin, row.edit_count, row);
    src = work;
  }

  // Stats: raw log-sum-exp and count at the max; the processed row's max and argmax.
  Online raw_stats{-INFINITY, 0.0, 0};
  ArgMax best{-INFINITY, 0x7fffffff};
  const bool edited = src != raw;
  for_each_element(raw, n, [&](int i, float v) {
    online_add(raw_stats, v);
    if (!edited) best = better(best, ArgMax{v, i});
  });
  if (edited) for_each_element(src, n, [&](int i, float v) { best = better(best, ArgMax{v, i}); });
  raw_stats = block_online(raw_stats, ks);
  best = block_argmax(best, ks);
  const double log_z = static_cast<double>(raw_stats.max) + log(raw_stats.sum);

  const bool greedy = (row.flags & kRowGreedy) != 0;
  int token = best.index;  // greedy; also a row whose values are all -inf (the CPU's argmax)
  int num_kept = 1;
  if (!greedy) {
    const float m = __fdiv_rn(best.value, row.temperature);
    if (m == -INFINITY) {
      num_kept = 0;
    } else {
      token = sample_filtered(ks, src, n, row, m, &num_kept);
      if (token < 0) token = best.index;
    }
  }
  if (token < 0 || token >= n) token = 0;  // only NaN logits get here

  // Top-N raw logprobs: the N-th largest raw key; ties at it by lowest id.
  const int num_top = min(row.num_logprobs, n);
  uint32_t top_key = 0xffffffffu;
  int top_last_id = 0x7fffffff;
  if (num_top > 0) {
    auto raw_key = [](int, float v, uint32_t& key) {
      key = float_key(v);
      return true;
    };
    const SelectResult sel = radix_select<false>(
        s, raw, n, raw_key, [](uint32_t) { return 0ull; }, static_cast<unsigned long long>(num_top),
        0.0, false);
    top_key = sel.key;
    const unsigned int needed = static_cast<unsigned int>(num_top - sel.above);
    if (needed < sel.at_count) top_last_id = kth_smallest_tied_id(s, sel, needed, raw, n, raw_key);
  }

  // Rank (raw logits >= the token's) and the top-N tokens, in one pass. A greedy row without
  // edits chose the raw max, whose rank the stats pass counted.
  long long rank = raw_stats.at_max;
  const bool need_rank = !(greedy && !edited);
  if (need_rank || num_top > 0) {
    if (tid == 0) ks.top_n = 0;
    __syncthreads();
    const float chosen = raw[token];
    int at_least = 0;
    for_each_element(raw, n, [&](int i, float v) {
      at_least += v >= chosen;
      if (num_top > 0) {
        const uint32_t key = float_key(v);
        if (key > top_key || (key == top_key && i <= top_last_id)) {
          const int j = atomicAdd(&ks.top_n, 1);
          if (j < kMaxDeviceLogprobs) {
            ks.top_key[j] = key;
            ks.top_id[j] = i;
          }
        }
      }
    });
    at_least = block_reduce(at_least, Sum{}, ks.count);
    if (need_rank) rank = at_least;
  }

  if (tid == 0) {
    DeviceResult& out = args.results[r];
    out.token_id = token;
    out.logprob = static_cast<float>(static_cast<double>(raw[token]) - log_z);
    out.rank = rank;
    out.num_kept = num_kept;
    const int collected = num_top > 0 ? min(ks.top_n, kMaxDeviceLogprobs) : 0;
    // Insertion sort of at most 20: larger key first, lower id first on ties.
    for (int a = 1; a < collected; ++a) {
      const uint32_t key = ks.top_key[a];
      const int id = ks.top_id[a];
      int b = a - 1;
      while (b >= 0 && (ks.top_key[b] < key || (ks.top_key[b] == key && ks.top_id[b] > id))) {
        ks.top_key[b + 1] = ks.top_key[b];
        ks.top_id[b + 1] = ks.top_id[b];
        --b;
      }
      ks.top_key[b + 1] = key;
      ks.top_id[b + 1] = id;
    }
    for (int j = 0; j < collected; ++j) {
      out.top_ids[j] = ks.top_id[j];
      out.top_logprobs[j] =
          static_cast<float>(static_cast<double>(key_float(ks.top_key[j])) - log_z);
    }
    out.num_top = collected;
  }
}

}  // namespace

Status launch_sample_rows(const SampleArgs& args, int32_t num_rows, cudaStream_t stream) {
  if (num_rows <= 0) return Status::ok();
  const dim3 segments(kSegments, static_cast<unsigned int>(num_rows));
  if (args.any_plain) {
    launch_pdl(segment_stats_kernel, segments, kThreads, 0, stream, args);
    VLLM_RETURN_IF_ERROR(check_launch("segment_stats_kernel"));
    launch_pdl(segment_draw_kernel, segments, kThreads, 0, stream, args);
    VLLM_RETURN_IF_ERROR(check_launch("segment_draw_kernel"));
  }
  launch_pdl(sample_rows_kernel, static_cast<unsigned int>(num_rows), kThreads, 0, stream, args);
  VLLM_RETURN_IF_ERROR(check_launch("sample_rows_kernel"));
  if (args.any_plain) {
    launch_pdl(segment_rank_kernel, segments, kThreads, 0, stream, args);
    VLLM_RETURN_IF_ERROR(check_launch("segment_rank_kernel"));
  }
  return Status::ok();
}

}  // namespace vllm::cuda::sampling
