#include "parallel/shm_group.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <ctime>
#include <new>

namespace vllm::parallel {
namespace {

constexpr uint64_t kMagic = 0x7074'6d6c'6c76'0001ULL;  // "vllmtp" + layout version
constexpr size_t kReasonBytes = 1024;
// Spinning first keeps a collective's latency at a few microseconds when the other ranks are
// already close; past it, waiters sleep so that ranks sharing cores do not starve each other.
constexpr auto kSpin = std::chrono::microseconds(50);
// Sleeps are bounded so the abort flag is rechecked even if a wake-up were missed.
constexpr long kSleepNanos = 10'000'000;

static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

uint32_t* futex_address(std::atomic<uint32_t>& word) {
  return reinterpret_cast<uint32_t*>(&word);
}

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  timespec timeout{0, kSleepNanos};
  syscall(SYS_futex, futex_address(word), FUTEX_WAIT, expected, &timeout, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, futex_address(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

}  // namespace

struct ShmGroup::Header {
  uint64_t magic = kMagic;
  int32_t world_size = 0;
  uint64_t slot_bytes = 0, ring_bytes = 0, total_bytes = 0;
  uint64_t slots_offset = 0, ring_offset = 0;
  std::atomic<uint32_t> aborted{0};
  std::atomic<uint32_t> reason_ready{0};
  char reason[kReasonBytes] = {};
  std::atomic<uint32_t> opened[kMaxRanks] = {};
  alignas(64) std::atomic<uint32_t> arrived{0};
  alignas(64) FutexWord barrier;  // seq: the barrier's generation
  alignas(64) std::atomic<uint64_t> ring_written{0};
  FutexWord ring_write_event;
  alignas(64) std::atomic<uint64_t> ring_consumed[kMaxRanks] = {};
  FutexWord ring_read_event;
};

Expected<std::shared_ptr<ShmGroup>> ShmGroup::create(const std::string& name,
                                                     const ShmGroupOptions& options) {
  if (options.world_size < 1 || options.world_size > kMaxRanks) {
    return make_error(ErrorCode::kInvalidArgument,
                      "a shared-memory group holds 1 to {} ranks, not {}", kMaxRanks,
                      options.world_size);
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t slot = round_up(std::max<size_t>(options.slot_bytes, 64), 64);
  const size_t ring = round_up(std::max<size_t>(options.ring_bytes, 64), 64);
  const size_t slots_offset = round_up(sizeof(Header), page);
  const size_t ring_offset = slots_offset + 2 * static_cast<size_t>(options.world_size) * slot;
  const size_t total = round_up(ring_offset + ring, page);
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    return make_error(ErrorCode::kIoError, "cannot create shared memory '{}': {}", name,
                      std::strerror(errno));
  }
  // Reserve the pages now: on a full /dev/shm a plain ftruncate would succeed and the first
  // write past the space left would be a SIGBUS.
  const int reserved = posix_fallocate(fd, 0, static_cast<off_t>(total));
  if (reserved != 0) {
    close(fd);
    shm_unlink(name.c_str());
    return make_error(ErrorCode::kResourceExhausted,
                      "cannot reserve {:.1f} MiB of shared memory for the tensor-parallel group "
                      "('{}' in /dev/shm): {}",
                      static_cast<double>(total) / (1 << 20), name, std::strerror(reserved));
  }
  auto group = map(name, fd, total, 0, true);
  if (!group) {
    shm_unlink(name.c_str());
    return group.status();
  }
  Header* h = new ((*group)->base_) Header();
  h->world_size = options.world_size;
  h->slot_bytes = slot;
  h->ring_bytes = ring;
  h->total_bytes = total;
  h->slots_offset = slots_offset;
  h->ring_offset = ring_offset;
  h->opened[0].store(1, std::memory_order_release);
  (*group)->header_ = h;
  return group;
}

Expected<std::shared_ptr<ShmGroup>> ShmGroup::open(const std::string& name, int rank) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    return make_error(ErrorCode::kIoError,
                      "cannot open the tensor-parallel group's shared memory "
                      "'{}': {}",
                      name, std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < sizeof(Header)) {
    close(fd);
    return make_error(ErrorCode::kInvalidFormat, "shared memory '{}' is too small", name);
  }
  VLLM_ASSIGN_OR_RETURN(auto group, map(name, fd, static_cast<size_t>(st.st_size), rank, false));
  Header* h = static_cast<Header*>(group->base_);
  if (h->magic != kMagic || h->total_bytes != static_cast<uint64_t>(st.st_size)) {
    return make_error(ErrorCode::kInvalidFormat,
                      "shared memory '{}' is not a tensor-parallel group of this build", name);
  }
  if (rank < 1 || rank >= h->world_size) {
    return make_error(ErrorCode::kInvalidArgument, "rank {} is outside the group of {} ranks", rank,
                      h->world_size);
  }
  if (h->opened[rank].exchange(1, std::memory_order_acq_rel) != 0) {
    return make_error(ErrorCode::kInvalidArgument, "rank {} has already joined group '{}'", rank,
                      name);
  }
  group->header_ = h;
  return group;
}

Expected<std::shared_ptr<ShmGroup>> ShmGroup::map(const std::string& name, int fd, size_t bytes,
                                                  int rank, bool creator) {
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (base == MAP_FAILED) {
    return make_error(ErrorCode::kIoError, "cannot map shared memory '{}': {}", name,
                      std::strerror(err));
  }
  std::shared_ptr<ShmGroup> group(new ShmGroup());
  group->name_ = name;
  group->rank_ = rank;
  group->creator_ = creator;
  group->linked_ = creator;
  group->base_ = base;
  group->bytes_ = bytes;
  return group;
}

ShmGroup::~ShmGroup() {
  if (linked_) shm_unlink(name_.c_str());
  if (base_ != nullptr) munmap(base_, bytes_);
}

void ShmGroup::unlink() {
  if (!linked_) return;
  shm_unlink(name_.c_str());
  linked_ = false;
}

int ShmGroup::world_size() const {
  return header_->world_size;
}
size_t ShmGroup::slot_bytes() const {
  return header_->slot_bytes;
}
size_t ShmGroup::ring_bytes() const {
  return header_->ring_bytes;
}

char* ShmGroup::slot(int phase, int r) const {
  const size_t index = static_cast<size_t>(phase) * static_cast<size_t>(header_->world_size) +
                       static_cast<size_t>(r);
  return static_cast<char*>(base_) + header_->slots_offset + index * header_->slot_bytes;
}

char* ShmGroup::ring() const {
  return static_cast<char*>(base_) + header_->ring_offset;
}

std::atomic<uint64_t>& ShmGroup::ring_written() {
  return header_->ring_written;
}
std::atomic<uint64_t>& ShmGroup::ring_consumed(int r) {
  return header_->ring_consumed[r];
}
FutexWord& ShmGroup::ring_write_event() {
  return header_->ring_write_event;
}
FutexWord& ShmGroup::ring_read_event() {
  return header_->ring_read_event;
}

Status ShmGroup::wait(FutexWord& word, const std::function<bool()>& ready) {
  const auto spin_until = std::chrono::steady_clock::now() + kSpin;
  // The abort flag first: once the group is aborted, nothing it waits for counts any more.
  while (true) {
    if (aborted()) return health();
    if (ready()) return Status::ok();
    if (std::chrono::steady_clock::now() >= spin_until) break;
    for (int i = 0; i < 64; ++i) cpu_relax();
  }
  while (true) {
    const uint32_t seen = word.seq.load(std::memory_order_seq_cst);
    if (aborted()) return health();
    if (ready()) return Status::ok();
    // Seq-cst on both sides: either the waker sees this sleeper and wakes it, or it bumped
    // seq before we sleep, and FUTEX_WAIT returns at once.
    word.sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (!ready() && !aborted()) futex_wait(word.seq, seen);
    word.sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

void ShmGroup::notify(FutexWord& word) {
  word.seq.fetch_add(1, std::memory_order_seq_cst);
  if (word.sleepers.load(std::memory_order_seq_cst) > 0) futex_wake_all(word.seq);
}

Status ShmGroup::barrier() {
  Header& h = *header_;
  const uint32_t generation = h.barrier.seq.load(std::memory_order_acquire);
  if (h.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 ==
      static_cast<uint32_t>(h.world_size)) {
    // The last rank in: reset the count before releasing the others, who may enter the next
    // barrier as soon as they see the new generation.
    h.arrived.store(0, std::memory_order_relaxed);
    notify(h.barrier);
    return health();
  }
  return wait(h.barrier,
              [&] { return h.barrier.seq.load(std::memory_order_acquire) != generation; });
}

void ShmGroup::abort(const std::string& reason) {
  Header& h = *header_;
  uint32_t expected = 0;
  if (h.aborted.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    const size_t n = std::min(reason.size(), kReasonBytes - 1);
    std::memcpy(h.reason, reason.data(), n);
    h.reason[n] = '\0';
    h.reason_ready.store(1, std::memory_order_release);
  }
  // Wake every sleeper (their words keep their values: a barrier's word is its generation);
  // a waiter about to sleep sees the flag within one bounded sleep.
  for (FutexWord* word : {&h.barrier, &h.ring_write_event, &h.ring_read_event}) {
    futex_wake_all(word->seq);
  }
}

bool ShmGroup::aborted() const {
  return header_->aborted.load(std::memory_order_acquire) != 0;
}

Status ShmGroup::health() const {
  if (!aborted()) return Status::ok();
  // The aborting rank writes its reason right after raising the flag.
  for (int i = 0; i < 1000 && header_->reason_ready.load(std::memory_order_acquire) == 0; ++i) {
    cpu_relax();
  }
  const char* reason = header_->reason_ready.load(std::memory_order_acquire) != 0
                           ? header_->reason
                           : "the tensor-parallel group was aborted";
  return make_error(ErrorCode::kInternal, "{}", reason);
}

}  // namespace vllm::parallel
