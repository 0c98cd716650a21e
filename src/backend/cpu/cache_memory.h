// Memory for the CPU KV cache, GDN state slots and step workspace: an anonymous mapping of
// its own, which the kernel fills with zeros page by page on first touch.
//
// The engine sizes the KV cache from a budget (1 GiB by default on the CPU), most of which a
// short chat never reaches. Clearing it with memset at start-up faulted in every page: half a
// second of a one-second `vllm generate` on the demo model. A fresh mapping is already zero,
// so only the pages that blocks actually use are ever touched. Mappings of 2 MiB and more are
// huge-page aligned and advised (MADV_HUGEPAGE): the first prefill of the demo model spent a
// tenth of its time faulting in 4 KiB pages of the KV cache and GDN state one at a time; a
// short chat now touches at least 2 MiB per layer's cache instead of a few KiB.
#pragma once

#include "base/status.h"
#include "tensor/tensor.h"

namespace vllm::cpu {

// A zero-filled contiguous CPU tensor whose pages are faulted in on first use.
Expected<Tensor> zeroed_mapping(const Shape& shape, DType dtype);
// The same memory as a Storage (the CPU workspace's arena and overflow chunks).
Expected<std::shared_ptr<Storage>> zeroed_storage(size_t nbytes);

}  // namespace vllm::cpu
