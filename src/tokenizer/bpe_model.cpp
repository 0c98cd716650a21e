// BPE model: loading vocab + merges, and merging one word (see bpe_model.h).
#include "tokenizer/bpe_model.h"

#include <algorithm>

#include "tokenizer/json_util.h"
#include "tokenizer/unicode_util.h"

namespace vllm::tok {
namespace {

// Ids are int32 in our API (u32 in `tokenizers`).
constexpr int64_t kMaxTokenId = INT32_MAX - 1;

struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  uint32_t len;  // bytes of the word; 0 once merged into its left neighbour
};

struct Candidate {
  uint32_t rank;
  uint32_t pos;
  int32_t new_id;
  int32_t left, right;  // the pair when the candidate was made
};
// std heap functions build a max-heap: "less" means lower priority, i.e. higher rank, then
// higher position.
struct CandidateLess {
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.rank != b.rank) return a.rank > b.rank;
    return a.pos > b.pos;
  }
};

struct MergeScratch {
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
  std::string piece;
};
MergeScratch& merge_scratch() {
  thread_local MergeScratch scratch;
  return scratch;
}

}  // namespace

bool WordCache::lookup(std::string_view word, std::vector<int32_t>* ids) const {
  std::optional<int32_t> at = index_.find(word);
  if (!at) return false;
  const int32_t* p = ids_.data() + *at;
  ids->insert(ids->end(), p + 1, p + 1 + p[0]);
  return true;
}

void WordCache::insert(std::string_view word, const int32_t* ids, size_t count) {
  if (word.size() >= kMaxWordBytes) return;
  if (index_.size() >= kMaxWords) {
    index_.clear();
    ids_.clear();
  }
  index_.insert_or_assign(word, static_cast<int32_t>(ids_.size()));
  ids_.push_back(static_cast<int32_t>(count));
  ids_.insert(ids_.end(), ids, ids + count);
}

