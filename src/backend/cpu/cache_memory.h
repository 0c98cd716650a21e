// Memory for the CPU KV cache and GDN state slots: an anonymous mapping of its own, which
// the kernel fills with zeros page by page on first touch.
//
// The engine sizes the KV cache from a budget (1 GiB by default on the CPU), most of which a
// short chat never reaches. Clearing it with memset at start-up faulted in every page: half a
// second of a one-second `vllm generate` on the demo model. A fresh mapping is already zero,
// so only the pages that blocks actually use are ever touched.
#pragma once

#include "base/status.h"
#include "tensor/tensor.h"

namespace vllm::cpu {

// A zero-filled contiguous CPU tensor whose pages are faulted in on first use.
Expected<Tensor> zeroed_mapping(const Shape& shape, DType dtype);

}  // namespace vllm::cpu
