#include "parallel/shm_communicator.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/float_convert.h"
#include "base/profile.h"
#include "base/thread_pool.h"

namespace vllm::parallel {
namespace {

// Elements per parallel_for chunk of the summation: small reductions stay on one thread.
constexpr int64_t kReduceGrain = 1 << 14;

Status check_host(const char* op, const Tensor& t) {
  if (!t.defined() || !t.device().is_cpu()) {
    return make_error(ErrorCode::kUnsupported,
                      "{}: the shared-memory communicator works on CPU tensors, not {}", op,
                      t.defined() ? t.device().to_string() : "an undefined tensor");
  }
  if (!t.is_contiguous()) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} is not contiguous", op, t.to_string());
  }
  return Status::ok();
}

}  // namespace

Status ShmCommunicator::all_reduce(const ExecContext& ctx, Tensor& x) {
  VLLM_PROFILE_SCOPE("all_reduce");
  VLLM_RETURN_IF_ERROR(check_host("all_reduce", x));
  if (x.dtype() != DType::kF32 && x.dtype() != DType::kBF16) {
    return make_error(ErrorCode::kUnsupported, "all_reduce: {} is not F32 or BF16", x.to_string());
  }
  const int world = world_size();
  const size_t esize = x.element_size();
  const auto per_chunk = static_cast<int64_t>(group_->slot_bytes() / esize);
  const int64_t n = x.numel();
  char* data = static_cast<char*>(x.data_ptr());
  for (int64_t begin = 0; begin < n; begin += per_chunk) {
    const int64_t count = std::min(per_chunk, n - begin);
    const int phase = next_phase();
    std::memcpy(group_->slot(phase, rank()), data + begin * esize,
                static_cast<size_t>(count) * esize);
    VLLM_RETURN_IF_ERROR(group_->barrier());
    std::vector<const char*> parts(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) parts[static_cast<size_t>(r)] = group_->slot(phase, r);
    if (x.dtype() == DType::kF32) {
      float* out = reinterpret_cast<float*>(data) + begin;
      parallel_for(0, count, kReduceGrain, [&](int64_t lo, int64_t hi) {
        const float* first = reinterpret_cast<const float*>(parts[0]);
        std::copy(first + lo, first + hi, out + lo);
        for (int r = 1; r < world; ++r) {
          const float* p = reinterpret_cast<const float*>(parts[static_cast<size_t>(r)]);
          for (int64_t i = lo; i < hi; ++i) out[i] += p[i];
        }
      });
    } else {
      uint16_t* out = reinterpret_cast<uint16_t*>(data) + begin;
      parallel_for(0, count, kReduceGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          float sum = 0.0f;
          for (int r = 0; r < world; ++r) {
            sum += bf16_to_f32(reinterpret_cast<const uint16_t*>(parts[static_cast<size_t>(r)])[i]);
          }
          out[i] = f32_to_bf16(sum);
        }
      });
    }
  }
  (void)ctx;
  return Status::ok();
}

Status ShmCommunicator::all_gather(const ExecContext& ctx, const Tensor& x, Tensor& out) {
  VLLM_PROFILE_SCOPE("all_gather");
  VLLM_RETURN_IF_ERROR(check_host("all_gather", x));
  VLLM_RETURN_IF_ERROR(check_host("all_gather", out));
  const int world = world_size();
  Shape expected = x.shape();
  expected.insert(expected.begin(), world);
  if (out.shape() != expected || out.dtype() != x.dtype()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "all_gather: out is {}, expected {}{} (world_size x the input)",
                      out.to_string(), dtype_name(x.dtype()), shape_to_string(expected));
  }
  const size_t total = x.nbytes();
  const size_t per_chunk = group_->slot_bytes();
  const char* src = static_cast<const char*>(x.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  for (size_t begin = 0; begin < total; begin += per_chunk) {
    const size_t bytes = std::min(per_chunk, total - begin);
    const int phase = next_phase();
    std::memcpy(group_->slot(phase, rank()), src + begin, bytes);
    VLLM_RETURN_IF_ERROR(group_->barrier());
    for (int r = 0; r < world; ++r) {
      std::memcpy(dst + static_cast<size_t>(r) * total + begin, group_->slot(phase, r), bytes);
    }
  }
  (void)ctx;
  return Status::ok();
}

}  // namespace vllm::parallel
