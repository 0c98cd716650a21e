// The last step of every decoder: gather the rows whose logits are wanted, apply the final
// RMSNorm, project with lm_head. Only the gathered rows pay for the vocab-sized matmul.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "tensor/tensor.h"

namespace vllm {

struct LogitsHead {
  Tensor final_norm;  // [hidden]
  float eps = 1e-6f;
  bool unit_offset = false;  // (1 + w) norms (Qwen3.5 / Qwen3-Next)
  Tensor lm_head;            // [vocab, hidden]
};

// hidden F32 [T, H] -> logits F32 [rows.size(), vocab]; a row outside [0, T) is kOutOfRange.
Expected<Tensor> compute_logits(const Tensor& hidden, const std::vector<int64_t>& rows,
                                const LogitsHead& head);

}  // namespace vllm
