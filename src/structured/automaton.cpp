// NFA -> per-rule minimal DFAs -> one globally numbered automaton (automaton.h, steps 3-4).
#include "structured/automaton.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <unordered_map>
#include <utility>

#include "structured/dfa_minimize.h"
#include "structured/nfa.h"

namespace vllm::structured {
namespace {

struct VectorHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ v.size();
    for (int32_t x : v) {
      h ^= static_cast<uint64_t>(static_cast<uint32_t>(x)) + 0x9E3779B97F4A7C15ULL + (h << 6) +
           (h >> 2);
    }
    return static_cast<size_t>(h);
  }
};

}  // namespace

class AutomatonBuilder {
 public:
  AutomatonBuilder(const Grammar& g, const AutomatonLimits& limits) : g_(g), limits_(limits) {}

  Expected<GrammarAutomaton> build() {
    VLLM_ASSIGN_OR_RETURN(nfa_, build_nfa(g_, limits_));
    compute_byte_classes();
    for (size_t r = 0; r < nfa_.rule_start.size(); ++r) {
      if (nfa_.rule_start[r] < 0) continue;
      VLLM_ASSIGN_OR_RETURN(RuleDfa dfa, determinize(static_cast<int32_t>(r)));
      dfas_.push_back(minimize_dfa(dfa, out_.num_classes_));
    }
    nfa_ = Nfa();
    return finish();
  }

 private:
  void compute_byte_classes() {
    std::array<bool, 257> boundary{};
    boundary[0] = true;
    for (const Nfa::State& s : nfa_.states) {
      for (const Nfa::ByteEdge& e : s.bytes) {
        boundary[e.lo] = true;
        boundary[static_cast<size_t>(e.hi) + 1] = true;
      }
    }
    int32_t cls = -1;
    for (int b = 0; b < 256; ++b) {
      if (boundary[static_cast<size_t>(b)]) ++cls;
      out_.byte_class_[static_cast<size_t>(b)] = static_cast<uint8_t>(cls);
    }
    out_.num_classes_ = cls + 1;
  }

