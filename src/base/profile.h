// A per-region wall-clock profile for finding where a step's time goes, off unless
// VLLM_PROFILE=1. Each region (an op of the op layer, a phase of the engine step) sums its
// calls and time; at exit the process prints one table to stderr, regions in order of
// total time. Regions nest (the forward pass contains its ops), so times are inclusive.
//
//   VLLM_PROFILE_SCOPE("linear");   // at the top of a function or block
//
// Disabled, a scope costs one well-predicted branch.
#pragma once

#include <chrono>
#include <cstdint>

namespace vllm::profile {

bool enabled();
// A stable id for `name` (a string literal); registers the exit report on first use.
int region_id(const char* name);
void add(int id, int64_t nanoseconds);

class Scope {
 public:
  explicit Scope(int id) : id_(enabled() ? id : -1) {
    if (id_ >= 0) start_ = std::chrono::steady_clock::now();
  }
  ~Scope() {
    if (id_ >= 0) {
      add(id_, std::chrono::duration_cast<std::chrono::nanoseconds>(
                   std::chrono::steady_clock::now() - start_)
                   .count());
    }
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  int id_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace vllm::profile

#define VLLM_PROFILE_CONCAT_INNER(a, b) a##b
#define VLLM_PROFILE_CONCAT(a, b) VLLM_PROFILE_CONCAT_INNER(a, b)
#define VLLM_PROFILE_SCOPE(name)                                          \
  static const int VLLM_PROFILE_CONCAT(vllm_profile_id_, __LINE__) =      \
      ::vllm::profile::enabled() ? ::vllm::profile::region_id(name) : -1; \
  ::vllm::profile::Scope VLLM_PROFILE_CONCAT(                             \
      vllm_profile_scope_, __LINE__)(VLLM_PROFILE_CONCAT(vllm_profile_id_, __LINE__))
