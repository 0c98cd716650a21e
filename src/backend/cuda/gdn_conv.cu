// Causal depthwise conv1d + SiLU of the Gated DeltaNet layers on the GPU (gdn.cuh; the
// semantics of cpu::causal_conv1d), for decode (one row per request, continuing from
// conv_state) and prefill (many rows) with one kernel.
//
// Mapping. A thread owns kVec adjacent channels (16 bytes of activations when the layout
// allows it, else one channel) of one chunk of a request's rows, and walks those rows in
// order with a sliding window of the previous kWindow inputs per channel in registers, so
// each input is read from memory once. The taps are zero-padded on the left to kMaxWidth, so
// one code path serves every kernel width up to kMaxWidth (4 in all Qwen3.5 / Qwen3-Next
// configs) and the sums run in the CPU op's order (oldest tap first, the bias last).
//
// Chunks. A long prefill is cut into chunks of kChunkTokens rows so the grid has enough
// threads (C / kVec threads per chunk: ~1000 for 8192 bf16 channels, times 128 chunks for
// 2048 rows). Chunk 0 of a request owns the request's conv state: it alone reads the slot
// (its window's start) and writes it back (the last K - 1 inputs: its window when it reaches
// the end, else the request's last K - 1 rows of x), so no thread reads a slot that another
// writes. A later chunk starts its window from the kWindow rows of x just before it.
// The grid enumerates chunks compactly: request r's chunks have ids [key(r), key(r) +
// ceil(len_r / L)) with key(r) = floor(start_r / L) + r, and since key(r + 1) - key(r) >=
// ceil(len_r / L) those ranges never overlap; there are floor(T / L) + R ids in all (a few
// are past their request's last row and do nothing). A block finds its request by a binary
// search over query_start_loc.
//
// One chunk per request instead (grid = R, no search) when every request has at most
// kChunkTokens rows (decode) or when out is x itself (allowed; any other overlap of out with
// x is refused): then no thread may read a row that another thread has already overwritten
// with outputs, and each thread reads every element of its channels before overwriting it.
#include <cuda_bf16.h>

#include <climits>
#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gdn.cuh"
#include "backend/cuda/gdn_batch.cuh"
#include "backend/cuda/gdn_state.cuh"
#include "backend/cuda/runtime.h"

