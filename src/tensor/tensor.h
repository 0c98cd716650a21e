// Tensor: a typed, strided view of device memory.
//
// A Tensor is cheap to copy (it shares its Storage). Storage either owns its memory
// (allocated here, on the CPU or through a device allocator a backend registered) or borrows
// it from an owner it keeps alive, such as an mmapped safetensors file. Shapes and strides
// are in elements; the byte offset into the storage allows views and slices without copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace vllm {

// kMeta: shape and dtype only, no memory (like PyTorch's "meta" device) -- for building a
// model's structure without its weights, e.g. to count parameters of a 397B config.
enum class DeviceType : uint8_t { kCPU, kCUDA, kMeta };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static Device cpu() { return {DeviceType::kCPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::kCUDA, index}; }
  static Device meta() { return {DeviceType::kMeta, 0}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  bool is_meta() const { return type == DeviceType::kMeta; }
  bool operator==(const Device&) const = default;
  std::string to_string() const;
};

using Shape = std::vector<int64_t>;

// Backends that own device memory register one of these (the CUDA backend: cudaMalloc).
class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  virtual Expected<void*> allocate(size_t nbytes, int device_index) = 0;
  virtual void deallocate(void* ptr, int device_index) = 0;
};
void register_device_allocator(DeviceType type, DeviceAllocator* allocator);

class Storage {
 public:
  // Borrowed memory: `keepalive` holds whatever owns `data` (nullptr if the caller does).
  Storage(void* data, size_t nbytes, Device device, std::shared_ptr<void> keepalive)
      : data_(data), nbytes_(nbytes), device_(device), keepalive_(std::move(keepalive)) {}

  static Expected<std::shared_ptr<Storage>> allocate(size_t nbytes, Device device);

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_;
  size_t nbytes_;
  Device device_;
  std::shared_ptr<void> keepalive_;
};

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor; defined() is false

  // New uninitialised memory. try_empty reports allocation failure; empty() aborts on it.
  static Expected<Tensor> try_empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype);  // CPU only
  // A contiguous view of memory owned elsewhere; `keepalive` keeps that owner alive.
  static Tensor borrow(void* data, const Shape& shape, DType dtype, Device device,
                       std::shared_ptr<void> keepalive);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  int ndim() const { return static_cast<int>(shape_.size()); }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t size(int dim) const { return shape_[normalize_dim(dim)]; }
  int64_t stride(int dim) const { return strides_[normalize_dim(dim)]; }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  size_t element_size() const { return dtype_size(dtype_); }
  bool is_contiguous() const;

  void* data_ptr() const;
  // Typed pointer; float/double/int types must match the dtype exactly, other types (uint16_t
  // for F16/BF16 bits, uint8_t for fp8 bits) must match its size.
  template <typename T>
  T* data() const {
    check_access(sizeof(T), exact_dtype<T>());
    return static_cast<T*>(data_ptr());
  }

  // Same memory, new shape (contiguous tensors only). One dimension may be -1.
  Tensor view(const Shape& shape) const;
  // Elements [start, end) along `dim`, sharing memory.
  Tensor slice(int dim, int64_t start, int64_t end) const;
  // A contiguous CPU copy (a deep copy even if this is already contiguous).
  Tensor clone() const;

  // "BF16[2048, 151936] cpu".
  std::string to_string() const;

 private:
  template <typename T>
  static constexpr int exact_dtype() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> ||
                  std::is_same_v<T, int64_t> || std::is_same_v<T, int32_t> ||
                  std::is_same_v<T, bool>) {
      return static_cast<int>(DTypeOf<T>::value);
    } else {
      return -1;
    }
  }
  void check_access(size_t element_size, int exact_dtype) const;
  size_t normalize_dim(int dim) const;

  std::shared_ptr<Storage> storage_;
  size_t offset_bytes_ = 0;
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::kF32;
};

// Strides of a row-major contiguous tensor of this shape.
Shape contiguous_strides(const Shape& shape);
// Product of the dims, or an error naming the overflow/negative dim.
Expected<int64_t> checked_numel(const Shape& shape);
std::string shape_to_string(const Shape& shape);

}  // namespace vllm
