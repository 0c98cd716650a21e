#include "model/weights.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <vector>

#include "backend/cpu/weight_memory.h"
#include "base/counter_rng.h"
#include "base/float_convert.h"
#include "ops/ops.h"
#include "tensor/block_fp8.h"

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

Expected<LinearWeight> WeightSource::get_linear(const std::string& name, const Shape& shape) {
  VLLM_ASSIGN_OR_RETURN(Tensor t, get(name, shape));
  return LinearWeight(std::move(t));
}

Expected<LinearWeight> WeightSource::get_linear_slice(const std::string& name, const Shape& shape,
                                                      const WeightSlice& slice) {
  VLLM_RETURN_IF_ERROR(check_slice(name, shape, slice));
  VLLM_ASSIGN_OR_RETURN(LinearWeight w, get_linear(name, shape));
  if (whole(shape, slice)) return w;
  return slice_linear(name, w, slice);
}

std::string fp8_scale_name(const std::string& name) {
  return name + "_scale_inv";
}

Expected<WeightBlock> fp8_weight_block(const QuantizationConfig& q) {
  if (q.quant_method != "fp8") {
    return make_error(ErrorCode::kUnsupported,
                      "quantization_config.quant_method '{}' is not supported (block-scaled "
                      "'fp8' checkpoints are)",
                      q.quant_method);
  }
  if (!q.fmt.empty() && q.fmt != "e4m3") {
    return make_error(ErrorCode::kUnsupported,
                      "quantization_config.fmt '{}' is not supported (e4m3 is)", q.fmt);
  }
  if (!q.activation_scheme.empty() && q.activation_scheme != "dynamic") {
    return make_error(ErrorCode::kUnsupported,
                      "quantization_config.activation_scheme '{}' is not supported with "
                      "block-scaled weights (dynamic is, as in vLLM)",
                      q.activation_scheme);
  }
  if (q.weight_block_size.empty()) {
    return make_error(ErrorCode::kUnsupported,
                      "quantization_config has no weight_block_size: per-tensor FP8 scales are "
                      "not supported, block-scaled ones (e.g. [128, 128]) are");
  }
  if (q.weight_block_size.size() != 2 || q.weight_block_size[0] <= 0 ||
      q.weight_block_size[1] <= 0) {
    return make_error(ErrorCode::kInvalidFormat,
                      "quantization_config.weight_block_size {} must be two positive sizes",
                      shape_to_string(q.weight_block_size));
  }
  return WeightBlock{q.weight_block_size[0], q.weight_block_size[1]};
}

Expected<Tensor> CheckpointWeights::read(const std::string& name, const Shape& shape) {
  VLLM_ASSIGN_OR_RETURN(Tensor t, checkpoint_.tensor(name));
  if (t.shape() != shape) {
    return make_error(ErrorCode::kInvalidFormat, "tensor '{}' has shape {}, expected {}", name,
                      shape_to_string(t.shape()), shape_to_string(shape));
  }
  const DType d = t.dtype();
  if (d != DType::kF32 && d != DType::kBF16 && d != DType::kF16 && d != DType::kF8E4M3) {
    return make_error(ErrorCode::kUnsupported,
                      "tensor '{}' has dtype {}; weights must be F32, BF16, F16 or F8_E4M3 "
                      "(with block scales)",
                      name, dtype_name(d));
  }
  return t;
}

Expected<Tensor> CheckpointWeights::get(const std::string& name, const Shape& shape) {
  VLLM_ASSIGN_OR_RETURN(Tensor t, read(name, shape));
  if (t.dtype() == DType::kF8E4M3) {
    return make_error(ErrorCode::kUnsupported,
                      "tensor '{}' is F8_E4M3, but it is not the weight of a linear layer: only "
                      "attention, Gated DeltaNet projection, MLP and expert weights may be FP8",
                      name);
  }
  return t;
}

