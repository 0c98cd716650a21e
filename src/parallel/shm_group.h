// The POSIX shared-memory segment the ranks of one tensor-parallel group on one host share:
// a header (the abort flag and its reason, a barrier, the step ring's positions), then two
// phases of per-rank collective buffers (shm_communicator.h), then the ring that carries the
// step inputs from rank 0 (step_channel.h).
//
// Synchronisation is by lock-free atomics in the segment and futexes on them (shared, not
// process-private): a waiter spins a few microseconds, then sleeps in FUTEX_WAIT with a short
// timeout, rechecking the abort flag at every wake-up. A rank that dies therefore never leaves
// the others waiting: whoever notices (rank 0's watch on its workers, a worker's watch on rank
// 0) calls abort(), and every wait on every rank returns the reason.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/status.h"

namespace vllm::parallel {

struct ShmGroupOptions {
  int world_size = 1;
  // Bytes of each rank's collective buffer per phase; larger tensors go through in chunks.
  size_t slot_bytes = size_t{4} << 20;
  // Bytes of the step ring; larger messages stream through it.
  size_t ring_bytes = size_t{4} << 20;
};

// A futex word and the count of its sleepers (wakers skip the system call when none sleep).
struct FutexWord {
  std::atomic<uint32_t> seq{0};
  std::atomic<uint32_t> sleepers{0};
};

class ShmGroup {
 public:
  static constexpr int kMaxRanks = 64;

  // Rank 0: a new segment under `name` ("/vllm-tp-..."), its memory reserved up front so a
  // full /dev/shm is an error here, not a SIGBUS later.
  static Expected<std::shared_ptr<ShmGroup>> create(const std::string& name,
                                                    const ShmGroupOptions& options);
  // Rank `rank` > 0: the segment rank 0 created, checked against its header.
  static Expected<std::shared_ptr<ShmGroup>> open(const std::string& name, int rank);
  ~ShmGroup();  // unmaps; the creator also unlinks the name if unlink() was not called
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  // Removes the name once every rank has opened the segment; the mappings stay valid, and
  // nothing is left behind in /dev/shm if a process is killed later.
  void unlink();

  const std::string& name() const { return name_; }
  int rank() const { return rank_; }
  int world_size() const;
  size_t slot_bytes() const;
  size_t ring_bytes() const;
  // Rank `r`'s collective buffer of phase 0 or 1.
  char* slot(int phase, int r) const;
  char* ring() const;

  // Returns once every rank has entered the barrier (or the group is aborted).
  Status barrier();

  // Waits until ready() holds: spins, then sleeps on `word` (woken by notify(word)).
  // An error once the group is aborted.
  Status wait(FutexWord& word, const std::function<bool()>& ready);
  // Wakes the waiters of `word` after the state they wait for has changed.
  void notify(FutexWord& word);

  void abort(const std::string& reason);
  bool aborted() const;
  Status health() const;

  // The step ring's shared positions (step_channel.cpp): bytes written by rank 0, bytes each
  // reader has consumed, and the words their waits sleep on.
  std::atomic<uint64_t>& ring_written();
  std::atomic<uint64_t>& ring_consumed(int r);
  FutexWord& ring_write_event();
  FutexWord& ring_read_event();

 private:
  struct Header;
  ShmGroup() = default;
  static Expected<std::shared_ptr<ShmGroup>> map(const std::string& name, int fd, size_t bytes,
                                                 int rank, bool creator);

  std::string name_;
  int rank_ = 0;
  bool creator_ = false;
  bool linked_ = false;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  Header* header_ = nullptr;
};

}  // namespace vllm::parallel
