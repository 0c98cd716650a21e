// The per-step workspace arena: intermediates of a forward pass are bump-allocated from one
// buffer that is reset at the start of every step, so a step makes no cudaMalloc/cudaFree
// calls and the same sequence of requests (the same padded batch shape) gets the same
// addresses, which CUDA graph capture relies on. Allocation is a stack: a WorkspaceScope
// (one per decoder layer) gives back everything allocated inside it when it ends, so the
// peak is one layer's intermediates, not the sum over layers.
//
// Sizing: the engine runs one profiling step at the largest batch it will schedule; the
// arena's high-water mark after it is the size reserved. A later step that needs more
// (prompt logprobs over a long chunk, say) takes an overflow allocation, logged once, and the
// arena grows to the new high-water mark at the next reset; growth is refused while
// `freeze()` is in effect (during graph capture). Overflow memory is a stack of chunks that
// lives until that reset: a scope that ends rewinds into them rather than freeing them, so the
// next layer reuses the pages the last one touched. (On the CPU, freeing them and allocating
// again made every layer of a step longer than any before it fault in fresh pages: a fifth of
// the demo model's first 1,024-token prefill went to page faults.)
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "base/status.h"
#include "tensor/tensor.h"

namespace vllm {

class Workspace {
 public:
  explicit Workspace(Device device) : device_(device) {}

  // Ensures at least `bytes` of arena (allocating anew if larger; call between steps).
  Status reserve(size_t bytes);
  // Start of a step: every tensor handed out before is dead. Grows the arena to the
  // high-water mark if the last step overflowed.
  Status reset();
  Expected<Tensor> allocate(const Shape& shape, DType dtype);

  // Stack discipline: release(mark()) frees everything allocated after the mark.
  struct Mark {
    size_t used = 0;
    size_t level = 0;   // 0: the arena; i: overflow chunk i - 1
    size_t offset = 0;  // bytes in use in that level
  };
  Mark mark() const { return Mark{used_, level_, offset_}; }
  void release(const Mark& m);

  // While frozen, an allocation past the arena is an error instead of an overflow.
  void freeze(bool frozen) { frozen_ = frozen; }
  // Once pinned the arena keeps its address for good (captured CUDA graphs hold pointers
  // into it): reset() no longer grows it, a step that needs more takes overflow allocations.
  void pin() { pinned_ = true; }
  // After replaying work captured from a fresh reset() that ended with `used` bytes in use:
  // marks those bytes in use again, so what the replay wrote (its logits) is not handed out.
  void claim(size_t used) {
    if (used > used_ && used <= capacity() && level_ == 0) used_ = offset_ = used;
  }

  Device device() const { return device_; }
  size_t capacity() const { return arena_ ? arena_->nbytes() : 0; }
  size_t used() const { return used_; }
  // Largest bytes any step has used since start (arena + overflow).
  size_t high_water() const { return high_water_; }

  static constexpr size_t kAlignment = 256;
  // Smallest overflow chunk: a step that overflows takes a few of these, not one per tensor.
  static constexpr size_t kMinChunkBytes = size_t{4} << 20;

 private:
  Device device_;
  std::shared_ptr<Storage> arena_;
  // Allocation is a bump pointer through the levels: the arena, then overflow_[0], [1], ...
  std::vector<std::shared_ptr<Storage>> overflow_;
  size_t level_ = 0, offset_ = 0;  // where the next allocation goes
  size_t used_ = 0;                // bytes handed out this step, arena and overflow together
  size_t high_water_ = 0;
  bool frozen_ = false;
  bool pinned_ = false;
  bool warned_ = false;
};

// Releases the workspace's allocations made during its lifetime (no-op without a workspace).
class WorkspaceScope {
 public:
  explicit WorkspaceScope(Workspace* ws) : ws_(ws) {
    if (ws_ != nullptr) mark_ = ws_->mark();
  }
  ~WorkspaceScope() {
    if (ws_ != nullptr) ws_->release(mark_);
  }
  WorkspaceScope(const WorkspaceScope&) = delete;
  WorkspaceScope& operator=(const WorkspaceScope&) = delete;

 private:
  Workspace* ws_;
  Workspace::Mark mark_;
};

}  // namespace vllm
