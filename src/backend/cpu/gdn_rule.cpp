// The gated delta rule (gdn.h), in its token-by-token recurrent form, in float32.
//
// Why the recurrence and not transformers' chunked form: on the CPU both cost about the same
// per token for the head sizes in use (Dk = Dv = 128), and the recurrence keeps prefill and
// decode one code path whose state after any split of a sequence is the same. Its output
// agrees with the chunked form to float32 rounding (tests/unit/test_gdn.cpp checks both
// against double-precision references of each form).
//
// Work items are (request, value head) pairs; each walks its tokens in order over its own
// [Dk, Dv] state, so items never share memory. q and k are L2-normalised once per key head
// and token before the walk. The per-token step below is the reference; AVX2 / AVX-512 CPUs
// run its variant from vec_kernels.h (one read pass and one read-write pass over the state,
// with FMA), which differs only by f32 rounding.
#include <cmath>
#include <vector>

#include "backend/cpu/common.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/gdn.h"
#include "backend/cpu/gdn_batch.h"
#include "backend/cpu/vec_kernels.h"
#include "base/thread_pool.h"

namespace vllm::cpu {
namespace {

// dst = src * scale / sqrt(sum(src^2) + eps) (transformers' l2norm, then the q scale).
void l2_normalize(const float* src, int64_t n, bool normalize, float eps, float scale, float* dst) {
  float inv = 1.0f;
  if (normalize) {
    double sum_sq = 0.0;
    for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(src[i]) * src[i];
    inv =
        static_cast<float>(1.0 / std::sqrt(static_cast<double>(static_cast<float>(sum_sq) + eps)));
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = (src[i] * inv) * scale;
}

}  // namespace

Status gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                        const Tensor& beta, const GdnBatch& batch,
                        const GatedDeltaRuleParams& params, Tensor& state, Tensor& out) {
  constexpr std::string_view kOp = "gated_delta_rule";
  VLLM_RETURN_IF_ERROR(
      detail::check_tensor(kOp, "state", state, {DType::kF32, DType::kBF16, DType::kF16}, 4));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "state", state));
  const int64_t num_slots = state.size(0), hv = state.size(1), dk = state.size(2),
                dv = state.size(3);
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "q", q, {DType::kF32}, 2));
  const int64_t tokens = q.size(0);
  if (dk == 0 || q.size(1) % dk != 0 || q.size(1) == 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "gated_delta_rule: q has {} columns, expected num_key_heads * {} (the key "
                      "head dim of state {})",
                      q.size(1), dk, shape_to_string(state.shape()));
  }
  const int64_t hk = q.size(1) / dk;
  if (hv % hk != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "gated_delta_rule: {} value heads (state) are not a multiple of {} key "
                      "heads (q)",
                      hv, hk);
  }
  const int64_t group = hv / hk;
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "k", k, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "k", k, q.shape(), "(shape of q)"));
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "v", v, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(
      detail::check_shape(kOp, "v", v, {tokens, hv * dv}, "([tokens, value heads * Dv])"));
  for (auto [name, t] : {std::pair<std::string_view, const Tensor*>{"g", &g}, {"beta", &beta}}) {
    VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, name, *t, {DType::kF32}, 2));
    VLLM_RETURN_IF_ERROR(
        detail::check_shape(kOp, name, *t, {tokens, hv}, "([tokens, value heads])"));
  }
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "out", out, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "out", out, v.shape(), "(shape of v)"));
  VLLM_RETURN_IF_ERROR(detail::check_gdn_batch(kOp, batch, tokens, num_slots));
  VLLM_ASSIGN_OR_RETURN(detail::Rows q_rows, detail::as_rows(kOp, "q", q));
  VLLM_ASSIGN_OR_RETURN(detail::Rows k_rows, detail::as_rows(kOp, "k", k));
  VLLM_ASSIGN_OR_RETURN(detail::Rows v_rows, detail::as_rows(kOp, "v", v));
  VLLM_ASSIGN_OR_RETURN(detail::Rows g_rows, detail::as_rows(kOp, "g", g));
  VLLM_ASSIGN_OR_RETURN(detail::Rows beta_rows, detail::as_rows(kOp, "beta", beta));
  VLLM_ASSIGN_OR_RETURN(detail::Rows out_rows, detail::as_rows(kOp, "out", out));
  if (tokens == 0 || dv == 0) return Status::ok();

  const float scale =
      params.scale != 0.0f ? params.scale : static_cast<float>(1.0 / std::sqrt(double(dk)));
  // Normalised q (scaled) and k: [T, Hk, Dk].
  std::vector<float> qn(static_cast<size_t>(tokens * hk * dk));
  std::vector<float> kn(qn.size());
  float* const qn_data = qn.data();
  float* const kn_data = kn.data();
  parallel_for(0, tokens, detail::grain_for(hk * dk * 4), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      for (int64_t h = 0; h < hk; ++h) {
        const int64_t at = (t * hk + h) * dk;
        l2_normalize(q_rows.row<float>(t) + h * dk, dk, params.use_qk_l2norm, params.l2norm_eps,
                     scale, qn_data + at);
        l2_normalize(k_rows.row<float>(t) + h * dk, dk, params.use_qk_l2norm, params.l2norm_eps,
                     1.0f, kn_data + at);
      }
    }
  });

  const int64_t num_requests = static_cast<int64_t>(batch.state_indices.size());
  // A 16-bit state is read into an f32 copy once per (request, head) and rounded back once
  // after the request's rows (gdn.h); an f32 state is updated in place.
  const DType state_dtype = state.dtype();
  auto* state_base = static_cast<char*>(state.data_ptr());
  const int64_t state_elem = static_cast<int64_t>(state.element_size());
  const CpuIsa isa = active_isa();
  parallel_for(0, num_requests * hv, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> mem, delta, o, wide;
    mem.resize(static_cast<size_t>(dv));
    delta.resize(mem.size());
    o.resize(mem.size());
    if (state_dtype != DType::kF32) wide.resize(static_cast<size_t>(dk * dv));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t r = item / hv, h = item % hv, kh = h / group;
      const int64_t t0 = batch.query_start_loc[r], t1 = batch.query_start_loc[r + 1];
      if (t0 == t1) continue;
      char* stored = state_base + (batch.state_indices[r] * hv + h) * dk * dv * state_elem;
      float* s = reinterpret_cast<float*>(stored);
      if (state_dtype != DType::kF32) {
        s = wide.data();
        detail::decode_to_f32(stored, state_dtype, dk * dv, s);
      }
      for (int64_t t = t0; t < t1; ++t) {
        const float* qt = qn_data + (t * hk + kh) * dk;
        const float* kt = kn_data + (t * hk + kh) * dk;
        const float* vt = v_rows.row<float>(t) + h * dv;
        const float decay = std::exp(g_rows.row<float>(t)[h]);
        const float b = beta_rows.row<float>(t)[h];
        if (isa != CpuIsa::kPortable) {
          detail::DeltaRuleStep step;
          step.state = s;
          step.q = qt;
          step.k = kt;
          step.v = vt;
          step.out = out_rows.row<float>(t) + h * dv;
          step.scratch = delta.data();
          step.decay = decay;
          step.beta = b;
          step.dk = dk;
          step.dv = dv;
          if (isa == CpuIsa::kAvx512) {
            detail::delta_rule_step_avx512(step);
          } else {
            detail::delta_rule_step_avx2(step);
          }
          continue;
        }
        // Decay the state and read what it predicts for k_t.
        std::fill(mem.begin(), mem.end(), 0.0f);
        for (int64_t i = 0; i < dk; ++i) {
          float* row = s + i * dv;
          const float ki = kt[i];
          for (int64_t j = 0; j < dv; ++j) {
            row[j] *= decay;
            mem[j] += row[j] * ki;
          }
        }
        for (int64_t j = 0; j < dv; ++j) delta[j] = (vt[j] - mem[j]) * b;
        // Write the correction and read the output with q_t.
        std::fill(o.begin(), o.end(), 0.0f);
        for (int64_t i = 0; i < dk; ++i) {
          float* row = s + i * dv;
          const float ki = kt[i], qi = qt[i];
          for (int64_t j = 0; j < dv; ++j) {
            row[j] += ki * delta[j];
            o[j] += row[j] * qi;
          }
        }
        std::copy(o.begin(), o.end(), out_rows.row<float>(t) + h * dv);
      }
      if (state_dtype != DType::kF32) detail::encode_from_f32(s, dk * dv, state_dtype, stored);
    }
  });
  return Status::ok();
}

}  // namespace vllm::cpu
