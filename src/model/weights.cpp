#include "model/weights.h"

#include <cstring>
#include <vector>

#include "backend/cpu/weight_memory.h"
#include "base/counter_rng.h"
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

Status check_slice(const std::string& name, const Shape& shape, const WeightSlice& slice) {
  if (slice.dim < 0 || slice.dim >= static_cast<int>(shape.size()) || slice.begin < 0 ||
      slice.begin > slice.end || slice.end > shape[static_cast<size_t>(slice.dim)]) {
    return make_error(ErrorCode::kInvalidArgument,
                      "tensor '{}' of shape {}: slice [{}, {}) of dimension {} is out of range",
                      name, shape_to_string(shape), slice.begin, slice.end, slice.dim);
  }
  return Status::ok();
}

bool whole(const Shape& shape, const WeightSlice& slice) {
  return slice.begin == 0 && slice.end == shape[static_cast<size_t>(slice.dim)];
}

}  // namespace

Expected<Tensor> WeightSource::get_slice(const std::string& name, const Shape& shape,
                                         const WeightSlice& slice) {
  VLLM_RETURN_IF_ERROR(check_slice(name, shape, slice));
  VLLM_ASSIGN_OR_RETURN(Tensor t, get(name, shape));
  if (whole(shape, slice)) return t;
  return t.slice(slice.dim, slice.begin, slice.end);
}

Expected<Tensor> contiguous_weight(const Tensor& t, const ExecContext* ctx) {
  if (t.is_contiguous()) return t;
  VLLM_CHECK_MSG(t.device().is_cpu() && t.ndim() >= 1 && t.stride(-1) == 1,
                 "contiguous_weight of {}", t.to_string());
  VLLM_ASSIGN_OR_RETURN(Tensor out, empty_weight(t.shape(), t.dtype(), Device::cpu(), ctx));
  // One memcpy per innermost row, walking the leading indices in row-major order.
  const size_t row_bytes = static_cast<size_t>(t.size(-1)) * t.element_size();
  const int64_t rows = t.size(-1) == 0 ? 0 : t.numel() / t.size(-1);
  const auto lead = static_cast<size_t>(t.ndim() - 1);
  std::vector<int64_t> index(lead, 0);
  const char* src = static_cast<const char*>(t.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  for (int64_t r = 0; r < rows; ++r) {
    int64_t offset = 0;
    for (size_t k = 0; k < lead; ++k) offset += index[k] * t.strides()[k];
    std::memcpy(dst + static_cast<size_t>(r) * row_bytes,
                src + offset * static_cast<int64_t>(t.element_size()), row_bytes);
    for (size_t k = lead; k-- > 0;) {
      if (++index[k] < t.shape()[k]) break;
      index[k] = 0;
    }
  }
  return out;
}

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
  return place(name, std::move(host));
}

Expected<Tensor> DeviceWeights::get_slice(const std::string& name, const Shape& shape,
                                          const WeightSlice& slice) {
  VLLM_RETURN_IF_ERROR(check_slice(name, shape, slice));
  if (whole(shape, slice)) return get(name, shape);
  VLLM_ASSIGN_OR_RETURN(Tensor host, inner_.get_slice(name, shape, slice));
  if (host.device().is_cpu() && !host.is_contiguous()) {
    // A column shard: only its elements are copied, straight into the weight arena on the CPU.
    const bool arena = ctx_.device.is_cpu() && ctx_.weight_arena != nullptr;
    VLLM_ASSIGN_OR_RETURN(host, contiguous_weight(host, arena ? &ctx_ : nullptr));
    if (arena) return host;
  }
  return place(name, std::move(host));
}

Expected<Tensor> DeviceWeights::place(const std::string& name, Tensor host) {
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
    : dtype_(dtype), device_(device), seed_(seed) {
  VLLM_CHECK_MSG(device.is_cpu() || device.is_meta(), "dummy weights on {}", device.to_string());
  VLLM_CHECK_MSG(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
                 "dummy weights of dtype {}", dtype_name(dtype));
}

DummyWeights::DummyWeights(const ExecContext& ctx, uint64_t seed)
    : dtype_(ctx.act_dtype), device_(ctx.device), ctx_(&ctx), seed_(seed) {}

uint64_t DummyWeights::stream_of(const std::string& name) {
  // One counter-based stream per tensor, keyed by the order names are first asked for.
  auto [it, added] = stream_by_name_.emplace(name, stream_by_name_.size() + 1);
  return seed_ * kSplitMix64Increment + it->second;
}

Expected<Tensor> DummyWeights::get(const std::string& name, const Shape& shape) {
  return get_slice(name, shape, WeightSlice{0, 0, shape.empty() ? 0 : shape[0]});
}

Expected<Tensor> DummyWeights::get_slice(const std::string& name, const Shape& full,
                                         const WeightSlice& slice) {
  Shape shape = full;
  if (!full.empty()) {
    VLLM_RETURN_IF_ERROR(check_slice(name, full, slice));
    shape[static_cast<size_t>(slice.dim)] = slice.end - slice.begin;
  }
  auto made = Tensor::try_empty(shape, dtype_, device_);
  if (!made) {
    return out_of_memory(name, Tensor::empty(shape, dtype_, Device::meta()), device_,
                         made.status());
  }
  Tensor t = *made;
  numel_by_name_[name] = t.numel();
  const uint64_t stream = stream_of(name);
  if (device_.is_meta()) return t;
  if (!device_.is_cpu()) {
    VLLM_RETURN_IF_ERROR(ops::fill_uniform(*ctx_, t, -1e-3f, 1e-3f, stream));
    return t;
  }
  // The slice as [outer, n, inner] of the full [outer, full_n, inner]: element (o, j, x)
  // is element ((o * full_n + begin + j) * inner + x) of the full tensor.
  int64_t outer = 1, inner = 1, full_n = 1, begin = 0;
  if (!full.empty()) {
    const auto d = static_cast<size_t>(slice.dim);
    for (size_t k = 0; k < d; ++k) outer *= full[k];
    for (size_t k = d + 1; k < full.size(); ++k) inner *= full[k];
    full_n = full[d];
    begin = slice.begin;
  }
  const int64_t n = full.empty() ? 1 : shape[static_cast<size_t>(slice.dim)];
  float* f32 = dtype_ == DType::kF32 ? t.data<float>() : nullptr;
  uint16_t* half = dtype_ == DType::kF32 ? nullptr : t.data<uint16_t>();
  int64_t i = 0;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < n; ++j) {
      const auto base = static_cast<uint64_t>((o * full_n + begin + j) * inner);
      for (int64_t x = 0; x < inner; ++x, ++i) {
        const float v = counter_uniform(stream, base + static_cast<uint64_t>(x), -1e-3f, 1e-3f);
        if (f32 != nullptr) {
          f32[i] = v;
        } else {
          half[i] = dtype_ == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
        }
      }
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
