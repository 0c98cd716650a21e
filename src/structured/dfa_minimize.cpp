// Hopcroft's DFA minimization over byte classes and rule calls (dfa_minimize.h).
//
// The DFA is completed with a sink state (every missing edge goes there), the states split
// into accepting and not, and each block of a worklist refines the partition: for every
// symbol, the states leading into the block on it are separated from those that do not. A
// split block's smaller half joins the worklist (its larger half is already covered), which
// bounds the work by O(k n log n). Blocks are ranges of one permutation of the states
// (a refinable partition), so a split moves each marked state once.
#include "structured/dfa_minimize.h"

#include <algorithm>
#include <map>
#include <utility>

namespace vllm::structured {
namespace {

class Partition {
 public:
  explicit Partition(int32_t n)
      : elems_(static_cast<size_t>(n)),
        loc_(static_cast<size_t>(n)),
        block_of_(static_cast<size_t>(n), 0) {
    for (int32_t i = 0; i < n; ++i)
      elems_[static_cast<size_t>(i)] = loc_[static_cast<size_t>(i)] = i;
    first_.push_back(0);
    end_.push_back(n);
    marked_.push_back(0);
  }

  int32_t num_blocks() const { return static_cast<int32_t>(first_.size()); }
  int32_t block_of(int32_t s) const { return block_of_[static_cast<size_t>(s)]; }
  std::pair<int32_t, int32_t> range(int32_t b) const {
    return {first_[static_cast<size_t>(b)], end_[static_cast<size_t>(b)]};
  }
  int32_t element(int32_t i) const { return elems_[static_cast<size_t>(i)]; }

  void mark(int32_t s) {
    const auto b = static_cast<size_t>(block_of_[static_cast<size_t>(s)]);
    const int32_t to = first_[b] + marked_[b];
    const int32_t from = loc_[static_cast<size_t>(s)];
    if (from < to) return;  // already marked
    const int32_t other = elems_[static_cast<size_t>(to)];
    std::swap(elems_[static_cast<size_t>(from)], elems_[static_cast<size_t>(to)]);
    loc_[static_cast<size_t>(s)] = to;
    loc_[static_cast<size_t>(other)] = from;
    if (marked_[b]++ == 0) touched_.push_back(static_cast<int32_t>(b));
  }

  // Splits every block with marked states off its unmarked ones; the smaller side gets a
  // new block id, which is reported through `added`.
  template <class Added>
  void split(Added&& added) {
    for (int32_t b : touched_) {
      const auto bi = static_cast<size_t>(b);
      const int32_t m = marked_[bi];
      marked_[bi] = 0;
      const int32_t size = end_[bi] - first_[bi];
      if (m == size) continue;
      const auto nb = static_cast<int32_t>(first_.size());
      int32_t lo = 0, hi = 0;
      if (m <= size - m) {
        lo = first_[bi], hi = first_[bi] + m;
        first_[bi] = hi;
      } else {
        lo = first_[bi] + m, hi = end_[bi];
        end_[bi] = lo;
      }
      first_.push_back(lo);
      end_.push_back(hi);
      marked_.push_back(0);
      for (int32_t i = lo; i < hi; ++i)
        block_of_[static_cast<size_t>(elems_[static_cast<size_t>(i)])] = nb;
      added(nb);
    }
    touched_.clear();
  }

