#include "model/decode_graphs.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>

#include "base/logging.h"
#include "ops/ops.h"

namespace vllm {
namespace {

size_t align_up(size_t n) { return (n + 255) / 256 * 256; }

template <typename T>
T* at(void* base, size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(base) + offset);
}

}  // namespace

std::vector<int64_t> default_graph_batch_sizes(int64_t max_size) {
  std::vector<int64_t> sizes;
  for (int64_t s : {1, 2, 4}) {
    if (s <= max_size) sizes.push_back(s);
  }
  for (int64_t s = 8; s <= max_size; s += s < 256 ? 8 : 16) sizes.push_back(s);
  if (max_size > 0 && (sizes.empty() || sizes.back() != max_size)) sizes.push_back(max_size);
  return sizes;
}

Expected<std::unique_ptr<DecodeGraphs>> DecodeGraphs::capture(Model& model, ModelCache& cache,
                                                              std::vector<int64_t> sizes,
                                                              int64_t max_model_len) {
  const ExecContext& ctx = model.context();
  if (!ctx.is_cuda()) {
    return make_error(ErrorCode::kUnsupported, "CUDA graphs need a CUDA device, not {}",
                      ctx.device.to_string());
  }
  VLLM_RETURN_IF_ERROR(model.check_cache(cache));
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  if (sizes.empty() || sizes.front() <= 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "CUDA graph batch sizes must be positive (got {} sizes)", sizes.size());
  }
  const int64_t block_size = cache.config.block_size;
  if (max_model_len <= 0 || block_size <= 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "CUDA graphs need max_model_len and block_size > 0 (got {} and {})",
                      max_model_len, block_size);
  }
  const auto started = std::chrono::steady_clock::now();
  const DeviceMemory before = device_memory(ctx.device);

  std::unique_ptr<DecodeGraphs> g(new DecodeGraphs(model, cache));
  g->sizes_ = sizes;
  g->max_model_len_ = max_model_len;
  g->block_width_ = (max_model_len + block_size - 1) / block_size;
  g->hybrid_ = !cache.conv_state.empty();
  const auto rows = static_cast<size_t>(sizes.back());
  Layout& l = g->layout_;
  size_t off = 0;
  for (size_t* field : {&l.token_ids, &l.positions, &l.slot_mapping, &l.logits_indices}) {
    *field = off;
    off = align_up(off + rows * sizeof(int64_t));
  }
  l.query_start_loc = off;
  off = align_up(off + (rows + 1) * sizeof(int32_t));
  for (size_t* field : {&l.seq_lens, &l.state_indices}) {
    *field = off;
    off = align_up(off + rows * sizeof(int32_t));
  }
  l.block_tables = off;
  l.total = l.upload_bytes(sizes.back(), g->block_width_);
  VLLM_ASSIGN_OR_RETURN(g->staging_, HostStaging::create(ctx, l.total));
  // Fields that never change: the logits rows and the query starts of one token each.
  std::iota(at<int64_t>(g->staging_.host(), l.logits_indices),
            at<int64_t>(g->staging_.host(), l.logits_indices) + rows, 0);
  std::iota(at<int32_t>(g->staging_.host(), l.query_start_loc),
            at<int32_t>(g->staging_.host(), l.query_start_loc) + rows + 1, 0);

  Workspace& ws = model.runtime().workspace();
  // Largest first: the first capture meets the biggest allocations.
  for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
    const int64_t size = *it;
    VLLM_RETURN_IF_ERROR(g->stage(nullptr, size));
    const StepInputs in = g->inputs(size);
    // Warm-up: the eager run sets what runs once (GEMM plans, kernel attributes).
    VLLM_RETURN_IF_ERROR(ws.reset());
    VLLM_RETURN_IF_ERROR(model.compute(in, cache).status());
    VLLM_RETURN_IF_ERROR(model.runtime().synchronize());
    VLLM_RETURN_IF_ERROR(ws.reset());
    ws.freeze(true);
    Captured c;
    c.size = size;
    auto graph = DeviceGraph::capture(ctx, [&]() -> Status {
      VLLM_ASSIGN_OR_RETURN(c.logits, model.compute(in, cache));
      return Status::ok();
    });
    ws.freeze(false);
    if (!graph) {
      return graph.status().with_context(fmt::format("CUDA graph for decode batch size {}", size));
    }
    c.graph = std::move(*graph);
    c.workspace_used = ws.used();
    g->graphs_.push_back(std::move(c));
  }
  ws.pin();
  std::reverse(g->graphs_.begin(), g->graphs_.end());  // ascending, as sizes_
  VLLM_RETURN_IF_ERROR(model.runtime().synchronize());
  const DeviceMemory after = device_memory(ctx.device);
  g->memory_bytes_ = static_cast<int64_t>(before.free_bytes) - static_cast<int64_t>(after.free_bytes);
  g->capture_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return g;
}