Expected<LinearWeight> CheckpointWeights::get_linear(const std::string& name, const Shape& shape) {
  VLLM_ASSIGN_OR_RETURN(Tensor t, read(name, shape));
  if (t.dtype() != DType::kF8E4M3) return LinearWeight(std::move(t));
  if (!fp8_block_) {
    return make_error(ErrorCode::kInvalidFormat,
                      "tensor '{}' is F8_E4M3, but config.json has no quantization_config "
                      "(quant_method \"fp8\" with weight_block_size) to say how it is scaled",
                      name);
  }
  const std::string scale_name = fp8_scale_name(name);
  if (!checkpoint_.contains(scale_name)) {
    return make_error(ErrorCode::kInvalidFormat,
                      "FP8 tensor '{}' has no scales: '{}' is not in the checkpoint", name,
                      scale_name);
  }
  VLLM_ASSIGN_OR_RETURN(Tensor scales, checkpoint_.tensor(scale_name));
  const Shape want = fp8_scale_shape(shape, *fp8_block_);
  if (scales.shape() != want) {
    return make_error(ErrorCode::kInvalidFormat,
                      "tensor '{}' has shape {}, expected {}: one scale per {}x{} block "
                      "(weight_block_size) of '{}' {}",
                      scale_name, shape_to_string(scales.shape()), shape_to_string(want),
                      fp8_block_->n, fp8_block_->k, name, shape_to_string(shape));
  }
  if (scales.dtype() == DType::kBF16 || scales.dtype() == DType::kF16) {
    // Widened (exactly) once here; the kernels read F32 scales.
    VLLM_ASSIGN_OR_RETURN(Tensor wide, Tensor::try_empty(scales.shape(), DType::kF32));
    const auto* bits = scales.data<uint16_t>();
    for (int64_t i = 0; i < scales.numel(); ++i) {
      wide.data<float>()[i] =
          scales.dtype() == DType::kBF16 ? bf16_to_f32(bits[i]) : f16_to_f32(bits[i]);
    }
    scales = wide;
  } else if (scales.dtype() != DType::kF32) {
    return make_error(ErrorCode::kUnsupported,
                      "tensor '{}' has dtype {}; FP8 scales must be F32, BF16 or F16", scale_name,
                      dtype_name(scales.dtype()));
  }
  return LinearWeight(std::move(t), std::move(scales), *fp8_block_);
}

Expected<LinearWeight> Fp8QuantizedWeights::get_linear(const std::string& name,
                                                       const Shape& shape) {
  VLLM_ASSIGN_OR_RETURN(LinearWeight w, inner_.get_linear(name, shape));
  if (w.is_fp8()) return w;
  if (w.device().is_meta()) {
    return LinearWeight(
        Tensor::empty(w.shape(), DType::kF8E4M3, Device::meta()),
        Tensor::empty(fp8_scale_shape(w.shape(), block_), DType::kF32, Device::meta()), block_);
  }
  if (!w.device().is_cpu()) {
    return make_error(ErrorCode::kUnsupported,
                      "--quantization fp8 quantizes weights on the host, but '{}' is on {}", name,
                      w.device().to_string());
  }
  const Tensor src = w.weight.is_contiguous() ? w.weight : w.weight.clone();
  return quantize_fp8_blocks(src, block_, name);
}

Expected<Tensor> DeviceWeights::get(const std::string& name, const Shape& shape) {
  VLLM_ASSIGN_OR_RETURN(Tensor host, inner_.get(name, shape));
  return place(name, host);
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
  return place(name, host);
}

Expected<LinearWeight> DeviceWeights::get_linear(const std::string& name, const Shape& shape) {
  VLLM_ASSIGN_OR_RETURN(LinearWeight w, inner_.get_linear(name, shape));
  return place_linear(name, std::move(w));
}

Expected<LinearWeight> DeviceWeights::get_linear_slice(const std::string& name, const Shape& shape,
                                                       const WeightSlice& slice) {
  VLLM_RETURN_IF_ERROR(check_slice(name, shape, slice));
  if (whole(shape, slice)) return get_linear(name, shape);
  VLLM_ASSIGN_OR_RETURN(LinearWeight w, inner_.get_linear_slice(name, shape, slice));
  // A column shard is strided: only its elements are copied, into contiguous memory -- the
  // weight arena on the CPU, where that is the weight's place; elsewhere it is then placed
  // as a whole weight would be.
  const bool arena = ctx_.device.is_cpu() && ctx_.weight_arena != nullptr;
  for (Tensor* t : {&w.weight, &w.scale_inv}) {
    if (!t->defined() || !t->device().is_cpu()) continue;
    if (!t->is_contiguous()) {
      VLLM_ASSIGN_OR_RETURN(*t, contiguous_weight(*t, arena ? &ctx_ : nullptr));
    } else if (arena) {
      VLLM_ASSIGN_OR_RETURN(*t, ctx_.weight_arena->copy(*t));
    }
  }
  if (arena) return w;
  return place_linear(name, std::move(w));
}

