// Gated DeltaNet ops around the delta rule (see gdn.h): the causal conv1d over the mixed
// q/k/v channels, the per-head gating values, and the gated RMSNorm of the output. The delta
// rule itself is in gdn_rule.cpp.
//
// Float32 arithmetic in the order transformers' torch fallbacks use: conv taps summed oldest
// first then SiLU as x / (1 + exp(-x)); softplus as log1p(exp(x)) below torch's threshold of
// 20; the norm's mean of squares accumulated in double (at least as accurate as torch's sum).
// On AVX-512 CPUs the conv's SiLU takes the polynomial exponential of vec_kernels.h (within a
// few f32 ulps of std::exp); everything else is the same arithmetic on every CPU.
#include "backend/cpu/gdn.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/common.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/gdn_batch.h"
#include "backend/cpu/vec_kernels.h"
#include "base/thread_pool.h"

namespace vllm::cpu {
namespace detail {

Status check_gdn_batch(std::string_view op, const GdnBatch& batch, int64_t num_tokens,
                       int64_t num_slots) {
  const auto& loc = batch.query_start_loc;
  const auto& slots = batch.state_indices;
  if (loc.size() != slots.size() + 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: query_start_loc has {} entries, expected state_indices.size() + 1 = {}",
                      op, loc.size(), slots.size() + 1);
  }
  if (loc[0] != 0 || loc.back() != num_tokens) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: query_start_loc must run from 0 to the {} tokens, got {} .. {}", op,
                      num_tokens, loc[0], loc.back());
  }
  // One flag per slot, reused across calls (no allocation per op once sized).
  thread_local std::vector<uint8_t> seen;
  seen.assign(static_cast<size_t>(std::max<int64_t>(num_slots, 0)), 0);
  for (size_t r = 0; r < slots.size(); ++r) {
    if (loc[r + 1] < loc[r]) {
      return make_error(ErrorCode::kInvalidArgument,
                        "{}: query_start_loc decreases at request {} ({} -> {})", op, r, loc[r],
                        loc[r + 1]);
    }
    if (slots[r] < 0 || slots[r] >= num_slots) {
      return make_error(ErrorCode::kOutOfRange,
                        "{}: state_indices[{}] = {} is outside the {} state slots", op, r, slots[r],
                        num_slots);
    }
    if (seen[static_cast<size_t>(slots[r])]++ != 0) {
      return make_error(ErrorCode::kInvalidArgument,
                        "{}: state slot {} is used by two requests of one batch", op, slots[r]);
    }
  }
  return Status::ok();
}

}  // namespace detail

namespace {

float silu(float x) {
  return x / (1.0f + std::exp(-x));
}

// torch.nn.functional.softplus with beta 1 and threshold 20.
float softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}

// t decoded to f32 into `buf` (kept by the caller across calls); returns buf.data().
const float* decode_into(const Tensor& t, std::vector<float>& buf) {
  buf.resize(static_cast<size_t>(t.numel()));
  detail::decode_to_f32(t.data_ptr(), t.dtype(), t.numel(), buf.data());
  return buf.data();
}

}  // namespace

