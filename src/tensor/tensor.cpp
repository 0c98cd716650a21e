#include "tensor/tensor.h"

#include <array>
#include <cstdlib>
#include <cstring>

#include "base/status.h"

namespace vllm {
namespace {

constexpr size_t kCpuAlignment = 64;

std::array<DeviceAllocator*, 3>& allocators() {
  static std::array<DeviceAllocator*, 3> table = {nullptr, nullptr, nullptr};
  return table;
}

}  // namespace

std::string Device::to_string() const {
  switch (type) {
    case DeviceType::kCPU:
      return "cpu";
    case DeviceType::kCUDA:
      return fmt::format("cuda:{}", index);
    case DeviceType::kMeta:
      return "meta";
  }
  return "?";
}

void register_device_allocator(DeviceType type, DeviceAllocator* allocator) {
  allocators()[static_cast<size_t>(type)] = allocator;
}

Expected<std::shared_ptr<Storage>> Storage::allocate(size_t nbytes, Device device) {
  if (device.is_meta()) return std::make_shared<Storage>(nullptr, nbytes, device, nullptr);
  if (device.is_cpu()) {
    size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    if (rounded == 0) rounded = kCpuAlignment;
    void* data = std::aligned_alloc(kCpuAlignment, rounded);
    if (data == nullptr) {
      return make_error(ErrorCode::kResourceExhausted, "cannot allocate {} bytes of CPU memory",
                        nbytes);
    }
    std::shared_ptr<void> owner(data, [](void* p) { std::free(p); });
    return std::make_shared<Storage>(data, nbytes, device, std::move(owner));
  }
  DeviceAllocator* allocator = allocators()[static_cast<size_t>(device.type)];
  if (allocator == nullptr) {
    return make_error(ErrorCode::kUnsupported,
                      "no allocator for device {}: this build has no backend for it",
                      device.to_string());
  }
  VLLM_ASSIGN_OR_RETURN(void* data, allocator->allocate(nbytes, device.index));
  int index = device.index;
  std::shared_ptr<void> owner(data,
                              [allocator, index](void* p) { allocator->deallocate(p, index); });
  return std::make_shared<Storage>(data, nbytes, device, std::move(owner));
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t running = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = running;
    running *= shape[i];
  }
  return strides;
}

Expected<int64_t> checked_numel(const Shape& shape) {
  int64_t total = 1;
  for (int64_t dim : shape) {
    if (dim < 0) {
      return make_error(ErrorCode::kInvalidArgument, "negative dimension in shape {}",
                        shape_to_string(shape));
    }
    if (dim != 0 && total > INT64_MAX / dim) {
      return make_error(ErrorCode::kOutOfRange, "shape {} has more elements than fit in 64 bits",
                        shape_to_string(shape));
    }
    total *= dim;
  }
  return total;
}

std::string shape_to_string(const Shape& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

Expected<Tensor> Tensor::try_empty(const Shape& shape, DType dtype, Device device) {
  VLLM_ASSIGN_OR_RETURN(int64_t count, checked_numel(shape));
  if (static_cast<uint64_t>(count) > SIZE_MAX / dtype_size(dtype)) {
    return make_error(ErrorCode::kOutOfRange, "tensor {} of {} is too large",
                      shape_to_string(shape), dtype_name(dtype));
  }
  VLLM_ASSIGN_OR_RETURN(auto storage,
                        Storage::allocate(static_cast<size_t>(count) * dtype_size(dtype), device));
  Tensor t;
  t.storage_ = std::move(storage);
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  auto result = try_empty(shape, dtype, device);
  VLLM_CHECK_MSG(result.has_value(), "{}", result.status().to_string());
  return std::move(result).value();
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype, Device::cpu());
  std::memset(t.data_ptr(), 0, t.nbytes());
  return t;
}

