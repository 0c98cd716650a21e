// DeviceSampler, the op entry of the CUDA sampler (sampling.cuh): checks the logits and the
// rows' parameters, merges each row's sparse token lists into one entry per token, packs
// everything into a pinned buffer, and runs copy in -> kernel -> copy out on one stream.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "backend/cuda/runtime.h"
#include "backend/cuda/sampling.cuh"
#include "backend/cuda/sampling_layout.h"

namespace vllm::cuda {

using sampling::DeviceEdit;
using sampling::DeviceResult;
using sampling::DeviceRow;

namespace {

constexpr const char* kOp = "cuda::DeviceSampler::sample";

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

// Where the edits start in the packed [rows][edits] buffer.
size_t edits_offset(size_t rows) {
  return round_up(rows * sizeof(DeviceRow), 16);
}

Status check_row(const SamplingRow& row, size_t r) {
  if (!row.greedy) {
    if (!(row.temperature > 0.0) || !std::isfinite(row.temperature)) {
      return make_error(ErrorCode::kInvalidArgument, "{}: row {} has temperature {}, expected > 0",
                        kOp, r, row.temperature);
    }
    if (!(row.uniform >= 0.0 && row.uniform < 1.0)) {
      return make_error(ErrorCode::kInvalidArgument, "{}: row {} has uniform {}, expected [0, 1)",
                        kOp, r, row.uniform);
    }
    if (!(row.top_p > 0.0 && row.top_p <= 1.0)) {
      return make_error(ErrorCode::kInvalidArgument, "{}: row {} has top_p {}, expected (0, 1]",
                        kOp, r, row.top_p);
    }
    if (!(row.min_p >= 0.0 && row.min_p <= 1.0)) {
      return make_error(ErrorCode::kInvalidArgument, "{}: row {} has min_p {}, expected [0, 1]",
                        kOp, r, row.min_p);
    }
  }
  if (!(row.repetition_penalty > 0.0) || !std::isfinite(row.repetition_penalty) ||
      !std::isfinite(row.frequency_penalty) || !std::isfinite(row.presence_penalty)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: row {} has penalties repetition {} frequency {} presence {}; expected "
                      "finite values and repetition > 0",
                      kOp, r, row.repetition_penalty, row.frequency_penalty, row.presence_penalty);
  }
  if (row.num_logprobs < 0 || row.num_logprobs > kMaxDeviceLogprobs) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: row {} asks for {} logprobs, expected 0..{}", kOp, r, row.num_logprobs,
                      kMaxDeviceLogprobs);
  }
  return Status::ok();
}

struct DeviceFree {
  void operator()(void* p) const {
    if (p != nullptr) (void)cudaFree(p);
  }
};
struct HostFree {
  void operator()(void* p) const {
    if (p != nullptr) (void)cudaFreeHost(p);
  }
};
using DevicePtr = std::unique_ptr<void, DeviceFree>;
using HostPtr = std::unique_ptr<void, HostFree>;

Expected<DevicePtr> device_alloc(size_t bytes, const char* what) {
  void* p = nullptr;
  const cudaError_t error = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
  if (error != cudaSuccess) {
    return cuda_status(error, "cudaMalloc")
        .with_context(fmt::format("{}: {} bytes for {}", kOp, bytes, what));
  }
  return DevicePtr(p);
}

Expected<HostPtr> host_alloc(size_t bytes, const char* what) {
  void* p = nullptr;
  const cudaError_t error = cudaMallocHost(&p, bytes == 0 ? 1 : bytes);
  if (error != cudaSuccess) {
    return cuda_status(error, "cudaMallocHost")
        .with_context(fmt::format("{}: {} pinned bytes for {}", kOp, bytes, what));
  }
  return HostPtr(p);
}

}  // namespace

struct DeviceSampler::Buffers {
  Device device;
  size_t row_capacity = 0;
  size_t edit_capacity = 0;
  size_t work_row_capacity = 0;
  int64_t work_stride = 0;  // floats per work row: the vocabulary rounded up to 16 bytes
  HostPtr params_host;      // [rows][edits], row_capacity / edit_capacity
  DevicePtr params_device;
  HostPtr results_host;  // [rows]
  DevicePtr results_device;
  DevicePtr work;                   // [work rows, work_stride]
  DevicePtr segments;               // [rows][kSegments] SegmentStats, then SegmentDraw
  std::vector<DeviceEdit> edits;    // this step's entries, all rows
  std::vector<int32_t> edit_count;  // per row