Expected<LinearWeight> DeviceWeights::place_linear(const std::string& name, LinearWeight w) {
  if (!w.is_fp8()) {
    VLLM_ASSIGN_OR_RETURN(Tensor placed, place(name, w.weight));
    return LinearWeight(std::move(placed));
  }
  if (ctx_.device.is_cuda() && w.device().is_cpu()) {
    // The e4m3 bytes and the F32 scales as they are: the FP8 kernels read them.
    LinearWeight placed(Tensor(), Tensor(), w.block);
    for (auto [src, dst] :
         {std::pair{&w.weight, &placed.weight}, std::pair{&w.scale_inv, &placed.scale_inv}}) {
      auto t = Tensor::try_empty(src->shape(), src->dtype(), ctx_.device);
      if (!t) return out_of_memory(name, *src, ctx_.device, t.status());
      VLLM_RETURN_IF_ERROR(ops::copy(ctx_, *src, *t));
      *dst = *t;
    }
    return placed;
  }
  if (ctx_.device.is_cpu() && ctx_.weight_arena != nullptr) {
    VLLM_ASSIGN_OR_RETURN(w.weight, ctx_.weight_arena->copy(w.weight));
    VLLM_ASSIGN_OR_RETURN(w.scale_inv, ctx_.weight_arena->copy(w.scale_inv));
  }
  return w;
}

