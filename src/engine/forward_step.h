// One rank's part of an engine step: restore GDN state snapshots into the slots of requests
// that hit the prefix cache, run the forward pass (a CUDA graph replay when one covers the
// batch), save the snapshots the step ends at. Rank 0's model runner and every
// tensor-parallel worker run this same function on the same ForwardStep, so every rank's
// caches go through the same changes.
#pragma once

#include "base/status.h"
#include "engine/scheduler.h"
#include "model/decode_graphs.h"
#include "model/forward_batch.h"
#include "model/model.h"

namespace vllm::engine {

struct ForwardStep {
  ForwardBatch batch;
  StateSlotCopies restores;  // before the forward pass
  StateSlotCopies saves;     // after it
};

// The logits of batch.logits_indices (Model::forward); graphs may be null.
Expected<Tensor> run_forward_step(Model& model, ModelCache& cache, const ForwardStep& step,
                                  DecodeGraphs* graphs);

}  // namespace vllm::engine
