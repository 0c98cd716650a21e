// Where a hybrid model's requests save GDN state snapshots for prefix caching.
//
// A snapshot can only be taken where a step leaves a request's computation: at the end of a
// chunk. So, as vLLM's mamba "align" mode does, the scheduler ends prefill chunks at the
// positions where a snapshot is wanted, and the model runner copies the request's state slot
// into a snapshot slot after that step. The positions (token counts, on block boundaries):
//
//   prompt end     the last block boundary of the prompt, floor(P / block_size) * block_size
//                  (vLLM's last cache position): the same prompt sent again resumes there
//                  (unless P is whole blocks: a hit leaves the last token to compute), and so
//                  does a longer one that does not resend the reply verbatim;
//   junction       where the blocks of the request's prefix that other requests have cached
//                  (or are computing) end, ahead of its own progress -- looked at whenever a
//                  chunk is scheduled: an earlier request shared exactly that much, so later
//                  ones (a shared system prompt) will hit there;
//   interval       every `interval` tokens of the prompt (0: none), so that prefixes that
//                  nobody has shared yet, and preempted prefills, resume near where they were;
//   output         every block boundary past the prompt (one token per decode step reaches
//                  each of them); a request's earlier output snapshots are demoted to the
//                  front of the LRU queue as newer ones come, and its last one covers the
//                  reply, which the next turn of a chat resends.
//
// A resumed (preempted) request recomputes its outputs as a prefill: its last block boundary
// counts as an output position and is the only stop past the prompt.
#pragma once

#include <cstdint>
#include <optional>

namespace vllm::engine {

struct StateSnapshotPolicy {
  int32_t block_size = 16;
  int64_t interval = 0;  // tokens, a multiple of block_size; 0: no interval snapshots
};

// What the scheduler needs to know about a request.
struct SnapshotRequestView {
  int64_t num_tokens = 0;  // prompt + outputs so far
  int64_t num_prompt_tokens = 0;
  int64_t junction = 0;  // 0: none
};

// The first snapshot position after `num_computed_tokens`, where a chunk starting there must
// end; nullopt when none is left before num_tokens.
std::optional<int64_t> next_snapshot_position(const StateSnapshotPolicy& policy,
                                              const SnapshotRequestView& request,
                                              int64_t num_computed_tokens);

enum class SnapshotKind { kNone, kPrompt, kOutput };

// Whether a chunk ending at `end` ends at a snapshot position, and which kind: kPrompt for the
// prompt-end / junction / interval positions (kept until LRU evicts them), kOutput past the
// prompt (superseded by the request's next one).
SnapshotKind snapshot_kind_at(const StateSnapshotPolicy& policy, const SnapshotRequestView& request,
                              int64_t end);

}  // namespace vllm::engine