 private:
  std::vector<int32_t> elems_, loc_, block_of_;
  std::vector<int32_t> first_, end_, marked_;
  std::vector<int32_t> touched_;
};

}  // namespace

RuleDfa minimize_dfa(const RuleDfa& dfa, int32_t num_classes) {
  const int32_t n = dfa.size();
  const int32_t sink = n;
  const auto classes = static_cast<size_t>(num_classes);
  // Symbols: the byte classes, then one per rule called anywhere in this DFA (a state calls
  // each rule at most once: subset construction merges the targets).
  std::map<int32_t, int32_t> rule_symbol;
  for (const auto& calls : dfa.calls) {
    for (const auto& call : calls) rule_symbol.emplace(call.rule, 0);
  }
  int32_t k = num_classes;
  for (auto& [rule, symbol] : rule_symbol) symbol = k++;
  // The predecessor tables take 8 bytes per state and symbol; past this the DFA stays as
  // subset construction built it (correct, only larger).
  constexpr int64_t kMaxTableEntries = int64_t{4} << 20;
  if (static_cast<int64_t>(n + 1) * k > kMaxTableEntries) return dfa;
  auto target = [&](int32_t s, int32_t symbol) -> int32_t {
    if (s == sink) return sink;
    if (symbol < num_classes) {
      const int32_t t = dfa.next[static_cast<size_t>(s) * classes + static_cast<size_t>(symbol)];
      return t < 0 ? sink : t;
    }
    for (const auto& call : dfa.calls[static_cast<size_t>(s)]) {
      if (rule_symbol.at(call.rule) == symbol) return call.return_state;
    }
    return sink;
  };
  // Predecessors per symbol, as CSR: preds[sym] is [offset[sym][t], offset[sym][t + 1]).
  const auto total = static_cast<size_t>(n + 1);
  std::vector<std::vector<int32_t>> offset(static_cast<size_t>(k),
                                           std::vector<int32_t>(total + 1, 0));
  std::vector<std::vector<int32_t>> preds(static_cast<size_t>(k));
  for (int32_t sym = 0; sym < k; ++sym) {
    auto& off = offset[static_cast<size_t>(sym)];
    for (int32_t s = 0; s <= n; ++s) ++off[static_cast<size_t>(target(s, sym)) + 1];
    for (size_t t = 0; t < total; ++t) off[t + 1] += off[t];
    auto& list = preds[static_cast<size_t>(sym)];
    list.resize(total);
    std::vector<int32_t> fill(off.begin(), off.end() - 1);
    for (int32_t s = 0; s <= n; ++s) {
      list[static_cast<size_t>(fill[static_cast<size_t>(target(s, sym))]++)] = s;
    }
  }

  Partition p(n + 1);
  std::vector<int32_t> worklist;
  std::vector<uint8_t> queued;
  auto add = [&](int32_t b) {
    if (static_cast<size_t>(b) >= queued.size()) queued.resize(static_cast<size_t>(b) + 1, 0);
    if (!queued[static_cast<size_t>(b)]) {
      queued[static_cast<size_t>(b)] = 1;
      worklist.push_back(b);
    }
  };
  for (int32_t s = 0; s < n; ++s) {
    if (dfa.accepting[static_cast<size_t>(s)]) p.mark(s);
  }
  p.split(add);  // accepting vs not: the smaller side is queued
  std::vector<int32_t> splitter;
  while (!worklist.empty()) {
    const int32_t a = worklist.back();
    worklist.pop_back();
    queued[static_cast<size_t>(a)] = 0;
    splitter.clear();
    const auto [lo, hi] = p.range(a);
    for (int32_t i = lo; i < hi; ++i) splitter.push_back(p.element(i));
    for (int32_t sym = 0; sym < k; ++sym) {
      const auto& off = offset[static_cast<size_t>(sym)];
      const auto& list = preds[static_cast<size_t>(sym)];
      for (int32_t t : splitter) {
        for (int32_t i = off[static_cast<size_t>(t)]; i < off[static_cast<size_t>(t) + 1]; ++i) {
          p.mark(list[static_cast<size_t>(i)]);
        }
      }
      p.split(add);  // the new (smaller) block is queued; a queued block stays queued
    }
  }

  // Renumber: the start state's block first, the sink's block dropped.
  const int32_t dead = p.block_of(sink);
  std::vector<int32_t> id(static_cast<size_t>(p.num_blocks()), -1);
  std::vector<int32_t> representative;
  for (int32_t s = 0; s < n; ++s) {
    const int32_t b = p.block_of(s);
    if ((b == dead && s != 0) || id[static_cast<size_t>(b)] >= 0) continue;
    id[static_cast<size_t>(b)] = static_cast<int32_t>(representative.size());
    representative.push_back(s);
  }
  auto map = [&](int32_t t) {
    return t < 0 || p.block_of(t) == dead ? -1 : id[static_cast<size_t>(p.block_of(t))];
  };
  RuleDfa out;
  out.rule = dfa.rule;
  out.next.assign(representative.size() * classes, -1);
  for (size_t r = 0; r < representative.size(); ++r) {
    const auto s = static_cast<size_t>(representative[r]);
    out.accepting.push_back(dfa.accepting[s]);
    out.calls.emplace_back();
    if (p.block_of(static_cast<int32_t>(s)) == dead) continue;  // a start that matches nothing
    for (size_t c = 0; c < classes; ++c) out.next[r * classes + c] = map(dfa.next[s * classes + c]);
    for (const auto& call : dfa.calls[s]) {
      const int32_t ret = map(call.return_state);
      if (ret >= 0) out.calls.back().push_back({call.rule, ret});
    }
  }
  return out;
}

}  // namespace vllm::structured