  std::vector<int32_t> closure(std::vector<int32_t> states) {
    if (stamp_.size() < nfa_.states.size()) stamp_.resize(nfa_.states.size(), 0);
    ++epoch_;
    std::vector<int32_t> out;
    std::vector<int32_t> stack = std::move(states);
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      if (stamp_[static_cast<size_t>(s)] == epoch_) continue;
      stamp_[static_cast<size_t>(s)] = epoch_;
      out.push_back(s);
      for (int32_t t : nfa_.states[static_cast<size_t>(s)].eps) stack.push_back(t);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  Expected<RuleDfa> determinize(int32_t rule) {
    RuleDfa dfa;
    dfa.rule = rule;
    const int32_t accept = nfa_.rule_accept[static_cast<size_t>(rule)];
    const auto classes = static_cast<size_t>(out_.num_classes_);
    std::unordered_map<std::vector<int32_t>, int32_t, VectorHash> ids;
    std::vector<std::vector<int32_t>> sets;
    auto id_of = [&](std::vector<int32_t> set) -> Expected<int32_t> {
      auto it = ids.find(set);
      if (it != ids.end()) return it->second;
      if (++total_dfa_states_ > limits_.max_dfa_states) {
        return make_error(ErrorCode::kInvalidArgument,
                          "the grammar is too large: its automaton needs more than {} states",
                          limits_.max_dfa_states);
      }
      const auto id = static_cast<int32_t>(sets.size());
      ids.emplace(set, id);
      sets.push_back(std::move(set));
      return id;
    };
    VLLM_RETURN_IF_ERROR(id_of(closure({nfa_.rule_start[static_cast<size_t>(rule)]})).status());
    std::vector<std::vector<int32_t>> by_class(classes);
    for (size_t d = 0; d < sets.size(); ++d) {
      const std::vector<int32_t> set = sets[d];  // copy: `sets` grows below
      for (auto& v : by_class) v.clear();
      std::map<int32_t, std::vector<int32_t>> by_rule;
      bool accepting = false;
      for (int32_t s : set) {
        if (s == accept) accepting = true;
        const Nfa::State& st = nfa_.states[static_cast<size_t>(s)];
        for (const Nfa::ByteEdge& e : st.bytes) {
          for (size_t c = out_.byte_class_[e.lo]; c <= out_.byte_class_[e.hi]; ++c) {
            by_class[c].push_back(e.target);
          }
        }
        for (const Nfa::CallEdge& e : st.calls) by_rule[e.rule].push_back(e.target);
      }
      dfa.accepting.push_back(accepting ? 1 : 0);
      dfa.next.resize(dfa.next.size() + classes, -1);
      for (size_t c = 0; c < classes; ++c) {
        if (by_class[c].empty()) continue;
        VLLM_ASSIGN_OR_RETURN(int32_t t, id_of(closure(std::move(by_class[c]))));
        dfa.next[d * classes + c] = t;
      }
      dfa.calls.emplace_back();
      for (auto& [callee, targets] : by_rule) {
        VLLM_ASSIGN_OR_RETURN(int32_t t, id_of(closure(std::move(targets))));
        dfa.calls[d].push_back({callee, t});
      }
    }
    return dfa;
  }

  // Globally numbered tables with dead states and calls to empty rules removed; then the
  // nullable rules and the left-recursion check.
  Expected<GrammarAutomaton> finish() {
    const size_t num_rules = g_.rules().size();
    const auto classes = static_cast<size_t>(out_.num_classes_);
    std::vector<int32_t> dfa_of_rule(num_rules, -1);
    for (size_t i = 0; i < dfas_.size(); ++i)
      dfa_of_rule[static_cast<size_t>(dfas_[i].rule)] = static_cast<int32_t>(i);

    // live[i][s]: from state s of dfa i an accepting state can be reached (through calls of
    // productive rules); productive[r]: rule r matches at least one string. A backward
    // search from the accepting states over reversed edges; a call edge counts once its
    // callee turns out productive.
    std::vector<std::vector<uint8_t>> live(dfas_.size());
    std::vector<uint8_t> productive(num_rules, 0);
    struct Pred {
      int32_t from;
      int32_t rule;  // -1: a byte edge
    };
    std::vector<std::vector<std::vector<Pred>>> preds(dfas_.size());
    std::vector<std::vector<std::pair<int32_t, int32_t>>> waiting(num_rules);  // (dfa, state)
    std::vector<std::pair<int32_t, int32_t>> work;
    for (size_t i = 0; i < dfas_.size(); ++i) {
      const RuleDfa& d = dfas_[i];
      live[i].assign(static_cast<size_t>(d.size()), 0);
      preds[i].resize(static_cast<size_t>(d.size()));
      for (int32_t s = 0; s < d.size(); ++s) {
        for (size_t c = 0; c < classes; ++c) {
          const int32_t t = d.next[static_cast<size_t>(s) * classes + c];
          if (t >= 0) preds[i][static_cast<size_t>(t)].push_back({s, -1});
        }
        for (const auto& call : d.calls[static_cast<size_t>(s)]) {
          preds[i][static_cast<size_t>(call.return_state)].push_back({s, call.rule});
        }
      }
    }
    auto make_live = [&](int32_t i, int32_t s) {
      uint8_t& l = live[static_cast<size_t>(i)][static_cast<size_t>(s)];
      if (l) return;
      l = 1;
      work.push_back({i, s});
    };
    for (size_t i = 0; i < dfas_.size(); ++i) {
      for (int32_t s = 0; s < dfas_[i].size(); ++s) {
        if (dfas_[i].accepting[static_cast<size_t>(s)]) make_live(static_cast<int32_t>(i), s);
      }
    }
    while (!work.empty()) {
      const auto [i, t] = work.back();
      work.pop_back();
      if (t == 0) {  // the rule's start: the rule is productive
        const auto rule = static_cast<size_t>(dfas_[static_cast<size_t>(i)].rule);
        if (!productive[rule]) {
          productive[rule] = 1;
          for (const auto& [wi, ws] : waiting[rule]) make_live(wi, ws);
          waiting[rule].clear();
        }
      }
      for (const Pred& p : preds[static_cast<size_t>(i)][static_cast<size_t>(t)]) {
        if (p.rule < 0 || productive[static_cast<size_t>(p.rule)]) {
          make_live(i, p.from);
        } else {
          waiting[static_cast<size_t>(p.rule)].push_back({i, p.from});
        }
      }
    }
    if (!productive[static_cast<size_t>(g_.root())]) {
      return make_error(ErrorCode::kInvalidArgument,
                        "the grammar matches no string (rule '{}' can never complete)",
                        g_.rule(g_.root()).name);
    }

    // Keep the states reachable from the root through live edges.
    std::vector<std::vector<int32_t>> global(dfas_.size());
    for (size_t i = 0; i < dfas_.size(); ++i)
      global[i].assign(static_cast<size_t>(dfas_[i].size()), -1);
    std::vector<std::pair<int32_t, int32_t>> order;  // (dfa, local state) in numbering order
    std::vector<std::pair<int32_t, int32_t>> stack;
    std::vector<int32_t> rule_queue = {g_.root()};
    std::vector<uint8_t> rule_seen(num_rules, 0);
    rule_seen[static_cast<size_t>(g_.root())] = 1;
    for (size_t q = 0; q < rule_queue.size(); ++q) {
      const int32_t i = dfa_of_rule[static_cast<size_t>(rule_queue[q])];
      stack.push_back({i, 0});
      while (!stack.empty()) {
        auto [d, s] = stack.back();
        stack.pop_back();
        if (global[static_cast<size_t>(d)][static_cast<size_t>(s)] >= 0) continue;
        global[static_cast<size_t>(d)][static_cast<size_t>(s)] = static_cast<int32_t>(order.size());
        order.push_back({d, s});
        const RuleDfa& dfa = dfas_[static_cast<size_t>(d)];
        // Push in reverse so lower classes are numbered first (stable, readable dumps).
        for (size_t c = classes; c-- > 0;) {
          const int32_t t = dfa.next[static_cast<size_t>(s) * classes + c];
          if (t >= 0 && live[static_cast<size_t>(d)][static_cast<size_t>(t)])
            stack.push_back({d, t});
        }
        for (const auto& call : dfa.calls[static_cast<size_t>(s)]) {
          if (!productive[static_cast<size_t>(call.rule)] ||
              !live[static_cast<size_t>(d)][static_cast<size_t>(call.return_state)]) {
            continue;
          }
          stack.push_back({d, call.return_state});
          if (!rule_seen[static_cast<size_t>(call.rule)]) {
            rule_seen[static_cast<size_t>(call.rule)] = 1;
            rule_queue.push_back(call.rule);
          }
        }
      }
    }

    GrammarAutomaton& a = out_;
    a.num_states_ = static_cast<int32_t>(order.size());
    a.next_.assign(order.size() * classes, -1);
    a.accepting_.assign(order.size(), 0);
    a.call_begin_.assign(order.size() + 1, 0);
    a.state_rule_.assign(order.size(), -1);
    a.rule_start_.assign(num_rules, -1);
    a.root_rule_ = g_.root();
    a.num_automaton_rules_ = static_cast<int32_t>(rule_queue.size());
    for (const Rule& r : g_.rules()) a.rule_names_.push_back(r.name);
    for (int32_t r : rule_queue) {
      a.rule_start_[static_cast<size_t>(r)] =
          global[static_cast<size_t>(dfa_of_rule[static_cast<size_t>(r)])][0];
    }
    for (size_t g = 0; g < order.size(); ++g) {
      const auto [d, s] = order[g];
      const RuleDfa& dfa = dfas_[static_cast<size_t>(d)];
      a.accepting_[g] = dfa.accepting[static_cast<size_t>(s)];
      a.state_rule_[g] = dfa.rule;
      for (size_t c = 0; c < classes; ++c) {
        const int32_t t = dfa.next[static_cast<size_t>(s) * classes + c];
        if (t >= 0)
          a.next_[g * classes + c] = global[static_cast<size_t>(d)][static_cast<size_t>(t)];
      }
      a.call_begin_[g] = static_cast<int32_t>(a.calls_.size());
      for (const auto& call : dfa.calls[static_cast<size_t>(s)]) {
        const int32_t ret = global[static_cast<size_t>(d)][static_cast<size_t>(call.return_state)];
        if (!productive[static_cast<size_t>(call.rule)] || ret < 0) continue;
        a.calls_.push_back({call.rule, ret});
      }
    }
    a.call_begin_[order.size()] = static_cast<int32_t>(a.calls_.size());
    std::vector<uint8_t> nullable;
    VLLM_RETURN_IF_ERROR(check_left_recursion(a, rule_queue, &nullable));
    compute_follow(a, nullable);
    return std::move(out_);
  }

  // FIRST(s): bytes that can be consumed next from state s (through calls, and past the end
  // of s's rule into what follows it); FOLLOW(r): the union of FIRST(return state) over the
  // calls of r. Both grow monotonically to a fixpoint.
  static void compute_follow(GrammarAutomaton& a, const std::vector<uint8_t>& nullable) {
    using Set = std::array<uint64_t, 4>;
    auto merge = [](Set& into, const Set& from) {
      bool changed = false;
      for (size_t w = 0; w < 4; ++w) {
        const uint64_t v = into[w] | from[w];
        changed = changed || v != into[w];
        into[w] = v;
      }
      return changed;
    };
    const auto n = static_cast<size_t>(a.num_states());
    std::vector<Set> first(n, Set{0, 0, 0, 0});
    for (size_t s = 0; s < n; ++s) {
      for (int b = 0; b < 256; ++b) {
        if (a.step(static_cast<int32_t>(s), static_cast<uint8_t>(b)) >= 0) {
          first[s][static_cast<size_t>(b) / 64] |= uint64_t{1} << (b % 64);
        }
      }
    }
    a.follow_.assign(a.rule_start_.size(), Set{0, 0, 0, 0});
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t s = 0; s < n; ++s) {
        Set f = first[s];
        for (const auto& call : a.calls(static_cast<int32_t>(s))) {
          merge(f, first[static_cast<size_t>(a.rule_start(call.rule))]);
          if (nullable[static_cast<size_t>(call.rule)])
            merge(f, first[static_cast<size_t>(call.return_state)]);
          changed = merge(a.follow_[static_cast<size_t>(call.rule)],
                          first[static_cast<size_t>(call.return_state)]) ||
                    changed;
        }
        if (a.accepting(static_cast<int32_t>(s))) {
          merge(f, a.follow_[static_cast<size_t>(a.state_rule(static_cast<int32_t>(s)))]);
        }
        changed = merge(first[s], f) || changed;
      }
    }
  }

  // A rule that can reach a call of itself without consuming a byte would make the matcher
  // push frames forever. Also reports which rules are nullable.
  Status check_left_recursion(const GrammarAutomaton& a, const std::vector<int32_t>& rules,
                              std::vector<uint8_t>* nullable_out) {
    const size_t num_rules = g_.rules().size();
    // nullable[r]: r matches the empty string.
    std::vector<uint8_t>& nullable = *nullable_out;
    nullable.assign(num_rules, 0);
    std::vector<uint32_t> seen(static_cast<size_t>(a.num_states()), 0);
    uint32_t epoch = 0;
    auto zero_byte_reach = [&](int32_t start, std::vector<int32_t>* callees) {
      ++epoch;
      std::vector<int32_t> stack = {start};
      bool reaches_accept = false;
      while (!stack.empty()) {
        const int32_t s = stack.back();
        stack.pop_back();
        if (seen[static_cast<size_t>(s)] == epoch) continue;
        seen[static_cast<size_t>(s)] = epoch;
        if (a.accepting(s)) reaches_accept = true;
        for (const auto& call : a.calls(s)) {
          if (callees) callees->push_back(call.rule);
          if (nullable[static_cast<size_t>(call.rule)]) stack.push_back(call.return_state);
        }
      }
      return reaches_accept;
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (int32_t r : rules) {
        if (nullable[static_cast<size_t>(r)]) continue;
        if (zero_byte_reach(a.rule_start(r), nullptr)) {
          nullable[static_cast<size_t>(r)] = 1;
          changed = true;
        }
      }
    }
    std::vector<std::vector<int32_t>> left(num_rules);
    for (int32_t r : rules) zero_byte_reach(a.rule_start(r), &left[static_cast<size_t>(r)]);
    // Iterative depth-first search for a cycle; reported as "a -> b -> a".
    std::vector<uint8_t> color(num_rules, 0);  // 0 new, 1 on the path, 2 done
    struct Frame {
      int32_t rule;
      size_t next;
    };
    for (int32_t root : rules) {
      if (color[static_cast<size_t>(root)] != 0) continue;
      std::vector<Frame> path = {{root, 0}};
      color[static_cast<size_t>(root)] = 1;
      while (!path.empty()) {
        Frame& f = path.back();
        const auto& edges = left[static_cast<size_t>(f.rule)];
        if (f.next == edges.size()) {
          color[static_cast<size_t>(f.rule)] = 2;
          path.pop_back();
          continue;
        }
        const int32_t c = edges[f.next++];
        if (color[static_cast<size_t>(c)] == 1) {
          std::string cycle;
          size_t k = 0;
          while (path[k].rule != c) ++k;
          for (; k < path.size(); ++k) cycle += a.rule_name(path[k].rule) + " -> ";
          cycle += a.rule_name(c);
          return make_error(ErrorCode::kInvalidArgument,
                            "left recursion is not supported: {} can recur without consuming "
                            "any text (rewrite it with repetition, e.g. a ::= b (\"x\" b)*)",
                            cycle);
        }
        if (color[static_cast<size_t>(c)] == 0) {
          color[static_cast<size_t>(c)] = 1;
          path.push_back({c, 0});
        }
      }
    }
    return Status::ok();
  }

  const Grammar& g_;
  const AutomatonLimits& limits_;
  Nfa nfa_;
  std::vector<RuleDfa> dfas_;
  GrammarAutomaton out_;
  std::vector<uint32_t> stamp_;
  uint32_t epoch_ = 0;
  int64_t total_dfa_states_ = 0;
};

size_t GrammarAutomaton::memory_bytes() const {
  return next_.size() * sizeof(int32_t) + accepting_.size() + call_begin_.size() * 4 +
         calls_.size() * sizeof(Call) + state_rule_.size() * 4;
}

Expected<GrammarAutomaton> build_automaton(const Grammar& grammar, const AutomatonLimits& limits) {
  AutomatonBuilder builder(grammar, limits);
  return builder.build();
}

}  // namespace vllm::structured
