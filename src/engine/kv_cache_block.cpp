// The free block queue's list surgery. Every operation is O(1) per block moved; nothing
// allocates except popleft_n's result vector and the debugging walk.
#include "engine/kv_cache_block.h"

#include "base/status.h"

namespace vllm::engine {

FreeKVCacheBlockQueue::FreeKVCacheBlockQueue(std::span<KVCacheBlock> blocks)
    : num_free_blocks_(static_cast<int32_t>(blocks.size())) {
  KVCacheBlock* prev = &fake_free_list_head_;
  for (KVCacheBlock& block : blocks) {
    prev->next_free_block = &block;
    block.prev_free_block = prev;
    prev = &block;
  }
  prev->next_free_block = &fake_free_list_tail_;
  fake_free_list_tail_.prev_free_block = prev;
}

KVCacheBlock* FreeKVCacheBlockQueue::popleft() {
  KVCacheBlock* first = fake_free_list_head_.next_free_block;
  VLLM_CHECK_MSG(first != &fake_free_list_tail_ && num_free_blocks_ > 0,
                 "popleft() on an empty free block queue ({} free)", num_free_blocks_);
  VLLM_CHECK_MSG(first->next_free_block != nullptr, "block {} at the queue head has no next link",
                 first->block_id);
  fake_free_list_head_.next_free_block = first->next_free_block;
  first->next_free_block->prev_free_block = &fake_free_list_head_;
  first->prev_free_block = nullptr;
  first->next_free_block = nullptr;
  --num_free_blocks_;
  return first;
}

std::vector<KVCacheBlock*> FreeKVCacheBlockQueue::popleft_n(int32_t n) {
  VLLM_CHECK_MSG(n >= 0 && n <= num_free_blocks_, "popleft_n({}) with {} free blocks", n,
                 num_free_blocks_);
  std::vector<KVCacheBlock*> popped;
  if (n == 0) return popped;
  popped.reserve(static_cast<size_t>(n));
  KVCacheBlock* curr = fake_free_list_head_.next_free_block;
  for (int32_t i = 0; i < n; ++i) {
    VLLM_CHECK(curr != nullptr && curr != &fake_free_list_tail_);
    KVCacheBlock* next = curr->next_free_block;
    curr->prev_free_block = nullptr;
    curr->next_free_block = nullptr;
    popped.push_back(curr);
    curr = next;
  }
  fake_free_list_head_.next_free_block = curr;
  curr->prev_free_block = &fake_free_list_head_;
  num_free_blocks_ -= n;
  return popped;
}

void FreeKVCacheBlockQueue::remove(KVCacheBlock* block) {
  VLLM_CHECK_MSG(block->prev_free_block != nullptr && block->next_free_block != nullptr,
                 "remove() on block {}, which is not in the free queue", block->block_id);
  block->prev_free_block->next_free_block = block->next_free_block;
  block->next_free_block->prev_free_block = block->prev_free_block;
  block->prev_free_block = nullptr;
  block->next_free_block = nullptr;
  --num_free_blocks_;
}

void FreeKVCacheBlockQueue::append(KVCacheBlock* block) {
  KVCacheBlock* const blocks[] = {block};
  append_n(blocks);
}

void FreeKVCacheBlockQueue::append_n(std::span<KVCacheBlock* const> blocks) {
  if (blocks.empty()) return;
  KVCacheBlock* last = fake_free_list_tail_.prev_free_block;
  VLLM_CHECK(last != nullptr);
  for (KVCacheBlock* block : blocks) {
    VLLM_CHECK_MSG(block->prev_free_block == nullptr && block->next_free_block == nullptr,
                   "block {} is already in the free queue", block->block_id);
    block->prev_free_block = last;
    last->next_free_block = block;
    last = block;
  }
  last->next_free_block = &fake_free_list_tail_;
  fake_free_list_tail_.prev_free_block = last;
  num_free_blocks_ += static_cast<int32_t>(blocks.size());
}

void FreeKVCacheBlockQueue::prepend_n(std::span<KVCacheBlock* const> blocks) {
  if (blocks.empty()) return;
  KVCacheBlock* first = fake_free_list_head_.next_free_block;
  VLLM_CHECK(first != nullptr);
  KVCacheBlock* prev = &fake_free_list_head_;
  for (KVCacheBlock* block : blocks) {
    VLLM_CHECK_MSG(block->prev_free_block == nullptr && block->next_free_block == nullptr,
                   "block {} is already in the free queue", block->block_id);
    block->prev_free_block = prev;
    prev->next_free_block = block;
    prev = block;
  }
  prev->next_free_block = first;
  first->prev_free_block = prev;
  num_free_blocks_ += static_cast<int32_t>(blocks.size());
}

std::vector<KVCacheBlock*> FreeKVCacheBlockQueue::get_all_free_blocks() const {
  std::vector<KVCacheBlock*> blocks;
  for (KVCacheBlock* curr = fake_free_list_head_.next_free_block; curr != &fake_free_list_tail_;
       curr = curr->next_free_block) {
    blocks.push_back(curr);
  }
  return blocks;
}

std::vector<int32_t> FreeKVCacheBlockQueue::get_all_free_block_ids() const {
  std::vector<int32_t> ids;
  for (const KVCacheBlock* block : get_all_free_blocks()) ids.push_back(block->block_id);
  return ids;
}

}  // namespace vllm::engine
