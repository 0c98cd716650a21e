// Grammar bitmasks applied to GPU logits (token_bitmask.cuh): the kernel, its launcher, and
// TokenBitmaskApplier's packing and upload.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/runtime.h"
#include "backend/cuda/token_bitmask.cuh"

namespace vllm::cuda {
namespace {
using detail::launch_pdl;
using detail::pdl_launch_next;
using detail::pdl_wait;

constexpr const char* kOp = "cuda::TokenBitmaskApplier::apply";
constexpr int kThreads = 256;  // one token per thread; a warp reads one mask word

// grid.x covers the vocabulary, grid.y the masked rows (looping past kMaxGridY). Only the
// disallowed tokens are written.
__global__ void apply_token_bitmask_kernel(float* logits, int64_t row_stride, int32_t vocab,
                                           const int32_t* rows, const uint32_t* masks,
                                           int32_t words_per_row, int32_t num_rows) {
  pdl_wait();
  pdl_launch_next();
  const int64_t token = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (token >= vocab) return;
  const auto word = static_cast<int32_t>(token >> 5);
  for (int32_t m = blockIdx.y; m < num_rows; m += gridDim.y) {
    const bool allowed =
        word < words_per_row &&
        ((masks[static_cast<int64_t>(m) * words_per_row + word] >> (token & 31)) & 1u);
    if (!allowed) logits[static_cast<int64_t>(rows[m]) * row_stride + token] = -INFINITY;
  }
}

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

}  // namespace

Status launch_apply_token_bitmask(float* logits, int64_t row_stride, int32_t vocab,
                                  const int32_t* rows, const uint32_t* masks, int32_t words_per_row,
                                  int32_t num_rows, cudaStream_t stream) {
  if (num_rows <= 0 || vocab <= 0) return Status::ok();
  const dim3 grid(static_cast<unsigned>((vocab + kThreads - 1) / kThreads),
                  static_cast<unsigned>(std::min(num_rows, detail::kMaxGridY)));
  launch_pdl(apply_token_bitmask_kernel, grid, kThreads, 0, stream, logits, row_stride, vocab, rows,
             masks, words_per_row, num_rows);
  return check_launch("apply_token_bitmask_kernel");
}

struct TokenBitmaskApplier::Buffers {
  size_t capacity = 0;           // bytes of each buffer
  void* host = nullptr;          // pinned: [rows] I32, padded to 16 bytes, then [rows, words] U32
  void* device = nullptr;        // the same layout on the device
  cudaEvent_t copied = nullptr;  // recorded after the last upload from `host`
  bool pending = false;
};

TokenBitmaskApplier::TokenBitmaskApplier(Device device)
    : device_(device), buffers_(std::make_unique<Buffers>()) {}

TokenBitmaskApplier::~TokenBitmaskApplier() {
  Buffers& b = *buffers_;
  if (b.host == nullptr && b.device == nullptr && b.copied == nullptr) return;
  DeviceGuard guard(device_);
  if (b.copied != nullptr) {
    (void)cudaEventSynchronize(b.copied);
    (void)cudaEventDestroy(b.copied);
  }
  if (b.device != nullptr) (void)cudaFree(b.device);
  if (b.host != nullptr) (void)cudaFreeHost(b.host);
}

Status TokenBitmaskApplier::apply(const Tensor& logits, std::span<const RowBitmask> masks,
                                  cudaStream_t stream) {
  if (!logits.defined() || !logits.device().is_cuda() || logits.device() != device_) {
    return make_error(ErrorCode::kInvalidArgument, "{}: logits {} must be on {}", kOp,
                      logits.defined() ? logits.to_string() : std::string("undefined"),
                      device_.to_string());
  }
  if (logits.dtype() != DType::kF32 || logits.ndim() != 2) {
    return make_error(ErrorCode::kInvalidArgument, "{}: logits {} must be F32 [rows, vocab]", kOp,
                      logits.to_string());
  }
  const int64_t num_logits_rows = logits.size(0), vocab = logits.size(1);
  if (vocab < 1 || vocab > std::numeric_limits<int32_t>::max() - 32 ||
      (logits.stride(1) != 1 && vocab != 1) || (num_logits_rows > 1 && logits.stride(0) < vocab)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: logits {} must have a contiguous, non-empty vocab dim and rows that do "
                      "not overlap",
                      kOp, logits.to_string());
  }
  if (masks.empty()) return Status::ok();
  if (masks.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max() / 2)) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} masked rows are too many", kOp,
                      masks.size());
  }
  // Words past the vocabulary's end decide nothing; a short mask is padded with zero words.
  const size_t vocab_words = static_cast<size_t>((vocab + 31) / 32);
  size_t words = 0;
  for (size_t m = 0; m < masks.size(); ++m) {
    if (masks[m].row < 0 || masks[m].row >= num_logits_rows) {
      return make_error(ErrorCode::kInvalidArgument,
                        "{}: mask {} names row {}, outside the {} logits rows", kOp, m,
                        masks[m].row, num_logits_rows);
    }
    words = std::max(words, std::min(masks[m].words.size(), vocab_words));
  }
  const size_t num_rows = masks.size();
  const size_t words_offset = round_up(num_rows * sizeof(int32_t), 16);
  const size_t bytes = words_offset + num_rows * words * sizeof(uint32_t);

  Buffers& b = *buffers_;
  DeviceGuard guard(device_);
  VLLM_RETURN_IF_ERROR(guard.status());
  if (b.copied == nullptr) {
    VLLM_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&b.copied, cudaEventDisableTiming));
  }
  if (b.pending) {  // the previous upload still reads the pinned buffer
    VLLM_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(b.copied));
    b.pending = false;
  }
  if (bytes > b.capacity) {
    const size_t capacity = std::max(bytes, b.capacity * 2);
    // An earlier step's kernel may still read the device buffer.
    if (b.device != nullptr) VLLM_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    if (b.device != nullptr) VLLM_CUDA_RETURN_IF_ERROR(cudaFree(b.device));
    if (b.host != nullptr) VLLM_CUDA_RETURN_IF_ERROR(cudaFreeHost(b.host));
    b.device = b.host = nullptr;
    b.capacity = 0;
    VLLM_CUDA_RETURN_IF_ERROR(cudaMallocHost(&b.host, capacity));
    VLLM_CUDA_RETURN_IF_ERROR(cudaMalloc(&b.device, capacity));
    b.capacity = capacity;
  }

  auto* packed = static_cast<unsigned char*>(b.host);
  auto* rows = reinterpret_cast<int32_t*>(packed);
  auto* packed_words = reinterpret_cast<uint32_t*>(packed + words_offset);
  for (size_t m = 0; m < num_rows; ++m) {
    rows[m] = static_cast<int32_t>(masks[m].row);
    uint32_t* dst = packed_words + m * words;
    const size_t n = std::min(masks[m].words.size(), words);
    if (n > 0) std::memcpy(dst, masks[m].words.data(), n * sizeof(uint32_t));
    std::fill(dst + n, dst + words, 0u);
  }
  auto* device_base = static_cast<unsigned char*>(b.device);
  VLLM_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(device_base, packed, bytes, cudaMemcpyHostToDevice, stream));
  VLLM_CUDA_RETURN_IF_ERROR(cudaEventRecord(b.copied, stream));
  b.pending = true;
  return launch_apply_token_bitmask(
      static_cast<float*>(logits.data_ptr()), num_logits_rows > 1 ? logits.stride(0) : vocab,
      static_cast<int32_t>(vocab), reinterpret_cast<const int32_t*>(device_base),
      reinterpret_cast<const uint32_t*>(device_base + words_offset), static_cast<int32_t>(words),
      static_cast<int32_t>(num_rows), stream);
}

}  // namespace vllm::cuda
