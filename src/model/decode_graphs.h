// CUDA graphs for decode steps (vLLM's full-graph decode capture).
//
// A decode step of a small batch is hundreds of short kernels; launched one by one from the
// host they take longer to launch than to run. DecodeGraphs records Model::compute once per
// padded batch size of a ladder (1, 2, 4, 8, then steps of 8 up to 256 and of 16 beyond)
// and replays it in one launch.
//
// What makes a replay valid for new inputs:
//   - The step's inputs live in persistent device buffers (one per field, sized for the
//     largest captured batch) that every graph reads; a step fills their page-locked host
//     twin and moves it with one asynchronous copy, then replays.
//   - Intermediates come from the runtime's workspace, reset before each capture: the same
//     batch size makes the same allocations at the same addresses. The arena is pinned
//     after capture (it never moves again).
//   - Nothing in compute() depends on host values that change between steps of one size:
//     the block table has a fixed width (max_model_len / block_size) and attention splits
//     its keys per request on the device, with the grid sized for max_model_len.
//   - Padding rows (batch R padded to size B) write nowhere: KV slot -1 and GDN state slot
//     -1, a one-key context in the null block; their logits rows are never read.
// Mixed steps (any prefill chunk), steps larger than the largest size, and steps whose first
// token is position 0 (their GDN state is zeroed first) run eagerly through Model::forward.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "model/model.h"
#include "ops/graph.h"

namespace vllm {

// vLLM's default capture sizes: 1, 2, 4, then multiples of 8 up to 256, then of 16, up to
// `max_size`, which is included.
std::vector<int64_t> default_graph_batch_sizes(int64_t max_size);

class DecodeGraphs {
 public:
  // Captures one graph per size in `sizes` (positive, any order; duplicates dropped) for
  // `model` with `cache`, each after one eager warm-up run, and pins the workspace.
  // max_model_len bounds every sequence the graphs will see.
  static Expected<std::unique_ptr<DecodeGraphs>> capture(Model& model, ModelCache& cache,
                                                         std::vector<int64_t> sizes,
                                                         int64_t max_model_len);

  // True when run() can take the batch: every request has one query token past position 0
  // (a decode step), its logits rows are 0..R-1 in order, R fits a captured size, and every
  // sequence fits max_model_len.
  bool covers(const ForwardBatch& batch) const;
  // Logits F32 [R, vocab] of a batch covers() accepts (workspace memory, as forward()'s).
  Expected<Tensor> run(const ForwardBatch& batch);

  const std::vector<int64_t>& sizes() const { return sizes_; }
  double capture_seconds() const { return capture_seconds_; }
  // Device memory the capture took (graphs and buffers; cudaMemGetInfo before and after).
  int64_t memory_bytes() const { return memory_bytes_; }
  size_t num_nodes(size_t i) const { return graphs_[i].graph.num_nodes(); }
  // Steps run() has replayed.
  int64_t replays() const { return replays_; }

 private:
  struct Captured {
    int64_t size = 0;
    DeviceGraph graph;
    Tensor logits;                // [size, vocab] in the workspace
    size_t workspace_used = 0;    // the workspace in use when the capture ended
  };
  // Byte offsets of the input fields in the staging buffers.
  struct Layout {
    size_t token_ids = 0, positions = 0, slot_mapping = 0, logits_indices = 0;
    size_t query_start_loc = 0, seq_lens = 0, state_indices = 0, block_tables = 0;
    size_t total = 0;
    size_t upload_bytes(int64_t batch, int64_t width) const {
      return block_tables + static_cast<size_t>(batch * width) * sizeof(int32_t);
    }
  };

  DecodeGraphs(Model& model, ModelCache& cache) : model_(model), cache_(cache) {}
  // Host side of a padded batch of `size` rows from `batch` (or a dummy one), then the copy.
  Status stage(const ForwardBatch* batch, int64_t size);
  // Device views of the first `size` rows of every field, as compute() takes them.
  StepInputs inputs(int64_t size) const;
  const Captured* pick(int64_t requests) const;

  Model& model_;
  ModelCache& cache_;
  std::vector<int64_t> sizes_;  // ascending
  std::vector<Captured> graphs_;
  int64_t max_model_len_ = 0;
  int64_t block_width_ = 0;  // block table columns
  bool hybrid_ = false;
  Layout layout_;
  HostStaging staging_;
  // Host spans StepInputs' layout points into (compute() reads only their sizes on CUDA).
  std::vector<int32_t> host_query_start_loc_, host_seq_lens_, host_state_indices_;
  double capture_seconds_ = 0;
  int64_t memory_bytes_ = 0;
  int64_t replays_ = 0;
};

}  // namespace vllm