Expected<Tensor> DeviceWeights::place(const std::string& name, const Tensor& host) {
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

DummyWeights::DummyWeights(DType dtype, Device device, uint64_t seed,
                           std::optional<WeightBlock> fp8_block,
                           std::vector<std::string> unquantized)
    : dtype_(dtype),
      device_(device),
      fp8_block_(fp8_block),
      unquantized_(std::move(unquantized)),
      seed_(seed) {
  VLLM_CHECK_MSG(device.is_cpu() || device.is_meta(), "dummy weights on {}", device.to_string());
  VLLM_CHECK_MSG(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
                 "dummy weights of dtype {}", dtype_name(dtype));
}

DummyWeights::DummyWeights(const ExecContext& ctx, uint64_t seed,
                           std::optional<WeightBlock> fp8_block,
                           std::vector<std::string> unquantized)
    : dtype_(ctx.act_dtype),
      device_(ctx.device),
      fp8_block_(fp8_block),
      unquantized_(std::move(unquantized)),
      ctx_(&ctx),
      seed_(seed) {}

bool DummyWeights::quantized(const std::string& name) const {
  if (!fp8_block_) return false;
  constexpr std::string_view kSuffix = ".weight";
  std::string_view module = name;
  if (module.ends_with(kSuffix)) module.remove_suffix(kSuffix.size());
  for (const std::string& skip : unquantized_) {
    if (module == skip ||
        (module.starts_with(skip) && module.size() > skip.size() && module[skip.size()] == '.')) {
      return false;
    }
  }
  return true;
}

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

Expected<LinearWeight> DummyWeights::get_linear(const std::string& name, const Shape& shape) {
  return get_linear_slice(name, shape, WeightSlice{0, 0, shape.empty() ? 0 : shape[0]});
}

Expected<LinearWeight> DummyWeights::get_linear_slice(const std::string& name, const Shape& full,
                                                      const WeightSlice& slice) {
  // Float: the slice's values (get_slice). FP8: those values quantized on their own, block by
  // block from the slice's first row and column (a shard's grid, not the full tensor's).
  if (!quantized(name)) {
    VLLM_ASSIGN_OR_RETURN(Tensor values, get_slice(name, full, slice));
    return LinearWeight(std::move(values));
  }
  if (ctx_ != nullptr) {  // on the device: e4m3 codes under one scale (see the header)
    VLLM_RETURN_IF_ERROR(check_slice(name, full, slice));
    Shape shape = full;
    shape[static_cast<size_t>(slice.dim)] = slice.end - slice.begin;
    const Shape grid = fp8_scale_shape(shape, *fp8_block_);
    auto codes = Tensor::try_empty(shape, DType::kF8E4M3, device_);
    if (!codes) {
      return out_of_memory(name, Tensor::empty(shape, DType::kF8E4M3, Device::meta()), device_,
                           codes.status());
    }
    auto scales = Tensor::try_empty(grid, DType::kF32, device_);
    if (!scales) {
      return out_of_memory(name, Tensor::empty(grid, DType::kF32, Device::meta()), device_,
                           scales.status());
    }
    numel_by_name_[name] = codes->numel();
    const uint64_t stream = stream_of(name);
    VLLM_RETURN_IF_ERROR(ops::fill_uniform(*ctx_, *codes, -448.0f, 448.0f, stream));
    constexpr float kScale = 1e-3f / 448.0f;
    VLLM_RETURN_IF_ERROR(ops::fill_uniform(*ctx_, *scales, kScale, kScale, stream));
    return LinearWeight(*codes, *scales, *fp8_block_);
  }
  if (device_.is_meta()) {
    VLLM_RETURN_IF_ERROR(check_slice(name, full, slice));
    Shape shape = full;
    shape[static_cast<size_t>(slice.dim)] = slice.end - slice.begin;
    LinearWeight w(Tensor::empty(shape, DType::kF8E4M3, Device::meta()),
                   Tensor::empty(fp8_scale_shape(shape, *fp8_block_), DType::kF32, Device::meta()),
                   *fp8_block_);
    numel_by_name_[name] = w.weight.numel();
    stream_of(name);
    return w;
  }
  VLLM_ASSIGN_OR_RETURN(Tensor values, get_slice(name, full, slice));
  return quantize_fp8_blocks(values, *fp8_block_, name);
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

bool same_weight_format(const LinearWeight& a, const LinearWeight& b) {
  if (a.dtype() != b.dtype()) return false;
  return !a.is_fp8() || a.block.k == b.block.k;
}

std::string weight_format(const LinearWeight& w) {
  if (!w.is_fp8()) return std::string(dtype_name(w.dtype()));
  return fmt::format("F8_E4M3 ({}x{} blocks)", w.block.n, w.block.k);
}

Expected<Tensor> scales_per_row(const LinearWeight& w) {
  VLLM_RETURN_IF_ERROR(check_linear_weight("scales_per_row: weight", w));
  if (!w.is_fp8()) {
    return make_error(ErrorCode::kInvalidArgument, "scales_per_row of a {} weight",
                      weight_format(w));
  }
  Shape shape = w.shape();
  const int64_t rows = shape[shape.size() - 2];
  const int64_t cols = w.scale_inv.size(-1), grid_rows = w.scale_inv.size(-2);
  shape.back() = cols;
  if (w.device().is_meta()) return Tensor::empty(shape, DType::kF32, Device::meta());
  if (!w.device().is_cpu()) {
    return make_error(ErrorCode::kUnsupported, "scales_per_row: the weight is on {}",
                      w.device().to_string());
  }
  const Tensor src = w.scale_inv.is_contiguous() ? w.scale_inv : w.scale_inv.clone();
  VLLM_ASSIGN_OR_RETURN(Tensor out, Tensor::try_empty(shape, DType::kF32));
  const int64_t matrices = rows == 0 ? 0 : out.numel() / (rows * std::max<int64_t>(cols, 1));
  for (int64_t e = 0; e < matrices && cols > 0; ++e) {
    for (int64_t n = 0; n < rows; ++n) {
      std::memcpy(out.data<float>() + (e * rows + n) * cols,
                  src.data<float>() + (e * grid_rows + n / w.block.n) * cols,
                  static_cast<size_t>(cols) * sizeof(float));
    }
  }
  return out;
}

bool fp8_grids_stack(const std::vector<LinearWeight>& parts) {
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!parts[i].is_fp8()) continue;
    if (parts[i].block != parts[0].block) return false;
    if (i + 1 < parts.size() && parts[i].size(0) % parts[i].block.n != 0) return false;
  }
  return true;
}