Status causal_conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                     const GdnBatch& batch, Tensor& conv_state, Tensor& out) {
  constexpr std::string_view kOp = "causal_conv1d";
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "x", x, {DType::kF32}, 2));
  VLLM_ASSIGN_OR_RETURN(detail::Rows x_rows, detail::as_rows(kOp, "x", x));
  const int64_t tokens = x.size(0), channels = x.size(1);
  VLLM_RETURN_IF_ERROR(detail::check_weight(kOp, "weight", weight));
  VLLM_RETURN_IF_ERROR(detail::check_ndim(kOp, "weight", weight, 2));
  const int64_t width = weight.size(1);
  VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "weight", weight, {channels, width},
                                           "([channels of x, kernel width])"));
  if (width < 1) {
    return make_error(ErrorCode::kInvalidArgument, "causal_conv1d: weight has kernel width 0");
  }
  if (bias.defined()) {
    VLLM_RETURN_IF_ERROR(detail::check_weight(kOp, "bias", bias));
    VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "bias", bias, {channels}, "(channels of x)"));
  }
  const int64_t hist = width - 1;
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "conv_state", conv_state,
                                            {DType::kF32, DType::kBF16, DType::kF16}, 3));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "conv_state", conv_state));
  const int64_t num_slots = conv_state.size(0);
  VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "conv_state", conv_state,
                                           {num_slots, channels, hist},
                                           "([num_slots, channels, kernel width - 1])"));
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "out", out, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "out", out, {tokens, channels}, "(shape of x)"));
  VLLM_ASSIGN_OR_RETURN(detail::Rows out_rows, detail::as_rows(kOp, "out", out));
  VLLM_RETURN_IF_ERROR(detail::check_gdn_batch(kOp, batch, tokens, num_slots));

  // Decoded weights in per-thread buffers reused across calls; the workers read them through
  // these pointers (a thread_local named inside the loop body would be the worker's own).
  thread_local std::vector<float> w_buf, b_buf, taps_buf;
  const float* w = decode_into(weight, w_buf);
  // The weights tap-major: taps[j * channels + c] = w[c, j].
  taps_buf.resize(static_cast<size_t>(channels * width));
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t j = 0; j < width; ++j) taps_buf[j * channels + c] = w[c * width + j];
  }
  const float* const taps = taps_buf.data();
  if (!bias.defined()) b_buf.assign(static_cast<size_t>(channels), 0.0f);
  const float* b = bias.defined() ? decode_into(bias, b_buf) : b_buf.data();
  const int64_t num_requests = static_cast<int64_t>(batch.state_indices.size());
  constexpr int64_t kBlock = 64;  // channels per work item
  const int64_t blocks = (channels + kBlock - 1) / kBlock;
  // The state in its storage dtype: read into f32, rounded once when written back.
  const DType state_dtype = conv_state.dtype();
  auto* state_base = static_cast<char*>(conv_state.numel() == 0 ? nullptr : conv_state.data_ptr());
  const int64_t state_elem = static_cast<int64_t>(conv_state.element_size());
  // A decode step's conv is a few thousand multiply-adds: run it on the caller.
  const int64_t per_request = std::max<int64_t>(1, tokens / std::max<int64_t>(num_requests, 1));
  const int64_t grain = detail::grain_for(kBlock * width * per_request);

  const bool avx512 = active_isa() == CpuIsa::kAvx512;
  // Each work item walks its tokens over a block of channels, with its window and weights
  // tap-major ([tap][channel]) so that the loops over channels are unit-stride and vectorise;
  // each channel's sum keeps the reference order (oldest tap first, then x, then the bias).
  parallel_for(0, num_requests * blocks, grain, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> window, acc;
    window.resize(static_cast<size_t>(kBlock * std::max<int64_t>(hist, 1)));
    acc.resize(static_cast<size_t>(kBlock));
    float* const win = window.data();
    float* const sum = acc.data();
    for (int64_t item = begin; item < end; ++item) {
      const int64_t r = item / blocks;
      const int64_t c0 = (item % blocks) * kBlock, n = std::min(channels, c0 + kBlock) - c0;
      const int64_t t0 = batch.query_start_loc[r], t1 = batch.query_start_loc[r + 1];
      if (t0 == t1) continue;
      char* state = state_base + batch.state_indices[r] * channels * hist * state_elem;
      // win[j * kBlock + i]: channel c0 + i's input j steps after the oldest tap.
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < hist; ++j) {
          win[j * kBlock + i] = detail::load_f32(state, state_dtype, (c0 + i) * hist + j);
        }
      }
      const float* bc = b + c0;
      for (int64_t t = t0; t < t1; ++t) {
        const float* in = x_rows.row<float>(t) + c0;
        float* orow = out_rows.row<float>(t) + c0;
        for (int64_t i = 0; i < n; ++i) sum[i] = 0.0f;
        for (int64_t j = 0; j < hist; ++j) {
          const float* wj = taps + j * channels + c0;
          const float* xj = win + j * kBlock;
          for (int64_t i = 0; i < n; ++i) sum[i] += wj[i] * xj[i];
        }
        const float* wl = taps + hist * channels + c0;
        for (int64_t i = 0; i < n; ++i) sum[i] = (sum[i] + wl[i] * in[i]) + bc[i];
        for (int64_t j = 0; j + 1 < hist; ++j) {
          std::copy(win + (j + 1) * kBlock, win + (j + 1) * kBlock + n, win + j * kBlock);
        }
        if (hist > 0) std::copy(in, in + n, win + (hist - 1) * kBlock);
        if (avx512) {
          detail::silu_avx512(sum, n, orow);
        } else {
          for (int64_t i = 0; i < n; ++i) orow[i] = silu(sum[i]);
        }
      }
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < hist; ++j) {
          detail::encode_from_f32(&win[j * kBlock + i], 1, state_dtype,
                                  state + ((c0 + i) * hist + j) * state_elem);
        }
      }
    }
  });
  return Status::ok();
}