  ~Buffers() {
    // Free on the owning device.
    DeviceGuard guard(device);
    params_device.reset();
    results_device.reset();
    work.reset();
    segments.reset();
  }
};

DeviceSampler::DeviceSampler(Device device, std::unique_ptr<Buffers> buffers)
    : device_(device), buffers_(std::move(buffers)) {}

DeviceSampler::~DeviceSampler() = default;

Expected<std::unique_ptr<DeviceSampler>> DeviceSampler::create(Device device, int32_t max_rows,
                                                               int32_t vocab_size) {
  if (!device.is_cuda()) {
    return make_error(ErrorCode::kInvalidArgument, "cuda::DeviceSampler: {} is not a CUDA device",
                      device.to_string());
  }
  if (max_rows < 1 || vocab_size < 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cuda::DeviceSampler: max_rows {} and vocab_size {} must be positive",
                      max_rows, vocab_size);
  }
  auto buffers = std::make_unique<Buffers>();
  buffers->device = device;
  std::unique_ptr<DeviceSampler> sampler(new DeviceSampler(device, std::move(buffers)));
  DeviceGuard guard(device);
  VLLM_RETURN_IF_ERROR(guard.status());
  // Room for a few sparse entries per row; penalties over long prompts grow it.
  VLLM_RETURN_IF_ERROR(sampler->reserve(static_cast<size_t>(max_rows),
                                        static_cast<size_t>(max_rows) * 64, 0, vocab_size));
  return sampler;
}

// Grows the buffers that are short (the current device is this sampler's). Contents are
// not kept: each step packs everything again.
Status DeviceSampler::reserve(size_t rows, size_t edits, size_t work_rows, int64_t vocab) {
  Buffers& b = *buffers_;
  if (rows > b.row_capacity || edits > b.edit_capacity) {
    const size_t new_rows = std::max(rows, b.row_capacity);
    // Edits grow geometrically, but only when they are what ran short: growing the rows
    // alone (a batch filling up one request at a time) must not double them each time.
    const size_t new_edits =
        edits > b.edit_capacity ? std::max(edits, b.edit_capacity * 2) : b.edit_capacity;
    const size_t bytes = edits_offset(new_rows) + new_edits * sizeof(DeviceEdit);
    b.params_host.reset();
    b.params_device.reset();
    VLLM_ASSIGN_OR_RETURN(b.params_host, host_alloc(bytes, "sampling parameters"));
    VLLM_ASSIGN_OR_RETURN(b.params_device, device_alloc(bytes, "sampling parameters"));
    if (new_rows > b.row_capacity) {
      b.results_host.reset();
      b.results_device.reset();
      b.segments.reset();
      VLLM_ASSIGN_OR_RETURN(b.results_host,
                            host_alloc(new_rows * sizeof(DeviceResult), "sampling results"));
      VLLM_ASSIGN_OR_RETURN(b.results_device,
                            device_alloc(new_rows * sizeof(DeviceResult), "sampling results"));
      VLLM_ASSIGN_OR_RETURN(b.segments, device_alloc(new_rows * sampling::kSegments *
                                                         (sizeof(sampling::SegmentStats) +
                                                          sizeof(sampling::SegmentDraw)),
                                                     "per-segment sampling state"));
    }
    b.row_capacity = new_rows;
    b.edit_capacity = new_edits;
  }
  const auto stride = static_cast<int64_t>(round_up(static_cast<size_t>(vocab), 4));
  if (work_rows > b.work_row_capacity || (work_rows > 0 && stride > b.work_stride)) {
    const size_t new_rows = std::max(work_rows, b.work_row_capacity);
    const int64_t new_stride = std::max(stride, b.work_stride);
    b.work.reset();
    VLLM_ASSIGN_OR_RETURN(b.work,
                          device_alloc(new_rows * static_cast<size_t>(new_stride) * sizeof(float),
                                       "edited logits rows"));
    b.work_row_capacity = new_rows;
    b.work_stride = new_stride;
  }
  return Status::ok();
}