Status DecodeGraphs::stage(const ForwardBatch* batch, int64_t size) {
  VLLM_RETURN_IF_ERROR(staging_.wait_writable());
  void* host = staging_.host();
  const Layout& l = layout_;
  const int64_t requests = batch != nullptr ? batch->num_requests() : 0;
  auto* tokens = at<int64_t>(host, l.token_ids);
  auto* positions = at<int64_t>(host, l.positions);
  auto* slots = at<int64_t>(host, l.slot_mapping);
  auto* seq_lens = at<int32_t>(host, l.seq_lens);
  auto* states = at<int32_t>(host, l.state_indices);
  auto* tables = at<int32_t>(host, l.block_tables);
  if (requests > 0) {
    std::memcpy(tokens, batch->token_ids.data<int64_t>(), requests * sizeof(int64_t));
    std::memcpy(positions, batch->positions.data<int64_t>(), requests * sizeof(int64_t));
    std::memcpy(slots, batch->slot_mapping.data<int64_t>(), requests * sizeof(int64_t));
    std::memcpy(seq_lens, batch->seq_lens.data(), requests * sizeof(int32_t));
    if (hybrid_) std::memcpy(states, batch->state_indices.data(), requests * sizeof(int32_t));
    const int64_t width = batch->block_tables.size(1);
    const int32_t* src = batch->block_tables.data<int32_t>();
    for (int64_t r = 0; r < requests; ++r) {
      // Only the blocks the sequence uses: the kernels read no further.
      const int64_t used = std::min<int64_t>(
          width, (seq_lens[r] + cache_.config.block_size - 1) / cache_.config.block_size);
      std::memcpy(tables + r * block_width_, src + r * width, used * sizeof(int32_t));
    }
  }
  // Padding rows: token 0 at position 0, a one-key context in the null block (block 0),
  // writing no KV (slot -1) and no GDN state (slot -1).
  for (int64_t r = requests; r < size; ++r) {
    tokens[r] = 0;
    positions[r] = 0;
    slots[r] = -1;
    seq_lens[r] = 1;
    states[r] = -1;
    tables[r * block_width_] = 0;
  }
  host_query_start_loc_.assign(at<int32_t>(host, l.query_start_loc),
                               at<int32_t>(host, l.query_start_loc) + size + 1);
  host_seq_lens_.assign(seq_lens, seq_lens + size);
  host_state_indices_.assign(states, states + size);
  return staging_.upload(model_.context(), l.upload_bytes(size, block_width_));
}

StepInputs DecodeGraphs::inputs(int64_t size) const {
  const Tensor& device = staging_.device();
  auto keep = std::make_shared<Tensor>(device);
  const Device dev = device.device();
  auto view = [&](size_t offset, const Shape& shape, DType dtype) {
    return Tensor::borrow(static_cast<char*>(device.data_ptr()) + offset, shape, dtype, dev, keep);
  };
  const Layout& l = layout_;
  StepInputs in;
  in.num_tokens = size;
  in.num_logits = size;
  in.token_ids = view(l.token_ids, {size}, DType::kI64);
  in.positions = view(l.positions, {size}, DType::kI64);
  in.slot_mapping = view(l.slot_mapping, {size}, DType::kI64);
  in.logits_indices = view(l.logits_indices, {size}, DType::kI64);
  ops::BatchLayout& b = in.layout;
  b.query_start_loc = host_query_start_loc_;
  b.seq_lens = host_seq_lens_;
  if (hybrid_) b.state_indices = host_state_indices_;
  b.query_start_loc_device = view(l.query_start_loc, {size + 1}, DType::kI32);
  b.seq_lens_device = view(l.seq_lens, {size}, DType::kI32);
  if (hybrid_) b.state_indices_device = view(l.state_indices, {size}, DType::kI32);
  b.block_tables = view(l.block_tables, {size, block_width_}, DType::kI32);
  b.max_query_len = 1;
  b.max_seq_len = static_cast<int32_t>(max_model_len_);
  return in;
}

const DecodeGraphs::Captured* DecodeGraphs::pick(int64_t requests) const {
  for (const Captured& c : graphs_) {
    if (c.size >= requests) return &c;
  }
  return nullptr;
}

bool DecodeGraphs::covers(const ForwardBatch& batch) const {
  const int64_t requests = batch.num_requests();
  if (requests == 0 || requests > sizes_.back() || batch.num_tokens() != requests) return false;
  if (static_cast<int64_t>(batch.logits_indices.size()) != requests) return false;
  if (hybrid_ && static_cast<int64_t>(batch.state_indices.size()) != requests) return false;
  for (int64_t r = 0; r < requests; ++r) {
    const auto i = static_cast<size_t>(r);
    if (batch.query_start_loc[i + 1] != r + 1 || batch.logits_indices[i] != r) return false;
    // Position 0 would need its GDN state zeroed first; longer than max_model_len does not fit.
    if (batch.seq_lens[i] < 2 || batch.seq_lens[i] > max_model_len_) return false;
  }
  return batch.token_ids.device().is_cpu() && batch.positions.device().is_cpu() &&
         batch.slot_mapping.device().is_cpu() && batch.block_tables.device().is_cpu();
}

Expected<Tensor> DecodeGraphs::run(const ForwardBatch& batch) {
  if (!covers(batch)) {
    return make_error(ErrorCode::kInternal, "DecodeGraphs::run on a batch it does not cover");
  }
  const int64_t requests = batch.num_requests();
  const Captured* c = pick(requests);
  // The slots of one batch must be distinct and in range, as prepare_step checks eagerly.
  if (hybrid_) {
    VLLM_RETURN_IF_ERROR(
        check_state_indices(batch.state_indices, requests, cache_.conv_state[0].size(0)));
  }
  Workspace& ws = model_.runtime().workspace();
  VLLM_RETURN_IF_ERROR(ws.reset());
  VLLM_RETURN_IF_ERROR(stage(&batch, c->size));
  VLLM_RETURN_IF_ERROR(c->graph.replay(model_.context()));
  ws.claim(c->workspace_used);
  ++replays_;
  return c->logits.slice(0, 0, requests);
}

}  // namespace vllm
