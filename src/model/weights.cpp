#include "model/weights.h"

#include <cstring>

#include "base/float_convert.h"

namespace vllm {

Expected<Tensor> CheckpointWeights::get(const std::string& name, const Shape& shape) {
  VLLM_ASSIGN_OR_RETURN(Tensor t, checkpoint_.tensor(name));
  if (t.shape() != shape) {
    return make_error(ErrorCode::kInvalidFormat, "tensor '{}' has shape {}, expected {}", name,
                      shape_to_string(t.shape()), shape_to_string(shape));
  }
  if (!dtype_is_float(t.dtype()) || t.dtype() == DType::kF64) {
    return make_error(ErrorCode::kUnsupported,
                      "tensor '{}' has dtype {}; weights must be F32, "
                      "BF16, F16 or FP8",
                      name, dtype_name(t.dtype()));
  }
  return t;
}

DummyWeights::DummyWeights(DType dtype, Device device, uint64_t seed)
    : dtype_(dtype), device_(device), state_(seed * 0x9E3779B97F4A7C15ULL + 1) {
  VLLM_CHECK_MSG(device.is_cpu() || device.is_meta(), "dummy weights on {}", device.to_string());
  VLLM_CHECK_MSG(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
                 "dummy weights of dtype {}", dtype_name(dtype));
}

Expected<Tensor> DummyWeights::get(const std::string& name, const Shape& shape) {
  VLLM_ASSIGN_OR_RETURN(Tensor t, Tensor::try_empty(shape, dtype_, device_));
  numel_by_name_[name] = t.numel();
  if (device_.is_meta()) return t;
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    // splitmix64 -> uniform [-1e-3, 1e-3)
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    const float value = (static_cast<float>(z >> 40) / 16777216.0f * 2.0f - 1.0f) * 1e-3f;
    switch (dtype_) {
      case DType::kF32:
        t.data<float>()[i] = value;
        break;
      case DType::kBF16:
        t.data<uint16_t>()[i] = f32_to_bf16(value);
        break;
      default:
        t.data<uint16_t>()[i] = f32_to_f16(value);
        break;
    }
  }
  return t;
}

int64_t DummyWeights::num_parameters() const {
  int64_t total = 0;
  for (const auto& [name, numel] : numel_by_name_) total += numel;
  return total;
}

Expected<Tensor> concat_rows(const std::vector<Tensor>& parts) {
  VLLM_CHECK(!parts.empty());
  const DType dtype = parts[0].dtype();
  const int64_t cols = parts[0].size(-1);
  int64_t rows = 0;
  for (const Tensor& p : parts) {
    VLLM_CHECK_MSG(p.ndim() == 2 && p.dtype() == dtype && p.size(1) == cols && p.is_contiguous(),
                   "concat_rows of {}", p.to_string());
    rows += p.size(0);
  }
  if (parts[0].device().is_meta()) return Tensor::empty({rows, cols}, dtype, Device::meta());
  VLLM_ASSIGN_OR_RETURN(Tensor out, Tensor::try_empty({rows, cols}, dtype));
  char* dst = static_cast<char*>(out.data_ptr());
  for (const Tensor& p : parts) {
    std::memcpy(dst, p.data_ptr(), p.nbytes());
    dst += p.nbytes();
  }
  return out;
}

}  // namespace vllm