Expected<LinearWeight> concat_linear_rows(const std::vector<LinearWeight>& parts,
                                          const ExecContext* ctx) {
  VLLM_CHECK(!parts.empty());
  std::vector<Tensor> weights;
  for (const LinearWeight& p : parts) {
    if (p.is_fp8() != parts[0].is_fp8() || (p.is_fp8() && p.block.k != parts[0].block.k)) {
      return make_error(ErrorCode::kUnsupported,
                        "cannot fuse linear weights of formats {} and {} into one matrix",
                        weight_format(parts[0]), weight_format(p));
    }
    weights.push_back(p.weight);
  }
  VLLM_ASSIGN_OR_RETURN(Tensor weight, concat_rows(weights, ctx));
  if (!parts[0].is_fp8()) return LinearWeight(std::move(weight));
  const bool aligned = fp8_grids_stack(parts);
  std::vector<Tensor> scales;
  for (const LinearWeight& p : parts) {
    if (aligned) {
      scales.push_back(p.scale_inv);
    } else if (p.device().is_cpu() || p.device().is_meta()) {
      VLLM_ASSIGN_OR_RETURN(Tensor rows, scales_per_row(p));
      scales.push_back(rows);
    } else {
      // A part already on the GPU: its scale rows repeated on the host, then placed beside it.
      if (ctx == nullptr) {
        return make_error(ErrorCode::kInvalidArgument,
                          "concat_linear_rows of FP8 weights on {} needs a context",
                          p.device().to_string());
      }
      VLLM_ASSIGN_OR_RETURN(Tensor host, ops::to_host(*ctx, p.scale_inv));
      const int64_t rows = p.size(0), cols = host.size(1);
      VLLM_ASSIGN_OR_RETURN(Tensor per_row, Tensor::try_empty({rows, cols}, DType::kF32));
      for (int64_t n = 0; n < rows; ++n) {
        std::memcpy(per_row.data<float>() + n * cols, host.data<float>() + (n / p.block.n) * cols,
                    static_cast<size_t>(cols) * sizeof(float));
      }
      VLLM_ASSIGN_OR_RETURN(Tensor placed,
                            empty_weight({rows, cols}, DType::kF32, p.device(), ctx));
      VLLM_RETURN_IF_ERROR(ops::copy(*ctx, per_row, placed));
      scales.push_back(placed);
    }
  }
  VLLM_ASSIGN_OR_RETURN(Tensor scale, concat_rows(scales, ctx));
  const WeightBlock block = aligned ? parts[0].block : WeightBlock{1, parts[0].block.k};
  return LinearWeight(std::move(weight), std::move(scale), block);
}

Expected<LinearWeight> slice_linear_rows(const LinearWeight& w, int64_t begin, int64_t end) {
  VLLM_CHECK(w.ndim() == 2 && 0 <= begin && begin <= end && end <= w.size(0));
  if (!w.is_fp8()) return LinearWeight(w.weight.slice(0, begin, end));
  const int64_t bn = w.block.n;
  if (begin % bn == 0 && (end % bn == 0 || end == w.size(0))) {
    return LinearWeight(w.weight.slice(0, begin, end),
                        w.scale_inv.slice(0, begin / bn, (end + bn - 1) / bn), w.block);
  }
  VLLM_ASSIGN_OR_RETURN(Tensor rows, scales_per_row(w));
  return LinearWeight(w.weight.slice(0, begin, end), rows.slice(0, begin, end),
                      WeightBlock{1, w.block.k});
}

Expected<LinearWeight> slice_linear(const std::string& name, const LinearWeight& w,
                                    const WeightSlice& s) {
  VLLM_RETURN_IF_ERROR(check_slice(name, w.shape(), s));
  if (!w.is_fp8()) return LinearWeight(w.weight.slice(s.dim, s.begin, s.end));
  const int rows = w.ndim() - 2, cols = w.ndim() - 1;
  if (s.dim < rows) {  // whole experts of a stack: each keeps its grid
    return LinearWeight(w.weight.slice(s.dim, s.begin, s.end),
                        w.scale_inv.slice(s.dim, s.begin, s.end), w.block);
  }
  const int64_t block = s.dim == rows ? w.block.n : w.block.k, size = w.size(s.dim);
  const bool aligned = s.begin % block == 0 && (s.end % block == 0 || s.end == size);
  if (aligned) {
    return LinearWeight(w.weight.slice(s.dim, s.begin, s.end),
                        w.scale_inv.slice(s.dim, s.begin / block, (s.end + block - 1) / block),
                        w.block);
  }
  if (s.dim == cols) {
    return make_error(ErrorCode::kInvalidArgument,
                      "tensor parallelism: the input columns [{}, {}) of FP8 weight '{}' do not "
                      "start and end on its {}-column scale blocks",
                      s.begin, s.end, name, block);
  }
  // Rows off the block grid: one scale row per weight row (the same values).
  VLLM_ASSIGN_OR_RETURN(Tensor per_row, scales_per_row(w));
  return LinearWeight(w.weight.slice(s.dim, s.begin, s.end), per_row.slice(s.dim, s.begin, s.end),
                      WeightBlock{1, w.block.k});
}

}  // namespace vllm
