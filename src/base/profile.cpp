// Region profile (profile.h): a fixed table of atomic counters, printed at exit.
#include "base/profile.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace vllm::profile {
namespace {

constexpr int kMaxRegions = 128;

struct Region {
  const char* name = nullptr;
  std::atomic<int64_t> ns{0};
  std::atomic<int64_t> calls{0};
};

Region g_regions[kMaxRegions];
std::atomic<int> g_count{0};
std::mutex g_mutex;  // registration only

void report() {
  const int n = g_count.load();
  std::vector<int> order(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [](int a, int b) { return g_regions[a].ns.load() > g_regions[b].ns.load(); });
  std::fprintf(stderr, "\nVLLM_PROFILE (wall clock, inclusive; regions nest)\n");
  std::fprintf(stderr, "%-28s %10s %12s %12s\n", "region", "calls", "total ms", "mean us");
  for (int i : order) {
    const Region& r = g_regions[i];
    const int64_t calls = r.calls.load();
    if (calls == 0) continue;
    std::fprintf(stderr, "%-28s %10lld %12.2f %12.2f\n", r.name, static_cast<long long>(calls),
                 static_cast<double>(r.ns.load()) * 1e-6,
                 static_cast<double>(r.ns.load()) * 1e-3 / static_cast<double>(calls));
  }
}

}  // namespace

bool enabled() {
  static const bool on = [] {
    const char* env = std::getenv("VLLM_PROFILE");
    return env != nullptr && *env != '\0' && std::strcmp(env, "0") != 0;
  }();
  return on;
}

int region_id(const char* name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const int n = g_count.load();
  for (int i = 0; i < n; ++i) {
    if (std::strcmp(g_regions[i].name, name) == 0) return i;
  }
  if (n == kMaxRegions) return -1;
  if (n == 0) std::atexit(report);
  g_regions[n].name = name;
  g_count.store(n + 1);
  return n;
}

void add(int id, int64_t nanoseconds) {
  if (id < 0) return;
  g_regions[id].ns.fetch_add(nanoseconds, std::memory_order_relaxed);
  g_regions[id].calls.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace vllm::profile
