// Grammar -> Thompson NFA with non-recursive rules inlined (automaton.h, steps 1-2).
#include "structured/nfa.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace vllm::structured {
namespace {

constexpr int64_t kHuge = int64_t{1} << 50;
constexpr int kMaxInlineDepth = 256;  // deeper chains of rule references become calls

int64_t sat_add(int64_t a, int64_t b) {
  return std::min(kHuge, a + b);
}
int64_t sat_mul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  return a > kHuge / b ? kHuge : a * b;
}

void encode(uint32_t cp, uint8_t* bytes, int len) {
  std::string s;
  append_utf8(&s, cp);
  for (int i = 0; i < len; ++i) bytes[i] = static_cast<uint8_t>(s[static_cast<size_t>(i)]);
}

int utf8_len(uint32_t cp) {
  return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

// The rules referenced directly by each rule's body.
std::vector<std::vector<int32_t>> rule_references(const Grammar& g) {
  std::vector<std::vector<int32_t>> refs(g.rules().size());
  std::vector<int32_t> seen(g.num_exprs(), -1);
  for (size_t r = 0; r < g.rules().size(); ++r) {
    if (g.rules()[r].body < 0) continue;
    std::vector<int32_t> stack = {g.rules()[r].body};
    while (!stack.empty()) {
      const int32_t e = stack.back();
      stack.pop_back();
      if (seen[static_cast<size_t>(e)] == static_cast<int32_t>(r)) continue;
      seen[static_cast<size_t>(e)] = static_cast<int32_t>(r);
      const Expr& x = g.expr(e);
      if (x.kind == ExprKind::kRuleRef) refs[r].push_back(x.rule);
      for (int32_t c : x.children) stack.push_back(c);
    }
  }
  return refs;
}

// Rules on a cycle of references (including a rule referencing itself): Tarjan's strongly
// connected components, iteratively.
std::vector<char> recursive_rules(const std::vector<std::vector<int32_t>>& refs) {
  const size_t n = refs.size();
  std::vector<int32_t> index(n, -1), low(n, 0);
  std::vector<char> on_stack(n, 0), recursive(n, 0);
  std::vector<int32_t> scc_stack;
  int32_t counter = 0;
  struct Frame {
    int32_t rule;
    size_t next_edge;
  };
  for (size_t root = 0; root < n; ++root) {
    if (index[root] >= 0) continue;
    std::vector<Frame> frames = {{static_cast<int32_t>(root), 0}};
    index[root] = low[root] = counter++;
    scc_stack.push_back(static_cast<int32_t>(root));
    on_stack[root] = 1;
    while (!frames.empty()) {
      Frame& f = frames.back();
      const auto v = static_cast<size_t>(f.rule);
      if (f.next_edge < refs[v].size()) {
        const auto w = static_cast<size_t>(refs[v][f.next_edge++]);
        if (w == v) recursive[v] = 1;
        if (index[w] < 0) {
          index[w] = low[w] = counter++;
          scc_stack.push_back(static_cast<int32_t>(w));
          on_stack[w] = 1;
          frames.push_back({static_cast<int32_t>(w), 0});
        } else if (on_stack[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      if (low[v] == index[v]) {
        std::vector<int32_t> component;
        while (true) {
          const int32_t w = scc_stack.back();
          scc_stack.pop_back();
          on_stack[static_cast<size_t>(w)] = 0;
          component.push_back(w);
          if (static_cast<size_t>(w) == v) break;
        }
        if (component.size() > 1) {
          for (int32_t w : component) recursive[static_cast<size_t>(w)] = 1;
        }
      }
      frames.pop_back();
      if (!frames.empty()) {
        const auto parent = static_cast<size_t>(frames.back().rule);
        low[parent] = std::min(low[parent], low[v]);
      }
    }
  }
  return recursive;
}

class NfaBuilder {
 public:
  NfaBuilder(const Grammar& g, const AutomatonLimits& limits) : g_(g), limits_(limits) {}

  Expected<Nfa> build() {
    const size_t num_rules = g_.rules().size();
    recursive_ = recursive_rules(rule_references(g_));
    rule_size_.assign(num_rules, -1);
    expr_size_.assign(g_.num_exprs(), -1);
    nfa_.rule_start.assign(num_rules, -1);
    nfa_.rule_accept.assign(num_rules, -1);
    scheduled_.assign(num_rules, 0);
    schedule(g_.root());
    for (size_t i = 0; i < queue_.size(); ++i) {
      const int32_t r = queue_[i];
      VLLM_ASSIGN_OR_RETURN(auto fragment, build_expr(g_.rule(r).body, 0));
      nfa_.rule_start[static_cast<size_t>(r)] = fragment.first;
      nfa_.rule_accept[static_cast<size_t>(r)] = fragment.second;
    }
    return std::move(nfa_);
  }

 private:
  using Fragment = std::pair<int32_t, int32_t>;  // start, accept

  void schedule(int32_t rule) {
    if (scheduled_[static_cast<size_t>(rule)]) return;
    scheduled_[static_cast<size_t>(rule)] = 1;
    queue_.push_back(rule);
  }

  bool inlinable(int32_t rule) {
    return !recursive_[static_cast<size_t>(rule)] && rule != g_.root() &&
           size_of_rule(rule) <= limits_.inline_limit;
  }

  int64_t size_of_rule(int32_t rule) {
    int64_t& memo = rule_size_[static_cast<size_t>(rule)];
    if (memo >= 0) return memo;
    memo = kHuge;  // guards against cycles (recursive rules are never inlined anyway)
    memo = size_of(g_.rule(rule).body, 0);
    return memo;
  }

  // Estimated NFA states of one inlined use of expression `e`.
  int64_t size_of(int32_t e, int depth) {
    if (depth > kMaxInlineDepth) return kHuge;
    int64_t& memo = expr_size_[static_cast<size_t>(e)];
    if (memo >= 0) return memo;
    const Expr& x = g_.expr(e);
    int64_t size = 1;
    switch (x.kind) {
      case ExprKind::kEmpty:
        break;
      case ExprKind::kLiteral:
        size = static_cast<int64_t>(x.text.size()) + 1;
        break;
      case ExprKind::kCharClass: {
        std::vector<ByteRangeSeq> seqs;
        for (const CharRange& r : x.ranges) utf8_sequences(r, &seqs);
        for (const ByteRangeSeq& s : seqs) size += s.len;
        break;
      }
      case ExprKind::kRuleRef:
        size = recursive_[static_cast<size_t>(x.rule)] || x.rule == g_.root()
                   ? 2
                   : sat_add(2, size_of(g_.rule(x.rule).body, depth + 1));
        break;
      case ExprKind::kSequence:
      case ExprKind::kChoice:
        size = 2;
        for (int32_t c : x.children) size = sat_add(size, size_of(c, depth + 1));
        break;
      case ExprKind::kRepeat: {
        const int64_t copies = x.max < 0 ? std::max(x.min, 1) : std::max(x.max, 1);
        size = sat_add(2, sat_mul(copies, sat_add(2, size_of(x.children[0], depth + 1))));
        break;
      }
    }
    memo = size;
    return size;
  }

  Expected<int32_t> new_state() {
    if (static_cast<int64_t>(nfa_.states.size()) >= limits_.max_nfa_states) {
      return make_error(ErrorCode::kInvalidArgument,
                        "the grammar is too large: its automaton needs more than {} states",
                        limits_.max_nfa_states);
    }
    nfa_.states.emplace_back();
    return static_cast<int32_t>(nfa_.states.size() - 1);
  }

  void eps(int32_t from, int32_t to) { nfa_.states[static_cast<size_t>(from)].eps.push_back(to); }

  Expected<Fragment> build_expr(int32_t e, int depth) {
    const Expr& x = g_.expr(e);
    VLLM_ASSIGN_OR_RETURN(int32_t start, new_state());
    switch (x.kind) {
      case ExprKind::kEmpty:
        return Fragment(start, start);
      case ExprKind::kLiteral: {
        int32_t at = start;
        for (unsigned char c : x.text) {
          VLLM_ASSIGN_OR_RETURN(int32_t next, new_state());
          nfa_.states[static_cast<size_t>(at)].bytes.push_back({c, c, next});
          at = next;
        }
        return Fragment(start, at);
      }
      case ExprKind::kCharClass: {
        VLLM_ASSIGN_OR_RETURN(int32_t end, new_state());
        std::vector<ByteRangeSeq> seqs;
        for (const CharRange& r : x.ranges) utf8_sequences(r, &seqs);
        for (const ByteRangeSeq& s : seqs) {
          int32_t at = start;
          for (int i = 0; i < s.len; ++i) {
            int32_t next = end;
            if (i + 1 < s.len) {
              VLLM_ASSIGN_OR_RETURN(next, new_state());
            }
            nfa_.states[static_cast<size_t>(at)].bytes.push_back({s.lo[i], s.hi[i], next});
            at = next;
          }
        }
        return Fragment(start, end);  // no sequences: `end` is unreachable, matching nothing
      }
      case ExprKind::kRuleRef: {
        if (depth < kMaxInlineDepth && inlinable(x.rule)) {
          VLLM_ASSIGN_OR_RETURN(Fragment inner, build_expr(g_.rule(x.rule).body, depth + 1));
          eps(start, inner.first);
          return Fragment(start, inner.second);
        }
        schedule(x.rule);
        VLLM_ASSIGN_OR_RETURN(int32_t end, new_state());
        nfa_.states[static_cast<size_t>(start)].calls.push_back({x.rule, end});
        return Fragment(start, end);
      }
      case ExprKind::kSequence: {
        int32_t at = start;
        for (int32_t c : x.children) {
          VLLM_ASSIGN_OR_RETURN(Fragment part, build_expr(c, depth + 1));
          eps(at, part.first);
          at = part.second;
        }
        return Fragment(start, at);
      }
      case ExprKind::kChoice: {
        VLLM_ASSIGN_OR_RETURN(int32_t end, new_state());
        for (int32_t c : x.children) {
          VLLM_ASSIGN_OR_RETURN(Fragment part, build_expr(c, depth + 1));
          eps(start, part.first);
          eps(part.second, end);
        }
        return Fragment(start, end);
      }
      case ExprKind::kRepeat: {
        const int32_t child = x.children[0];
        int32_t at = start;
        for (int32_t i = 0; i < x.min; ++i) {
          VLLM_ASSIGN_OR_RETURN(Fragment part, build_expr(child, depth + 1));
          eps(at, part.first);
          at = part.second;
        }
        if (x.max < 0) {
          // at -> loop; loop -> child -> loop; loop is the end.
          VLLM_ASSIGN_OR_RETURN(int32_t loop, new_state());
          eps(at, loop);
          VLLM_ASSIGN_OR_RETURN(Fragment part, build_expr(child, depth + 1));
          eps(loop, part.first);
          eps(part.second, loop);
          return Fragment(start, loop);
        }
        // Optional copies, each skippable to the end: x (x (x)?)?
        VLLM_ASSIGN_OR_RETURN(int32_t end, new_state());
        eps(at, end);
        for (int32_t i = x.min; i < x.max; ++i) {
          VLLM_ASSIGN_OR_RETURN(Fragment part, build_expr(child, depth + 1));
          eps(at, part.first);
          at = part.second;
          eps(at, end);
        }
        return Fragment(start, end);
      }
    }
    return Fragment(start, start);
  }

  const Grammar& g_;
  const AutomatonLimits& limits_;
  Nfa nfa_;
  std::vector<char> recursive_;
  std::vector<int64_t> rule_size_;
  std::vector<int64_t> expr_size_;
  std::vector<char> scheduled_;
  std::vector<int32_t> queue_;
};

}  // namespace

void utf8_sequences(CharRange range, std::vector<ByteRangeSeq>* out) {
  std::vector<CharRange> work = {range};
  while (!work.empty()) {
    CharRange r = work.back();
    work.pop_back();
    if (r.lo > r.hi) continue;
    // Split where the encoded length changes.
    static constexpr uint32_t kLengthEnd[] = {0x7F, 0x7FF, 0xFFFF};
    bool split = false;
    for (uint32_t end : kLengthEnd) {
      if (r.lo <= end && r.hi > end) {
        work.push_back({end + 1, r.hi});
        work.push_back({r.lo, end});
        split = true;
        break;
      }
    }
    if (split) continue;
    const int len = utf8_len(r.lo);
    // Split until every continuation byte spans its full range below the first difference.
    for (int i = 1; i < len && !split; ++i) {
      const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
      if ((r.lo & ~m) == (r.hi & ~m)) continue;
      if ((r.lo & m) != 0) {
        work.push_back({(r.lo | m) + 1, r.hi});
        work.push_back({r.lo, r.lo | m});
        split = true;
      } else if ((r.hi & m) != m) {
        work.push_back({r.hi & ~m, r.hi});
        work.push_back({r.lo, (r.hi & ~m) - 1});
        split = true;
      }
    }
    if (split) continue;
    ByteRangeSeq s;
    s.len = static_cast<uint8_t>(len);
    encode(r.lo, s.lo, len);
    encode(r.hi, s.hi, len);
    out->push_back(s);
  }
}

Expected<Nfa> build_nfa(const Grammar& grammar, const AutomatonLimits& limits) {
  if (grammar.root() < 0 || grammar.rule(grammar.root()).body < 0) {
    return make_error(ErrorCode::kInvalidArgument, "the grammar has no root rule");
  }
  for (const Rule& r : grammar.rules()) {
    if (r.body < 0) {
      return make_error(ErrorCode::kInvalidArgument, "rule '{}' is not defined", r.name);
    }
  }
  NfaBuilder builder(grammar, limits);
  return builder.build();
}

}  // namespace vllm::structured