Expected<BpeModel> BpeModel::from_json(const nlohmann::json& model, std::string_view where,
                                       std::vector<std::pair<std::string, int64_t>>* vocab,
                                       std::vector<MergeEntry>* merges) {
  if (!model.is_object()) return wrong_type(where, "an object", model);
  VLLM_ASSIGN_OR_RETURN(std::optional<std::string> type,
                        read_optional_string(model, "type", where));
  if (type && *type != "BPE") {
    return make_error(ErrorCode::kUnsupported, "{}: model type '{}' is not supported (only BPE is)",
                      where, *type);
  }
  const json* dropout = json_find(model, "dropout");
  if (dropout != nullptr && !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return make_error(ErrorCode::kUnsupported, "{}: BPE dropout is not supported",
                      join_path(where, "dropout"));
  }
  BpeModel m;
  VLLM_ASSIGN_OR_RETURN(m.unk_token_, read_optional_string(model, "unk_token", where));
  VLLM_ASSIGN_OR_RETURN(m.continuing_subword_prefix_,
                        read_optional_string(model, "continuing_subword_prefix", where));
  VLLM_ASSIGN_OR_RETURN(m.end_of_word_suffix_,
                        read_optional_string(model, "end_of_word_suffix", where));
  VLLM_ASSIGN_OR_RETURN(m.fuse_unk_, read_bool(model, "fuse_unk", where, false));
  VLLM_ASSIGN_OR_RETURN(m.byte_fallback_, read_bool(model, "byte_fallback", where, false));
  VLLM_ASSIGN_OR_RETURN(m.ignore_merges_, read_bool(model, "ignore_merges", where, false));

  std::string vocab_where = join_path(where, "vocab");
  std::vector<std::pair<std::string, int64_t>> dom_vocab;
  if (vocab == nullptr) {
    const json* v = json_find(model, "vocab");
    if (v == nullptr || !v->is_object()) {
      return wrong_type(vocab_where, "an object of token -> id", v ? *v : json());
    }
    for (auto it = v->begin(); it != v->end(); ++it) {
      int64_t id = it.value().is_number_integer() ? it.value().get<int64_t>() : -1;
      if (it.value().is_number_unsigned() && it.value().get<uint64_t>() > kMaxTokenId) id = -1;
      dom_vocab.emplace_back(it.key(), id);
    }
    vocab = &dom_vocab;
  }
  m.vocab_.reserve(vocab->size());
  int64_t max_id = -1;
  for (const auto& [token, id] : *vocab) {
    if (id < 0 || id > kMaxTokenId) {
      return make_error(ErrorCode::kInvalidFormat, "{}[\"{}\"]: expected a token id in [0, {}]",
                        vocab_where, token.substr(0, 64), kMaxTokenId);
    }
    m.vocab_.insert_or_assign(token, static_cast<int32_t>(id));
    max_id = std::max(max_id, id);
  }
  m.max_id_ = static_cast<int32_t>(max_id);
  const bool dense = max_id < static_cast<int64_t>(2 * m.vocab_.size() + 1024);
  if (dense) {
    m.id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
    m.has_token_.assign(static_cast<size_t>(max_id + 1), false);
  }
  m.vocab_.for_each([&](std::string_view token, int32_t id) {
    if (dense) {
      m.id_to_token_[id] = std::string(token);
      m.has_token_[id] = true;
    } else {
      m.sparse_id_to_token_[id] = std::string(token);
    }
  });
  for (int b = 0; b < 256; ++b) {
    std::string name = fmt::format("<0x{:02X}>", b);
    m.byte_ids_[b] = m.vocab_.find(name).value_or(-1);
  }
  if (m.unk_token_) m.unk_id_ = m.vocab_.find(*m.unk_token_);

  std::string merges_where = join_path(where, "merges");
  std::vector<MergeEntry> dom_merges;
  if (merges == nullptr) {
    const json* list = json_find(model, "merges");
    if (list != nullptr && !list->is_array()) return wrong_type(merges_where, "an array", *list);
    if (list != nullptr) {
      for (size_t i = 0; i < list->size(); ++i) {
        const json& entry = (*list)[i];
        if (entry.is_string()) {
          dom_merges.push_back({entry.get<std::string>(), std::string(), true});
        } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() &&
                   entry[1].is_string()) {
          dom_merges.push_back({entry[0].get<std::string>(), entry[1].get<std::string>(), false});
        } else {
          return make_error(ErrorCode::kInvalidFormat,
                            "{}[{}]: expected \"a b\" or [\"a\", \"b\"], got {}", merges_where, i,
                            json_type_name(entry));
        }
      }
    }
    merges = &dom_merges;
  }
  m.merges_.reserve(merges->size());
  size_t prefix_len = m.continuing_subword_prefix_ ? m.continuing_subword_prefix_->size() : 0;
  std::string merged;
  uint32_t rank = 0;
  for (size_t i = 0; i < merges->size(); ++i) {
    const MergeEntry& entry = (*merges)[i];
    std::string_view a = entry.first, b = entry.second;
    if (entry.line) {
      const std::string& line = entry.first;
      if (line.rfind("#version", 0) == 0) continue;
      size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        return make_error(
            ErrorCode::kInvalidFormat,
            "{}[{}]: expected \"a b\" (two tokens separated by one space), got \"{}\"",
            merges_where, i, line.substr(0, 64));
      }
      a = std::string_view(line).substr(0, space);
      b = std::string_view(line).substr(space + 1);
    }
    std::optional<int32_t> a_id = m.vocab_.find(a);
    std::optional<int32_t> b_id = m.vocab_.find(b);
    if (!a_id || !b_id) {
      return make_error(ErrorCode::kInvalidFormat, "{}[{}]: token \"{}\" is not in the vocabulary",
                        merges_where, i, std::string(a_id ? b : a).substr(0, 64));
    }
    if (b.size() < prefix_len) {
      return make_error(ErrorCode::kInvalidFormat,
                        "{}[{}]: token \"{}\" is shorter than continuing_subword_prefix",
                        merges_where, i, std::string(b).substr(0, 64));
    }
    merged.assign(a);
    merged.append(b.substr(prefix_len));
    std::optional<int32_t> new_id = m.vocab_.find(merged);
    if (!new_id) {
      return make_error(ErrorCode::kInvalidFormat,
                        "{}[{}]: merged token \"{}\" is not in the vocabulary", merges_where, i,
                        merged.substr(0, 64));
    }
    m.merges_.insert_or_assign(pair_key(*a_id, *b_id), MergeValue{rank, *new_id});
    ++rank;
  }
  return m;
}

std::optional<std::string_view> BpeModel::id_to_token(int32_t id) const {
  if (!sparse_id_to_token_.empty()) {
    auto it = sparse_id_to_token_.find(id);
    if (it == sparse_id_to_token_.end()) return std::nullopt;
    return std::string_view(it->second);
  }
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_token_[id]) {
    return std::nullopt;
  }
  return std::string_view(id_to_token_[id]);
}

Status BpeModel::tokenize(std::string_view word, std::vector<int32_t>* ids,
                          WordCache* cache) const {
  if (word.empty()) return Status::ok();
  if (ignore_merges_) {
    if (std::optional<int32_t> id = vocab_.find(word)) {
      ids->push_back(*id);
      return Status::ok();
    }
  }
  if (cache != nullptr && cache->lookup(word, ids)) return Status::ok();
  size_t first = ids->size();
  VLLM_RETURN_IF_ERROR(merge_word(word, ids));
  if (cache != nullptr) cache->insert(word, ids->data() + first, ids->size() - first);
  return Status::ok();
}