namespace vllm::cuda {
namespace {
using detail::launch_pdl;
using detail::pdl_launch_next;
using detail::pdl_wait;

using detail::from_float;
using detail::GdnBatchView;
using detail::Pack;
using detail::ParamVec;
using detail::silu;
using detail::to_float;

constexpr int kMaxWidth = 4;            // taps held in registers per channel
constexpr int kWindow = kMaxWidth - 1;  // previous inputs held per channel
constexpr int kConvThreads = 128;
// Rows per chunk of a long prefill: 2048 rows give 128 chunks, and re-reading kWindow rows
// of x before each chunk costs 3/16 more reads (mostly from L2).
constexpr int kChunkTokens = 16;
static_assert(kChunkTokens >= kWindow, "a later chunk's window must lie inside its request");
// Unchunked batches of at most this many requests run one channel per thread (dispatch_conv).
constexpr int64_t kNarrowMaxRequests = 16;

template <typename T>
struct ConvParams {
  const T* x;        // [T, channels], row stride x_stride
  T* out;            // [T, channels], row stride out_stride
  void* conv_state;  // [num_slots, channels, width - 1] of state_type (gdn_state.cuh)
  detail::StateType state_type;
  ParamVec weight;  // [channels, width]
  ParamVec bias;    // [channels], or absent (reads as 0)
  GdnBatchView batch;
  int64_t x_stride;
  int64_t out_stride;
  int channels;
  int width;           // 1 .. kMaxWidth
  int channel_blocks;  // blocks across the channels of one chunk
  bool chunked;        // chunks of kChunkTokens (else one chunk per request)
};

// The request whose chunk ids contain `id` (see the top of the file) and the chunk's index
// within it: the last request r with key(r) <= id.
__device__ void find_chunk(const GdnBatchView& b, int64_t id, int& request, int64_t& chunk) {
  auto key = [&](int r) {
    const int start = min(max(b.query_start_loc[r], 0), b.num_tokens);
    return static_cast<int64_t>(start / kChunkTokens) + r;
  };
  int lo = 0, hi = b.num_requests - 1;
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (key(mid) <= id) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  request = lo;
  chunk = id - key(lo);
}

// w[v][j] = tap j of channel c0 + v, right-aligned in kMaxWidth (zeros on the left), from
// weight [channels, width] of element type W. The kernel switches on the dtype once per array:
// a switch per element (load_param) inside these unrolled loops tripled the file's compile
// time (in cicc).
template <typename W, int kVec>
__device__ __forceinline__ void load_taps(const void* weight, int c0, int width,
                                          float (&w)[kVec][kMaxWidth]) {
  const W* src = static_cast<const W*>(weight) + static_cast<int64_t>(c0) * width;
  const int pad = kMaxWidth - width;
#pragma unroll
  for (int v = 0; v < kVec; ++v) {
#pragma unroll
    for (int j = 0; j < kMaxWidth; ++j) {
      w[v][j] = j >= pad ? to_float(src[v * width + j - pad]) : 0.0f;
    }
  }
}

// bias[v] of channel c0 + v; zeros when there is no bias (nullptr).
template <typename W, int kVec>
__device__ __forceinline__ void load_bias(const void* data, int c0, float (&bias)[kVec]) {
  const W* src = static_cast<const W*>(data);
#pragma unroll
  for (int v = 0; v < kVec; ++v) bias[v] = src != nullptr ? to_float(src[c0 + v]) : 0.0f;
}

// kEarly (without chunks): the batch's rows and slot (copied from the host before the step's
// kernels), the taps, the bias and the state (written by this layer's kernel in an earlier
// step, or zeroed at the start of this one) are loaded before pdl_wait, through L2, while the
// input projection still runs; only x waits (docs/design.md, launch_pdl).
template <typename T, int kVec, bool kEarly>
__global__ void __launch_bounds__(kConvThreads) causal_conv1d_kernel(ConvParams<T> p) {
  const bool early = kEarly && !p.chunked;
  if (!early) {
    pdl_wait();
    pdl_launch_next();
  }
  using TPack = Pack<T, kVec>;
  const int64_t block = blockIdx.x;
  const int channel_block = static_cast<int>(block % p.channel_blocks);
  const int64_t id = block / p.channel_blocks;
  const int c0 = (channel_block * kConvThreads + static_cast<int>(threadIdx.x)) * kVec;
  // The kernel has no barriers: threads may leave early (having waited, as every thread must).
  if (c0 >= p.channels) {
    if (early) pdl_wait();
    return;
  }

  int request = static_cast<int>(id);
  int64_t chunk = 0;
  if (p.chunked) find_chunk(p.batch, id, request, chunk);
  const detail::RequestRows rows = detail::request_rows<kEarly>(p.batch, request);
  int begin = rows.begin, end = rows.end;
  if (p.chunked) {
    const int64_t first = rows.begin + chunk * kChunkTokens;
    if (chunk < 0 || first >= rows.end) return;
    begin = static_cast<int>(first);
    end = static_cast<int>(min(static_cast<int64_t>(rows.end), first + kChunkTokens));
  }
  if (begin >= end) {
    if (early) pdl_wait();
    return;
  }

  auto x_at = [&](int t) { return *reinterpret_cast<const TPack*>(p.x + t * p.x_stride + c0); };
  auto out_at = [&](int t) { return reinterpret_cast<TPack*>(p.out + t * p.out_stride + c0); };

  if (rows.slot < 0) {  // padding: no state, zero outputs
    if (early) {
      pdl_wait();
      pdl_launch_next();
    }
    TPack zero;
#pragma unroll
    for (int v = 0; v < kVec; ++v) zero.v[v] = from_float<T>(0.0f);
    for (int t = begin; t < end; ++t) *out_at(t) = zero;
    return;
  }

  // Taps right-aligned in kMaxWidth: window slot i (and tap i) is the input kWindow - i rows
  // before the current one; tap kWindow multiplies the current row.
  const int hist = p.width - 1;
  float w[kVec][kMaxWidth];
  float bias[kVec];
  switch (p.weight.dtype) {
    case DType::kBF16:
      load_taps<__nv_bfloat16>(p.weight.data, c0, p.width, w);
      break;
    case DType::kF16:
      load_taps<__half>(p.weight.data, c0, p.width, w);
      break;
    default:
      load_taps<float>(p.weight.data, c0, p.width, w);
  }
  switch (p.bias.dtype) {
    case DType::kBF16:
      load_bias<__nv_bfloat16>(p.bias.data, c0, bias);
      break;
    case DType::kF16:
      load_bias<__half>(p.bias.data, c0, bias);
      break;
    default:
      load_bias<float>(p.bias.data, c0, bias);
  }

  // This thread's channels of the slot: [kVec, hist], oldest input first.
  const int64_t state_at = (static_cast<int64_t>(rows.slot) * p.channels + c0) * hist;
  const bool owns_state = begin == rows.begin;
  float win[kVec][kWindow];
#pragma unroll
  for (int i = 0; i < kWindow; ++i) {
    const int s = i - (kWindow - hist);  // state column (or row offset) of window slot i
    if (s < 0) {
#pragma unroll
      for (int v = 0; v < kVec; ++v) win[v][i] = 0.0f;  // multiplied by a zero tap
    } else if (owns_state) {
#pragma unroll
      for (int v = 0; v < kVec; ++v) {
        win[v][i] = detail::load_state<kEarly>(p.conv_state, state_at + v * hist + s, p.state_type);
      }
    } else {                                       // chunked: after pdl_wait
      const TPack in = x_at(begin - kWindow + i);  // >= rows.begin: chunk >= 1
#pragma unroll
      for (int v = 0; v < kVec; ++v) win[v][i] = to_float(in.v[v]);
    }
  }

  if (early) {  // x is the input projection's
    pdl_wait();
    pdl_launch_next();
  }
  for (int t = begin; t < end; ++t) {
    const TPack in = x_at(t);
    TPack o;
#pragma unroll
    for (int v = 0; v < kVec; ++v) {
      const float cur = to_float(in.v[v]);
      float acc = 0.0f;
#pragma unroll
      for (int i = 0; i < kWindow; ++i) acc += w[v][i] * win[v][i];
      acc += w[v][kWindow] * cur;
      acc += bias[v];
#pragma unroll
      for (int i = 0; i + 1 < kWindow; ++i) win[v][i] = win[v][i + 1];
      win[v][kWindow - 1] = cur;
      o.v[v] = from_float<T>(silu(acc));
    }
    *out_at(t) = o;
  }

  if (!owns_state) return;
  // The slot becomes the last hist inputs of [state, rows]: the window when this chunk ran
  // to the request's end, else the request's last rows of x (inputs: out does not overlap x
  // in chunked mode, and the request has more than kChunkTokens >= hist rows).
  const bool whole = end == rows.end;
#pragma unroll
  for (int i = 0; i < kWindow; ++i) {
    const int s = i - (kWindow - hist);
    if (s < 0) continue;
    if (whole) {
#pragma unroll
      for (int v = 0; v < kVec; ++v) {
        detail::store_state(p.conv_state, state_at + v * hist + s, win[v][i], p.state_type);
      }
    } else {
      const TPack in = x_at(rows.end - kWindow + i);
#pragma unroll
      for (int v = 0; v < kVec; ++v) {
        detail::store_state(p.conv_state, state_at + v * hist + s, to_float(in.v[v]), p.state_type);
      }
    }
  }
}

// ---- Launcher --------------------------------------------------------------------------

// early: causal_conv1d_kernel's kEarly (GdnBatch::states_settled).
template <typename T, int kVec>
Status launch_conv(ConvParams<T> p, int64_t num_ids, bool early, cudaStream_t stream) {
  p.channel_blocks = static_cast<int>(detail::ceil_div(p.channels, int64_t{kConvThreads} * kVec));
  const int64_t blocks = num_ids * p.channel_blocks;
  if (blocks > INT_MAX) {
    return make_error(ErrorCode::kUnsupported,
                      "cuda::causal_conv1d: {} blocks exceed the grid limit ({} channels, {} "
                      "chunks)",
                      blocks, p.channels, num_ids);
  }
  launch_pdl(early && pdl_early_loads() ? causal_conv1d_kernel<T, kVec, true>
                                        : causal_conv1d_kernel<T, kVec, false>,
             static_cast<unsigned>(blocks), kConvThreads, 0, stream, p);
  return check_launch("causal_conv1d_kernel");
}

template <typename T>
Status dispatch_conv(const detail::Rows& x, const detail::Rows& out, ConvParams<T> p,
                     const GdnBatch& batch, cudaStream_t stream) {
  p.x = static_cast<const T*>(x.data);
  p.out = static_cast<T*>(out.data);
  p.x_stride = x.row_stride;
  p.out_stride = out.row_stride;
  // out is x itself or shares no memory with it (checked): only aliasing forbids chunks.
  p.chunked = batch.max_query_len > kChunkTokens && !detail::same_rows(x, out);
  const int64_t num_ids =
      p.chunked ? p.batch.num_tokens / kChunkTokens + p.batch.num_requests : p.batch.num_requests;
  constexpr int kVec = 16 / sizeof(T);
  const bool vectorised = p.channels % kVec == 0 && detail::is_aligned(x.data, 16) &&
                          detail::is_aligned(out.data, 16) && x.row_stride % kVec == 0 &&
                          out.row_stride % kVec == 0;
  // A decode step of a few requests has a few thousand channels to spread: one channel per
  // thread gives 8x the threads (each loading its contiguous taps and state) where 16-byte
  // vectors would leave most SMs idle behind strided per-thread loads (8.0 -> 4.0 us per
  // layer on the 35B-A3B's 8192 channels at batch 1, Nsight Compute).
  const bool few = !p.chunked && p.batch.num_requests <= kNarrowMaxRequests;
  if (vectorised && !few) return launch_conv<T, kVec>(p, num_ids, batch.states_settled, stream);
  return launch_conv<T, 1>(p, num_ids, batch.states_settled, stream);
}

}  // namespace

Status causal_conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                     const GdnBatch& batch, Tensor& conv_state, Tensor& out, cudaStream_t stream) {
  constexpr std::string_view kOp = "cuda::causal_conv1d";
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, "x", x, {DType::kF32, DType::kBF16}));
  if (x.ndim() != 2) {
    return make_error(ErrorCode::kInvalidArgument, "{}: x {} must be [tokens, channels]", kOp,
                      x.to_string());
  }
  const int64_t tokens = x.size(0), channels = x.size(1);
  VLLM_RETURN_IF_ERROR(detail::check_param(kOp, "weight", weight));
  VLLM_RETURN_IF_ERROR(detail::check_same_device(kOp, "weight", weight, x));
  if (weight.ndim() != 2 || weight.size(0) != channels) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: weight {} must be [channels = {}, kernel width]", kOp,
                      weight.to_string(), channels);
  }
  const int64_t width = weight.size(1);
  if (width < 1 || width > kMaxWidth) {
    return make_error(ErrorCode::kUnsupported,
                      "{}: kernel width {} is outside the 1..{} this kernel holds in registers",
                      kOp, width, kMaxWidth);
  }
  if (bias.defined()) {
    VLLM_RETURN_IF_ERROR(detail::check_param(kOp, "bias", bias));
    VLLM_RETURN_IF_ERROR(detail::check_same_device(kOp, "bias", bias, x));
    if (bias.ndim() != 1 || bias.size(0) != channels) {
      return make_error(ErrorCode::kInvalidArgument, "{}: bias {} must be [channels = {}]", kOp,
                        bias.to_string(), channels);
    }
  }
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, "conv_state", conv_state,
                                                 {DType::kF32, DType::kBF16, DType::kF16}));
  VLLM_RETURN_IF_ERROR(detail::check_same_device(kOp, "conv_state", conv_state, x));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "conv_state", conv_state));
  if (conv_state.ndim() != 3 || conv_state.size(1) != channels || conv_state.size(2) != width - 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: conv_state {} must be [num_slots, channels = {}, kernel width - 1 = {}]",
                      kOp, conv_state.to_string(), channels, width - 1);
  }
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, "out", out));
  VLLM_RETURN_IF_ERROR(detail::check_same_device(kOp, "out", out, x));
  VLLM_RETURN_IF_ERROR(detail::check_same_dtype(kOp, "out", out, x));
  if (out.shape() != x.shape()) {
    return make_error(ErrorCode::kInvalidArgument, "{}: out {} must have x's shape {}", kOp,
                      out.to_string(), shape_to_string(x.shape()));
  }
  VLLM_ASSIGN_OR_RETURN(detail::Rows x_rows, detail::as_rows(kOp, "x", x));
  VLLM_ASSIGN_OR_RETURN(detail::Rows out_rows, detail::as_rows(kOp, "out", out));
  VLLM_RETURN_IF_ERROR(detail::check_no_overlap(kOp, "out", out_rows, out.element_size(), "x",
                                                x_rows, x.element_size(), /*allow_same=*/true));
  VLLM_ASSIGN_OR_RETURN(detail::Rows state_rows, detail::as_rows(kOp, "conv_state", conv_state));
  VLLM_RETURN_IF_ERROR(detail::check_no_overlap(kOp, "conv_state", state_rows,
                                                conv_state.element_size(), "out", out_rows,
                                                out.element_size()));
  VLLM_RETURN_IF_ERROR(detail::check_no_overlap(
      kOp, "conv_state", state_rows, conv_state.element_size(), "x", x_rows, x.element_size()));
  VLLM_ASSIGN_OR_RETURN(detail::GdnBatchView view,
                        detail::check_gdn_batch(kOp, batch, x, tokens, conv_state.size(0)));
  if (channels > (int64_t{1} << 30)) {
    return make_error(ErrorCode::kUnsupported, "{}: {} channels are too many", kOp, channels);
  }
  if (tokens == 0 || channels == 0 || view.num_requests == 0) return Status::ok();

  DeviceGuard guard(x.device());
  VLLM_RETURN_IF_ERROR(guard.status());
  auto run = [&](auto type_tag) {
    using T = decltype(type_tag);
    ConvParams<T> p{};
    p.conv_state = conv_state.data_ptr();
    p.state_type = detail::state_type(conv_state.dtype());
    p.weight = detail::as_param(weight);
    p.bias = detail::as_param(bias);
    p.batch = view;
    p.channels = static_cast<int>(channels);
    p.width = static_cast<int>(width);
    return dispatch_conv<T>(x_rows, out_rows, p, batch, stream);
  };
  if (x.dtype() == DType::kF32) return run(float{});
  return run(__nv_bfloat16{});
}

}  // namespace vllm::cuda
