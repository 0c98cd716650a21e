#include "model/weights.h"

#include <cstring>

#include "backend/cpu/weight_memory.h"
#include "base/float_convert.h"
#include "ops/ops.h"

namespace vllm {
namespace {

Status out_of_memory(const std::string& name, const Tensor& like, Device device,
                     const Status& cause) {
  const DeviceMemory m = device_memory(device);
  return make_error(cause.code(),
                    "cannot place weight '{}' ({} bytes) on {}: {} ({:.2f} GiB free of {:.2f} GiB)",
                    name, like.nbytes(), device.to_string(), cause.message(),
                    static_cast<double>(m.free_bytes) / (1 << 30),
                    static_cast<double>(m.total_bytes) / (1 << 30));
}

}  // namespace

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

Expected<Tensor> DeviceWeights::get(const std::string& name, const Shape& shape) {
  VLLM_ASSIGN_OR_RETURN(Tensor host, inner_.get(name, shape));
  if (ctx_.device.is_cpu() && ctx_.weight_arena != nullptr) return ctx_.weight_arena->copy(host);
  if (!ctx_.device.is_cuda() || !host.device().is_cpu()) return host;
  DType target = host.dtype();
  if (host.ndim() >= 2) {
    target = ctx_.act_dtype;
  } else if (host.dtype() == DType::kF16) {
    target = DType::kF32;
  }
  if (target != DType::kF32 && target != DType::kBF16 && target != DType::kF16) {
    return make_error(ErrorCode::kUnsupported, "tensor '{}' has dtype {}, which CUDA cannot load",
                      name, dtype_name(host.dtype()));
  }
  auto raw = Tensor::try_empty(host.shape(), host.dtype(), ctx_.device);
  if (!raw) return out_of_memory(name, host, ctx_.device, raw.status());
  VLLM_RETURN_IF_ERROR(ops::copy(ctx_, host, *raw));
  if (target == host.dtype()) return *raw;
  auto out = Tensor::try_empty(host.shape(), target, ctx_.device);
  if (!out) return out_of_memory(name, host, ctx_.device, out.status());
  VLLM_RETURN_IF_ERROR(ops::convert(ctx_, *raw, *out));
  return *out;
}

DummyWeights::DummyWeights(DType dtype, Device device, uint64_t seed)
    : dtype_(dtype), device_(device), seed_(seed), state_(seed * 0x9E3779B97F4A7C15ULL + 1) {
  VLLM_CHECK_MSG(device.is_cpu() || device.is_meta(), "dummy weights on {}", device.to_string());
  VLLM_CHECK_MSG(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
                 "dummy weights of dtype {}", dtype_name(dtype));
}

DummyWeights::DummyWeights(const ExecContext& ctx, uint64_t seed)
    : dtype_(ctx.act_dtype),
      device_(ctx.device),
      ctx_(&ctx),
      seed_(seed),
      state_(seed * 0x9E3779B97F4A7C15ULL + 1) {}

Expected<Tensor> DummyWeights::get(const std::string& name, const Shape& shape) {
  auto made = Tensor::try_empty(shape, dtype_, device_);
  if (!made) {
    return out_of_memory(name, Tensor::empty(shape, dtype_, Device::meta()), device_,
                         made.status());
  }
  Tensor t = *made;
  numel_by_name_[name] = t.numel();
  if (device_.is_meta()) return t;
  if (!device_.is_cpu()) {
    // One counter-based stream per tensor, keyed by its order of creation.
    const uint64_t tensor_seed = seed_ * 0x9E3779B97F4A7C15ULL + numel_by_name_.size();
    VLLM_RETURN_IF_ERROR(ops::fill_uniform(*ctx_, t, -1e-3f, 1e-3f, tensor_seed));
    return t;
  }
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

Expected<Tensor> empty_weight(const Shape& shape, DType dtype, Device device,
                              const ExecContext* ctx) {
  if (device.is_cpu() && ctx != nullptr && ctx->weight_arena != nullptr) {
    return ctx->weight_arena->allocate(shape, dtype);
  }
  return Tensor::try_empty(shape, dtype, device);
}

Expected<Tensor> concat_rows(const std::vector<Tensor>& parts, const ExecContext* ctx) {
  VLLM_CHECK(!parts.empty());
  const DType dtype = parts[0].dtype();
  const Device device = parts[0].device();
  const int64_t cols = parts[0].size(-1);
  int64_t rows = 0;
  for (const Tensor& p : parts) {
    VLLM_CHECK_MSG(p.ndim() == 2 && p.dtype() == dtype && p.size(1) == cols && p.is_contiguous() &&
                       p.device() == device,
                   "concat_rows of {}", p.to_string());
    rows += p.size(0);
  }
  if (device.is_meta()) return Tensor::empty({rows, cols}, dtype, Device::meta());
  VLLM_ASSIGN_OR_RETURN(Tensor out, empty_weight({rows, cols}, dtype, device, ctx));
  if (device.is_cpu()) {
    char* dst = static_cast<char*>(out.data_ptr());
    for (const Tensor& p : parts) {
      std::memcpy(dst, p.data_ptr(), p.nbytes());
      dst += p.nbytes();
    }
    return out;
  }
  if (ctx == nullptr) {
    return make_error(ErrorCode::kInvalidArgument, "concat_rows of {} tensors needs a context",
                      device.to_string());
  }
  int64_t row = 0;
  for (const Tensor& p : parts) {
    Tensor dst = out.slice(0, row, row + p.size(0));
    VLLM_RETURN_IF_ERROR(ops::copy(*ctx, p, dst));
    row += p.size(0);
  }
  return out;
}

}  // namespace vllm
