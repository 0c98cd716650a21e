// Internal to the CUDA sampler: the plain structs that DeviceSampler (device_sampler.cpp)
// packs on the host and the sampling kernel (sampling.cu) reads on the device, and the
// launcher between them. One pinned buffer holds [rows][edits], copied in one transfer.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/sampling.cuh"
#include "base/status.h"

namespace vllm::cuda::sampling {

// DeviceRow::flags
inline constexpr uint32_t kRowGreedy = 1u << 0;
inline constexpr uint32_t kRowMinP = 1u << 1;
// A "plain" row: no edits, no min_p / top_k / top_p, no top-N logprobs. Its passes over the
// row run in kSegments blocks each (sampling.cu) instead of its one block.
inline constexpr uint32_t kRowPlain = 1u << 2;

// Blocks per plain row: a 248k-token vocabulary is ~7.8k logits per block.
inline constexpr int kSegments = 32;

// One row's parameters, already in the arithmetic types the CPU sampler uses.
struct DeviceRow {
  double uniform;        // the draw u in [0, 1)
  double top_p;          // >= 1: off
  double log_min_p;      // std::log(min_p), used with kRowMinP
  float temperature;     // float(temperature): logits are divided by it
  float repetition;      // float(repetition_penalty)
  float inv_repetition;  // 1.0f / repetition, as the CPU sampler computes it
  float frequency;       // float(frequency_penalty)
  float presence;        // float(presence_penalty)
  int32_t top_k;         // 0: off (host maps <= 0 and >= V to 0)
  int32_t num_logprobs;  // 0..kMaxDeviceLogprobs
  int32_t edit_begin;    // this row's edits: [edit_begin, edit_begin + edit_count)
  int32_t edit_count;
  int32_t work_row;  // row of the work buffer holding the edited logits; -1: no edits
  uint32_t flags;
  int32_t pad;
};
static_assert(sizeof(DeviceRow) % 8 == 0);

// DeviceEdit::flags: what happens to the token's logit, in this order.
inline constexpr uint32_t kEditMask = 1u << 0;        // -> -inf (min_tokens)
inline constexpr uint32_t kEditBias = 1u << 1;        // += bias
inline constexpr uint32_t kEditRepetition = 1u << 2;  // > 0 ? * inv_repetition : * repetition
inline constexpr uint32_t kEditOutput = 1u << 3;      // -= frequency * count; -= presence

// One token of a row whose logit differs from the raw one (unique per row).
struct DeviceEdit {
  int32_t token_id;
  uint32_t flags;
  int32_t output_count;
  float bias;
};
static_assert(sizeof(DeviceEdit) == 16);

struct DeviceResult {
  int32_t token_id;
  int32_t num_top;
  float logprob;
  int32_t num_kept;
  long long rank;
  int32_t top_ids[kMaxDeviceLogprobs];
  float top_logprobs[kMaxDeviceLogprobs];
};

// One segment's share of a plain row, written by the segment kernels (sampling.cu).
struct SegmentStats {  // the raw logits: log-sum-exp state and argmax
  double sum;          // sum of exp(v - max)
  float max;
  int32_t at_max;    // values equal to max
  float best_value;  // argmax value and index (ties to the lowest id; INT_MAX: empty)
  int32_t best_index;
};
struct SegmentDraw {  // the draw's fixed-point weights over the segment
  unsigned long long sum;
  int32_t kept;
  int32_t last;  // last id with a nonzero weight, -1: none
};

struct SampleArgs {
  const float* logits;  // [rows, vocab], row stride logits_stride
  int64_t logits_stride;
  int32_t vocab;
  const DeviceRow* rows;  // [rows]
  const DeviceEdit* edits;
  float* work;  // [work rows, vocab], row stride work_stride
  int64_t work_stride;
  DeviceResult* results;        // [rows]
  SegmentStats* segment_stats;  // [rows][kSegments]
  SegmentDraw* segment_draw;    // [rows][kSegments]
  bool any_plain;               // some row has kRowPlain: run the segment kernels
};

// Launches the sampling kernels on `stream` (one block per row, plus kSegments blocks per
// plain row for its passes); returns launch errors only.
Status launch_sample_rows(const SampleArgs& args, int32_t num_rows, cudaStream_t stream);

}  // namespace vllm::cuda::sampling