Status gdn_gating(const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias,
                  Tensor& g, Tensor& beta) {
  constexpr std::string_view kOp = "gdn_gating";
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "a", a, {DType::kF32}, 2));
  const int64_t tokens = a.size(0), heads = a.size(1);
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "b", b, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "b", b, a.shape(), "(shape of a)"));
  VLLM_RETURN_IF_ERROR(detail::check_weight(kOp, "A_log", A_log));
  VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "A_log", A_log, {heads}, "(value heads)"));
  VLLM_RETURN_IF_ERROR(detail::check_weight(kOp, "dt_bias", dt_bias));
  VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "dt_bias", dt_bias, {heads}, "(value heads)"));
  for (auto [name, t] : {std::pair<std::string_view, Tensor*>{"g", &g}, {"beta", &beta}}) {
    VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, name, *t, {DType::kF32}, 2));
    VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, name, *t, a.shape(), "(shape of a)"));
  }
  VLLM_ASSIGN_OR_RETURN(detail::Rows a_rows, detail::as_rows(kOp, "a", a));
  VLLM_ASSIGN_OR_RETURN(detail::Rows b_rows, detail::as_rows(kOp, "b", b));
  VLLM_ASSIGN_OR_RETURN(detail::Rows g_rows, detail::as_rows(kOp, "g", g));
  VLLM_ASSIGN_OR_RETURN(detail::Rows beta_rows, detail::as_rows(kOp, "beta", beta));
  thread_local std::vector<float> neg_a_buf, dt_buf;
  float* neg_a = const_cast<float*>(decode_into(A_log, neg_a_buf));
  for (int64_t h = 0; h < heads; ++h) neg_a[h] = -std::exp(neg_a[h]);
  const float* dt = decode_into(dt_bias, dt_buf);
  for (int64_t t = 0; t < tokens; ++t) {
    const float* ar = a_rows.row<float>(t);
    const float* br = b_rows.row<float>(t);
    float* gr = g_rows.row<float>(t);
    float* betar = beta_rows.row<float>(t);
    for (int64_t h = 0; h < heads; ++h) {
      gr[h] = neg_a[h] * softplus(ar[h] + dt[h]);
      betar[h] = 1.0f / (1.0f + std::exp(-br[h]));
    }
  }
  return Status::ok();
}

Status gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& weight, float eps,
                      Tensor& out) {
  constexpr std::string_view kOp = "gated_rms_norm";
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "x", x, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "z", z, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "z", z, x.shape(), "(shape of x)"));
  VLLM_RETURN_IF_ERROR(detail::check_weight(kOp, "weight", weight));
  VLLM_RETURN_IF_ERROR(detail::check_ndim(kOp, "weight", weight, 1));
  const int64_t dim = weight.size(0);
  if (dim == 0 || x.size(1) % dim != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "gated_rms_norm: x has {} columns, not a multiple of the head size {} "
                      "(weight.size(0))",
                      x.size(1), dim);
  }
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "out", out, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "out", out, x.shape(), "(shape of x)"));
  VLLM_ASSIGN_OR_RETURN(detail::Rows x_rows, detail::as_rows(kOp, "x", x));
  VLLM_ASSIGN_OR_RETURN(detail::Rows z_rows, detail::as_rows(kOp, "z", z));
  VLLM_ASSIGN_OR_RETURN(detail::Rows out_rows, detail::as_rows(kOp, "out", out));
  thread_local std::vector<float> w_buf;
  const float* w = decode_into(weight, w_buf);
  const int64_t heads = x.size(1) / dim;
  parallel_for(0, x.size(0), detail::grain_for(x.size(1) * 4), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        const float* xs = x_rows.row<float>(t) + h * dim;
        const float* zs = z_rows.row<float>(t) + h * dim;
        float* os = out_rows.row<float>(t) + h * dim;
        double sum_sq = 0.0;
        for (int64_t i = 0; i < dim; ++i) sum_sq += static_cast<double>(xs[i]) * xs[i];
        const float variance = static_cast<float>(sum_sq / static_cast<double>(dim));
        const float inv_rms =
            static_cast<float>(1.0 / std::sqrt(static_cast<double>(variance + eps)));
        for (int64_t i = 0; i < dim; ++i) {
          os[i] = (w[i] * (xs[i] * inv_rms)) * silu(zs[i]);
        }
      }
    }
  });
  return Status::ok();
}

}  // namespace vllm::cpu