Status DeviceSampler::sample(const Tensor& logits, std::span<const SamplingRow> rows,
                             std::vector<SampledToken>& out, cudaStream_t stream) {
  out.clear();
  if (!logits.defined() || !logits.device().is_cuda() || logits.device() != device_) {
    return make_error(ErrorCode::kInvalidArgument, "{}: logits {} must be on {}", kOp,
                      logits.defined() ? logits.to_string() : std::string("undefined"),
                      device_.to_string());
  }
  if (logits.dtype() != DType::kF32 || logits.ndim() != 2) {
    return make_error(ErrorCode::kInvalidArgument, "{}: logits {} must be F32 [rows, vocab]", kOp,
                      logits.to_string());
  }
  const int64_t vocab = logits.size(1);
  if (logits.size(0) != static_cast<int64_t>(rows.size())) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} logits rows for {} parameter rows", kOp,
                      logits.size(0), rows.size());
  }
  if (vocab < 1 || vocab > std::numeric_limits<int32_t>::max() / 2 ||
      (logits.stride(1) != 1 && vocab != 1) || (logits.size(0) > 1 && logits.stride(0) < vocab)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: logits {} must have a contiguous, non-empty vocab dim and rows that do "
                      "not overlap",
                      kOp, logits.to_string());
  }
  if (rows.empty()) return Status::ok();
  if (rows.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} rows exceed the grid limit", kOp,
                      rows.size());
  }

  // Merge each row's lists into one entry per token.
  Buffers& b = *buffers_;
  if (edit_slot_.size() < static_cast<size_t>(vocab))
    edit_slot_.assign(static_cast<size_t>(vocab), -1);
  b.edits.clear();
  b.edit_count.assign(rows.size(), 0);
  size_t work_rows = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const SamplingRow& row = rows[r];
    VLLM_RETURN_IF_ERROR(check_row(row, r));
    const size_t first = b.edits.size();
    Status status = Status::ok();
    // The entry of `id` in this row, created on first use; nullptr if id is out of range.
    auto entry = [&](int32_t id, const char* list) -> DeviceEdit* {
      if (id < 0 || id >= vocab) {
        status = make_error(ErrorCode::kInvalidArgument,
                            "{}: row {} has token id {} in {}, outside the vocabulary of {}", kOp,
                            r, id, list, vocab);
        return nullptr;
      }
      int32_t& slot = edit_slot_[static_cast<size_t>(id)];
      if (slot < 0) {
        slot = static_cast<int32_t>(b.edits.size() - first);
        b.edits.push_back(DeviceEdit{id, 0u, 0, 0.0f});
      }
      return &b.edits[first + static_cast<size_t>(slot)];
    };
    for (int32_t id : row.masked_tokens) {
      DeviceEdit* e = entry(id, "masked_tokens");
      if (e == nullptr) break;
      e->flags |= sampling::kEditMask;
    }
    for (size_t i = 0; status.is_ok() && i < row.logit_bias.size(); ++i) {
      DeviceEdit* e = entry(row.logit_bias[i].token_id, "logit_bias");
      if (e == nullptr) break;
      if (e->flags & sampling::kEditBias) {
        status = make_error(ErrorCode::kInvalidArgument,
                            "{}: row {} has token id {} twice in logit_bias", kOp, r, e->token_id);
        break;
      }
      e->flags |= sampling::kEditBias;
      e->bias = row.logit_bias[i].bias;
    }
    const bool repetition = row.repetition_penalty != 1.0;
    const bool output = row.frequency_penalty != 0.0 || row.presence_penalty != 0.0;
    for (size_t i = 0; status.is_ok() && i < row.penalty_tokens.size(); ++i) {
      const PenaltyToken& t = row.penalty_tokens[i];
      uint32_t flags = 0;
      if (repetition && (t.in_prompt || t.output_count > 0)) flags |= sampling::kEditRepetition;
      if (output && t.output_count > 0) flags |= sampling::kEditOutput;
      if (t.output_count < 0) {
        status =
            make_error(ErrorCode::kInvalidArgument, "{}: row {} has output count {} for token {}",
                       kOp, r, t.output_count, t.token_id);
        break;
      }
      if (flags == 0) continue;
      DeviceEdit* e = entry(t.token_id, "penalty_tokens");
      if (e == nullptr) break;
      if (e->flags & (sampling::kEditRepetition | sampling::kEditOutput)) {
        status =
            make_error(ErrorCode::kInvalidArgument,
                       "{}: row {} has token id {} twice in penalty_tokens", kOp, r, t.token_id);
        break;
      }
      e->flags |= flags;
      e->output_count = t.output_count;
    }
    for (size_t i = first; i < b.edits.size(); ++i) {
      edit_slot_[static_cast<size_t>(b.edits[i].token_id)] = -1;
    }
    VLLM_RETURN_IF_ERROR(status);
    b.edit_count[r] = static_cast<int32_t>(b.edits.size() - first);
    if (b.edit_count[r] > 0) ++work_rows;
  }
  if (b.edits.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} sparse entries are too many", kOp,
                      b.edits.size());
  }

  DeviceGuard guard(device_);
  VLLM_RETURN_IF_ERROR(guard.status());
  VLLM_RETURN_IF_ERROR(reserve(rows.size(), b.edits.size(), work_rows, vocab));

  // Pack [rows][edits] into the pinned buffer.
  auto* packed = static_cast<unsigned char*>(b.params_host.get());
  auto* device_rows = reinterpret_cast<DeviceRow*>(packed);
  int32_t edit_begin = 0, work_row = 0;
  bool any_plain = false;
  for (size_t r = 0; r < rows.size(); ++r) {
    const SamplingRow& row = rows[r];
    DeviceRow d{};
    const bool greedy = row.greedy;
    d.uniform = greedy ? 0.0 : row.uniform;
    d.top_p = greedy ? 1.0 : row.top_p;
    d.log_min_p = !greedy && row.min_p > 0.0 ? std::log(row.min_p) : 0.0;
    d.temperature = greedy ? 1.0f : static_cast<float>(row.temperature);
    d.repetition = static_cast<float>(row.repetition_penalty);
    d.inv_repetition = 1.0f / d.repetition;
    d.frequency = static_cast<float>(row.frequency_penalty);
    d.presence = static_cast<float>(row.presence_penalty);
    d.top_k = !greedy && row.top_k > 0 && row.top_k < vocab ? row.top_k : 0;
    d.num_logprobs = row.num_logprobs;
    d.edit_begin = edit_begin;
    d.edit_count = b.edit_count[r];
    d.work_row = d.edit_count > 0 ? work_row++ : -1;
    d.flags = (greedy ? sampling::kRowGreedy : 0u) |
              (!greedy && row.min_p > 0.0 ? sampling::kRowMinP : 0u);
    // (The segment kernels' grid holds up to 65535 rows.)
    const bool plain = rows.size() <= 65535 && d.work_row < 0 &&
                       (d.flags & sampling::kRowMinP) == 0 && d.top_k == 0 && d.top_p >= 1.0 &&
                       d.num_logprobs == 0;
    if (plain) {
      d.flags |= sampling::kRowPlain;
      any_plain = true;
    }
    device_rows[r] = d;
    edit_begin += d.edit_count;
  }
  const size_t offset = edits_offset(rows.size());
  if (!b.edits.empty()) {
    std::memcpy(packed + offset, b.edits.data(), b.edits.size() * sizeof(DeviceEdit));
  }
  const size_t bytes = offset + b.edits.size() * sizeof(DeviceEdit);

  auto* device_base = static_cast<unsigned char*>(b.params_device.get());
  VLLM_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(device_base, packed, bytes, cudaMemcpyHostToDevice, stream));
  sampling::SampleArgs args{};
  args.logits = static_cast<const float*>(logits.data_ptr());
  args.logits_stride = rows.size() > 1 ? logits.stride(0) : vocab;
  args.vocab = static_cast<int32_t>(vocab);
  args.rows = reinterpret_cast<const DeviceRow*>(device_base);
  args.edits = reinterpret_cast<const DeviceEdit*>(device_base + offset);
  args.work = static_cast<float*>(b.work.get());
  args.work_stride = b.work_stride;
  args.results = static_cast<DeviceResult*>(b.results_device.get());
  args.segment_stats = static_cast<sampling::SegmentStats*>(b.segments.get());
  args.segment_draw = reinterpret_cast<sampling::SegmentDraw*>(
      args.segment_stats + b.row_capacity * sampling::kSegments);
  args.any_plain = any_plain;
  VLLM_RETURN_IF_ERROR(
      sampling::launch_sample_rows(args, static_cast<int32_t>(rows.size()), stream));
  VLLM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b.results_host.get(), b.results_device.get(),
                                            rows.size() * sizeof(DeviceResult),
                                            cudaMemcpyDeviceToHost, stream));
  VLLM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));

  const auto* results = static_cast<const DeviceResult*>(b.results_host.get());
  out.resize(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    const DeviceResult& d = results[r];
    SampledToken& t = out[r];
    t.token_id = d.token_id;
    t.logprob = d.logprob;
    t.rank = d.rank;
    t.num_kept = d.num_kept;
    const int n = std::clamp(d.num_top, 0, kMaxDeviceLogprobs);
    t.top_token_ids.assign(d.top_ids, d.top_ids + n);
    t.top_logprobs.assign(d.top_logprobs, d.top_logprobs + n);
  }
  return Status::ok();
}

}  // namespace vllm::cuda