Status BpeModel::merge_word(std::string_view word, std::vector<int32_t>* ids) const {
  MergeScratch& s = merge_scratch();
  std::vector<Symbol>& sym = s.symbols;
  sym.clear();
  auto add = [&sym](int32_t id, uint32_t len) {
    auto n = static_cast<int32_t>(sym.size());
    if (n > 0) sym.back().next = n;
    sym.push_back({id, n - 1, -1, len});
  };
  // A pending unknown character (unk id, byte length), fused with the next one if fuse_unk.
  bool have_unk = false;
  int32_t unk_id = -1;
  uint32_t unk_len = 0;

  size_t pos = 0;
  while (pos < word.size()) {
    size_t start = pos;
    pos += utf8_len(static_cast<unsigned char>(word[pos]));
    if (pos > word.size()) pos = word.size();
    auto byte_len = static_cast<uint32_t>(pos - start);
    std::string_view piece = word.substr(start, byte_len);
    bool with_prefix =
        start != 0 && continuing_subword_prefix_ && !continuing_subword_prefix_->empty();
    bool with_suffix = pos == word.size() && end_of_word_suffix_ && !end_of_word_suffix_->empty();
    if (with_prefix || with_suffix) {
      s.piece.clear();
      if (with_prefix) s.piece += *continuing_subword_prefix_;
      s.piece += piece;
      if (with_suffix) s.piece += *end_of_word_suffix_;
      piece = s.piece;
    }
    if (std::optional<int32_t> id = vocab_.find(piece)) {
      if (have_unk) {
        add(unk_id, unk_len);
        have_unk = false;
      }
      add(*id, byte_len);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : piece) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        // As `tokenizers`: a pending unk is not flushed before the byte tokens.
        for (char c : piece) add(byte_ids_[static_cast<unsigned char>(c)], 1);
        continue;
      }
    }
    if (unk_token_) {
      if (!unk_id_) {
        return make_error(ErrorCode::kInvalidArgument,
                          "tokenizer.json: unk_token \"{}\" is not in the vocabulary", *unk_token_);
      }
      if (have_unk && fuse_unk_) {
        unk_len += byte_len;
      } else {
        if (have_unk) add(unk_id, unk_len);
        have_unk = true;
        unk_id = *unk_id_;
        unk_len = byte_len;
      }
    }
    // No unk token: the character is dropped, as `tokenizers` does.
  }
  if (have_unk) add(unk_id, unk_len);

  // Merge, lowest rank first; among equal ranks the leftmost.
  std::vector<Candidate>& heap = s.heap;
  heap.clear();
  CandidateLess less;
  for (size_t i = 0; i + 1 < sym.size(); ++i) {
    if (const MergeValue* m = merges_.find(pair_key(sym[i].id, sym[i + 1].id))) {
      heap.push_back({m->rank, static_cast<uint32_t>(i), m->new_id, sym[i].id, sym[i + 1].id});
    }
  }
  std::make_heap(heap.begin(), heap.end(), less);
  const auto n = static_cast<int32_t>(sym.size());
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), less);
    Candidate top = heap.back();
    heap.pop_back();
    Symbol& cur = sym[top.pos];
    if (cur.len == 0 || cur.next == -1) continue;
    int32_t next_pos = cur.next;
    Symbol right = sym[next_pos];
    // A stale entry is skipped unless the pair now there merges into the same token (then
    // `tokenizers` merges it, at the stale entry's turn). The usual case needs no lookup.
    if (cur.id != top.left || right.id != top.right) {
      const MergeValue* m = merges_.find(pair_key(cur.id, right.id));
      if (m == nullptr || m->new_id != top.new_id) continue;
    }
    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    sym[next_pos].len = 0;
    if (right.next >= 0 && right.next < n) sym[right.next].prev = static_cast<int32_t>(top.pos);
    if (cur.prev >= 0) {
      if (const MergeValue* pm = merges_.find(pair_key(sym[cur.prev].id, cur.id))) {
        heap.push_back(
            {pm->rank, static_cast<uint32_t>(cur.prev), pm->new_id, sym[cur.prev].id, cur.id});
        std::push_heap(heap.begin(), heap.end(), less);
      }
    }
    if (cur.next >= 0 && cur.next < n) {
      if (const MergeValue* nm = merges_.find(pair_key(cur.id, sym[cur.next].id))) {
        heap.push_back({nm->rank, top.pos, nm->new_id, cur.id, sym[cur.next].id});
        std::push_heap(heap.begin(), heap.end(), less);
      }
    }
  }
  for (const Symbol& x : sym) {
    if (x.len != 0) ids->push_back(x.id);
  }
  return Status::ok();
}

}  // namespace vllm::tok
