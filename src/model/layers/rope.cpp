// RoPE inverse frequencies and the cos/sin cache (see rope.h for the numerics contract).
//
// Each float32 step below mirrors one torch op of transformers' rope init functions: a Python
// scalar combined with a float32 tensor is first cast to float32; `scalar / tensor` is
// reciprocal(tensor) * scalar (torch's __rtruediv__); pow is evaluated in double and rounded
// (torch's float pow is within an ulp of that). This file is built with -ffp-contract=off
// so no step is fused.
#include "model/layers/rope.h"

#include <algorithm>
#include <cmath>

#include "base/thread_pool.h"

namespace vllm {
namespace {

constexpr double kPi = 3.14159265358979323846;

// 1 / (base ** (arange(0, dim, 2).float() / dim)), all in float32: returns base ** (...).
std::vector<float> pos_freqs(double base, int64_t dim) {
  std::vector<float> out(static_cast<size_t>(dim / 2));
  const float base_f = static_cast<float>(base);
  for (int64_t i = 0; i < dim / 2; ++i) {
    float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    out[static_cast<size_t>(i)] =
        static_cast<float>(std::pow(static_cast<double>(base_f), static_cast<double>(exponent)));
  }
  return out;
}

std::vector<float> default_inv_freq(double base, int64_t dim) {
  std::vector<float> inv = pos_freqs(base, dim);
  for (float& v : inv) v = 1.0f / v;
  return inv;
}

// transformers' _compute_llama3_parameters.
std::vector<float> llama3_inv_freq(const RopeConfig& rope, int64_t dim, int64_t old_context) {
  std::vector<float> inv = default_inv_freq(rope.rope_theta, dim);
  const float factor = static_cast<float>(rope.factor);
  const float low_freq_wavelen = static_cast<float>(old_context / rope.low_freq_factor);
  const float high_freq_wavelen = static_cast<float>(old_context / rope.high_freq_factor);
  const float two_pi = static_cast<float>(2 * kPi);
  const float old_context_f = static_cast<float>(old_context);
  const float low_f = static_cast<float>(rope.low_freq_factor);
  const float span = static_cast<float>(rope.high_freq_factor - rope.low_freq_factor);
  for (float& v : inv) {
    float wavelen = (1.0f / v) * two_pi;
    float scaled = wavelen > low_freq_wavelen ? v / factor : v;
    float smooth = ((1.0f / wavelen) * old_context_f - low_f) / span;
    float a = ((1.0f - smooth) * scaled) / factor;
    float b = smooth * scaled;
    float smoothed = a + b;
    bool is_medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    v = is_medium ? smoothed : scaled;
  }
  return inv;
}

double yarn_get_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// transformers' _compute_yarn_parameters: returns inv_freq, sets *attention_factor.
std::vector<float> yarn_inv_freq(const RopeConfig& rope, int64_t dim, int64_t original_max,
                                 double* attention_factor) {
  const double factor = rope.factor;
  if (rope.attention_factor.has_value()) {
    *attention_factor = *rope.attention_factor;
  } else if (rope.mscale.value_or(0.0) != 0.0 && rope.mscale_all_dim.value_or(0.0) != 0.0) {
    *attention_factor =
        yarn_get_mscale(factor, *rope.mscale) / yarn_get_mscale(factor, *rope.mscale_all_dim);
  } else {
    *attention_factor = yarn_get_mscale(factor, 1.0);
  }
  // `get("beta_fast") or 32`: zero means the default too.
  const double beta_fast = rope.beta_fast != 0.0 ? rope.beta_fast : 32.0;
  const double beta_slow = rope.beta_slow != 0.0 ? rope.beta_slow : 1.0;
  const double base = rope.rope_theta;
  auto correction_dim = [&](double num_rotations) {
    return (static_cast<double>(dim) *
            std::log(static_cast<double>(original_max) / (num_rotations * 2 * kPi))) /
           (2 * std::log(base));
  };
  double low = correction_dim(beta_fast);
  double high = correction_dim(beta_slow);
  if (rope.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp

  const std::vector<float> pos = pos_freqs(base, dim);
  const float factor_f = static_cast<float>(factor);
  const float low_f = static_cast<float>(low);
  const float width_f = static_cast<float>(high - low);
  std::vector<float> inv(pos.size());
  for (size_t i = 0; i < pos.size(); ++i) {
    float extrapolation = 1.0f / pos[i];
    float interpolation = 1.0f / (factor_f * pos[i]);
    float ramp = std::clamp((static_cast<float>(i) - low_f) / width_f, 0.0f, 1.0f);
    float extrapolation_factor = 1.0f - ramp;
    float a = interpolation * (1.0f - extrapolation_factor);
    float b = extrapolation * extrapolation_factor;
    inv[i] = a + b;
  }
  return inv;
}

Status check_positive(std::string_view field, double value, std::string_view rope_type) {
  if (value > 0.0 && std::isfinite(value)) return Status::ok();
  return make_error(ErrorCode::kInvalidArgument,
                    "rope {}: {} is {}, expected a positive finite number", rope_type, field,
                    value);
}

}  // namespace

Expected<int64_t> rotary_dim(const RopeConfig& rope, int64_t head_dim) {
  const double product = static_cast<double>(head_dim) * rope.partial_rotary_factor;
  const int64_t dim = std::isfinite(product) && std::abs(product) < 1e15
                          ? static_cast<int64_t>(product)  // int() truncates toward zero
                          : -1;
  if (head_dim <= 0 || dim <= 0 || dim % 2 != 0 || dim > head_dim) {
    return make_error(ErrorCode::kInvalidArgument,
                      "rope: head_dim {} x partial_rotary_factor {} gives {} rotated dims; "
                      "expected an even number in [2, head_dim]",
                      head_dim, rope.partial_rotary_factor, dim);
  }
  return dim;
}

Expected<RopeFrequencies> compute_rope_frequencies(const RopeConfig& rope, int64_t rot_dim,
                                                   int64_t max_position) {
  const std::string& type = rope.rope_type;
  if (type != "default" && type != "linear" && type != "llama3" && type != "yarn") {
    return make_error(ErrorCode::kUnsupported,
                      "rope_type '{}' is not supported (supported: default, linear, llama3, yarn)",
                      type);
  }
  if (rot_dim <= 0 || rot_dim % 2 != 0) {
    return make_error(ErrorCode::kInvalidArgument, "rope: rot_dim {} must be even and positive",
                      rot_dim);
  }
  VLLM_RETURN_IF_ERROR(check_positive("rope_theta", rope.rope_theta, type));
  if (type != "default") VLLM_RETURN_IF_ERROR(check_positive("factor", rope.factor, type));
  const int64_t original_max = rope.original_max_position_embeddings > 0
                                   ? rope.original_max_position_embeddings
                                   : max_position;

  RopeFrequencies out;
  if (type == "default") {
    out.inv_freq = default_inv_freq(rope.rope_theta, rot_dim);
  } else if (type == "linear") {
    out.inv_freq = default_inv_freq(rope.rope_theta, rot_dim);
    const float factor = static_cast<float>(rope.factor);
    for (float& v : out.inv_freq) v = v / factor;
  } else if (type == "llama3") {
    VLLM_RETURN_IF_ERROR(check_positive("low_freq_factor", rope.low_freq_factor, type));
    VLLM_RETURN_IF_ERROR(check_positive("high_freq_factor", rope.high_freq_factor, type));
    if (rope.high_freq_factor == rope.low_freq_factor) {
      return make_error(ErrorCode::kInvalidArgument,
                        "rope llama3: high_freq_factor equals low_freq_factor ({}); they must "
                        "differ",
                        rope.low_freq_factor);
    }
    if (original_max <= 0) {
      return make_error(ErrorCode::kInvalidArgument,
                        "rope llama3: original_max_position_embeddings is missing");
    }
    out.inv_freq = llama3_inv_freq(rope, rot_dim, original_max);
  } else {  // yarn
    if (rope.rope_theta == 1.0) {
      return make_error(ErrorCode::kInvalidArgument, "rope yarn: rope_theta must not be 1");
    }
    if (original_max <= 0) {
      return make_error(ErrorCode::kInvalidArgument,
                        "rope yarn: original_max_position_embeddings is missing");
    }
    out.inv_freq = yarn_inv_freq(rope, rot_dim, original_max, &out.attention_factor);
  }
  return out;
}

Expected<Tensor> compute_cos_sin_cache(const RopeConfig& rope, int64_t head_dim,
                                       int64_t max_position) {
  VLLM_ASSIGN_OR_RETURN(int64_t rot_dim, rotary_dim(rope, head_dim));
  if (max_position <= 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "rope: max_position is {}, expected a positive cache length", max_position);
  }
  VLLM_ASSIGN_OR_RETURN(RopeFrequencies freqs,
                        compute_rope_frequencies(rope, rot_dim, max_position));
  VLLM_ASSIGN_OR_RETURN(Tensor cache, Tensor::try_empty({max_position, rot_dim}, DType::kF32));
  float* data = cache.data<float>();
  const int64_t half = rot_dim / 2;
  const float scale = static_cast<float>(freqs.attention_factor);
  parallel_for(0, max_position, std::max<int64_t>(1, 4096 / half), [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      float* row = data + p * rot_dim;
      const float position = static_cast<float>(p);  // exact below 2^24
      for (int64_t i = 0; i < half; ++i) {
        // The float32 product transformers forms (inv_freq @ positions in float32).
        const double angle = static_cast<double>(position * freqs.inv_freq[static_cast<size_t>(i)]);
        row[i] = static_cast<float>(std::cos(angle)) * scale;
        row[half + i] = static_cast<float>(std::sin(angle)) * scale;
      }
    }
  });
  return cache;
}

}  // namespace vllm