Tensor Tensor::borrow(void* data, const Shape& shape, DType dtype, Device device,
                      std::shared_ptr<void> keepalive) {
  auto count = checked_numel(shape);
  VLLM_CHECK_MSG(count.has_value(), "{}", count.status().to_string());
  Tensor t;
  t.storage_ = std::make_shared<Storage>(data, static_cast<size_t>(*count) * dtype_size(dtype),
                                         device, std::move(keepalive));
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

int64_t Tensor::numel() const {
  int64_t total = 1;
  for (int64_t dim : shape_) total *= dim;
  return total;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  VLLM_CHECK_MSG(defined(), "data_ptr() of an undefined tensor");
  VLLM_CHECK_MSG(!device().is_meta(), "data_ptr() of a meta tensor {} (it has no memory)",
                 to_string());
  return static_cast<char*>(storage_->data()) + offset_bytes_;
}

void Tensor::check_access(size_t element_size, int exact_dtype) const {
  VLLM_CHECK_MSG(defined(), "data() of an undefined tensor");
  if (exact_dtype >= 0) {
    VLLM_CHECK_MSG(static_cast<int>(dtype_) == exact_dtype, "tensor is {}, accessed as {}",
                   dtype_name(dtype_), dtype_name(static_cast<DType>(exact_dtype)));
  } else {
    VLLM_CHECK_MSG(element_size == dtype_size(dtype_), "tensor is {}, accessed with {}-byte type",
                   dtype_name(dtype_), element_size);
  }
}

size_t Tensor::normalize_dim(int dim) const {
  int n = ndim();
  int d = dim < 0 ? dim + n : dim;
  VLLM_CHECK_MSG(d >= 0 && d < n, "dim {} out of range for a {}-d tensor", dim, n);
  return static_cast<size_t>(d);
}

Tensor Tensor::view(const Shape& shape) const {
  VLLM_CHECK_MSG(is_contiguous(), "view() of a non-contiguous tensor {}", to_string());
  Shape resolved = shape;
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] == -1) {
      VLLM_CHECK_MSG(infer < 0, "view() with two -1 dims");
      infer = static_cast<int>(i);
    } else {
      known *= resolved[i];
    }
  }
  if (infer >= 0) {
    VLLM_CHECK_MSG(known > 0 && numel() % known == 0, "cannot view {} as {}", to_string(),
                   shape_to_string(shape));
    resolved[static_cast<size_t>(infer)] = numel() / known;
    known *= resolved[static_cast<size_t>(infer)];
  }
  VLLM_CHECK_MSG(known == numel(), "cannot view {} as {}", to_string(), shape_to_string(shape));
  Tensor t = *this;
  t.shape_ = resolved;
  t.strides_ = contiguous_strides(resolved);
  return t;
}

Tensor Tensor::slice(int dim, int64_t start, int64_t end) const {
  size_t d = normalize_dim(dim);
  VLLM_CHECK_MSG(0 <= start && start <= end && end <= shape_[d],
                 "slice [{}, {}) out of range for dim {} of {}", start, end, dim, to_string());
  Tensor t = *this;
  t.offset_bytes_ += static_cast<size_t>(start * strides_[d]) * dtype_size(dtype_);
  t.shape_[d] = end - start;
  return t;
}

Tensor Tensor::clone() const {
  VLLM_CHECK_MSG(device().is_cpu(), "clone() of a {} tensor", device().to_string());
  Tensor out = empty(shape_, dtype_, Device::cpu());
  const size_t esize = dtype_size(dtype_);
  if (is_contiguous()) {
    std::memcpy(out.data_ptr(), data_ptr(), nbytes());
    return out;
  }
  // Walk the source in row-major order with an index counter.
  const int64_t count = numel();
  std::vector<int64_t> index(shape_.size(), 0);
  const char* src = static_cast<const char*>(data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  for (int64_t i = 0; i < count; ++i) {
    int64_t offset = 0;
    for (size_t k = 0; k < index.size(); ++k) offset += index[k] * strides_[k];
    std::memcpy(dst + static_cast<size_t>(i) * esize, src + offset * static_cast<int64_t>(esize),
                esize);
    for (size_t k = index.size(); k-- > 0;) {
      if (++index[k] < shape_[k]) break;
      index[k] = 0;
    }
  }
  return out;
}

std::string Tensor::to_string() const {
  if (!defined()) return "Tensor(undefined)";
  return fmt::format("{}{} {}", dtype_name(dtype_), shape_to_string(shape_), device().to_string());
}

}  // namespace vllm
