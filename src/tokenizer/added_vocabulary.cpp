// Added / special tokens: id assignment and matching before the model (see
// added_vocabulary.h).
#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include "tokenizer/json_util.h"
#include "tokenizer/unicode_util.h"

namespace vllm::tok {
namespace {

// The last character of `text` (valid UTF-8, non-empty).
char32_t last_char(std::string_view text) {
  size_t start = text.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return next_code_point(text, &start);
}

// Start of the run of whitespace that ends `text` (regex `\s*$`).
size_t trailing_space_start(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    size_t pos = start;
    if (!is_whitespace(next_code_point(text, &pos))) break;
    end = start;
  }
  return end;
}

// Length of the run of whitespace that starts `text` (regex `^\s*`).
size_t leading_space_len(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t next = pos;
    if (!is_whitespace(next_code_point(text, &next))) break;
    pos = next;
  }
  return pos;
}

}  // namespace

void AddedVocabulary::Trie::add(std::string_view pattern, int32_t token_index) {
  if (pattern.empty()) return;
  int32_t node = 0;
  for (char c : pattern) {
    uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(c);
    if (const int32_t* child = edges_.find(key)) {
      node = *child;
    } else {
      auto fresh = static_cast<int32_t>(nodes_.size());
      nodes_.push_back(-1);
      edges_.insert_or_assign(key, fresh);
      node = fresh;
    }
  }
  nodes_[node] = token_index;
  first_[static_cast<unsigned char>(pattern[0])] = true;
}

bool AddedVocabulary::Trie::longest_at(std::string_view text, size_t pos, size_t* end,
                                       int32_t* token_index) const {
  int32_t node = 0;
  bool found = false;
  for (size_t i = pos; i < text.size(); ++i) {
    uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[i]);
    const int32_t* child = edges_.find(key);
    if (child == nullptr) break;
    node = *child;
    if (nodes_[node] >= 0) {
      found = true;
      *end = i + 1;
      *token_index = nodes_[node];
    }
  }
  return found;
}

Expected<AddedVocabulary> AddedVocabulary::from_json(const nlohmann::json& list,
                                                     std::string_view where, const BpeModel& model,
                                                     const Normalizer* normalizer) {
  AddedVocabulary v;
  if (list.is_null()) return v;
  if (!list.is_array()) return wrong_type(where, "an array", list);
  auto next_id = static_cast<int64_t>(model.vocab_len());
  for (size_t i = 0; i < list.size(); ++i) {
    std::string item_where = fmt::format("{}[{}]", where, i);
    const json& item = list[i];
    if (!item.is_object()) return wrong_type(item_where, "an object", item);
    AddedToken t;
    VLLM_ASSIGN_OR_RETURN(t.content, read_required_string(item, "content", item_where));
    VLLM_ASSIGN_OR_RETURN(t.special, read_bool(item, "special", item_where, false));
    VLLM_ASSIGN_OR_RETURN(t.single_word, read_bool(item, "single_word", item_where, false));
    VLLM_ASSIGN_OR_RETURN(t.lstrip, read_bool(item, "lstrip", item_where, false));
    VLLM_ASSIGN_OR_RETURN(t.rstrip, read_bool(item, "rstrip", item_where, false));
    VLLM_ASSIGN_OR_RETURN(t.normalized, read_bool(item, "normalized", item_where, !t.special));
    if (t.content.empty()) continue;
    std::optional<int32_t> existing = v.by_content_.find(t.content);
    if (existing) {
      const AddedToken* old = v.token(*existing);
      if (old != nullptr && old->single_word == t.single_word && old->lstrip == t.lstrip &&
          old->rstrip == t.rstrip && old->normalized == t.normalized && old->special == t.special) {
        continue;
      }
    }
    // Ids as `tokenizers` assigns them (the file's "id" is only a hint there too).
    std::optional<int32_t> id = existing ? existing : model.token_to_id(t.content);
    if (!id) {
      if (next_id > (int64_t{1} << 24)) {
        return make_error(ErrorCode::kInvalidFormat, "{}: too many added tokens", where);
      }
      id = static_cast<int32_t>(next_id++);
    }
    t.id = *id;
    std::optional<std::string> normed;
    if (t.normalized && normalizer != nullptr) {
      std::string out;
      VLLM_RETURN_IF_ERROR(normalizer->normalize(t.content, &out));
      if (out != t.content) normed = std::move(out);
    }
    v.by_content_.insert_or_assign(t.content, t.id);
    if (t.special) v.special_.insert(t.content);
    if (const int32_t* index = v.by_id_.find(static_cast<uint64_t>(t.id))) {
      v.tokens_[*index] = std::move(t);
      v.normalized_content_[*index] = std::move(normed);
    } else {
      v.by_id_.insert_or_assign(static_cast<uint64_t>(t.id),
                                static_cast<int32_t>(v.tokens_.size()));
      v.max_id_ = std::max(v.max_id_, t.id);
      v.tokens_.push_back(std::move(t));
      v.normalized_content_.push_back(std::move(normed));
    }
  }
  for (size_t k = 0; k < v.tokens_.size(); ++k) {
    const AddedToken& t = v.tokens_[k];
    if (t.normalized) {
      const std::string& pattern = v.normalized_content_[k] ? *v.normalized_content_[k] : t.content;
      v.normalized_trie_.add(pattern, static_cast<int32_t>(k));
    } else {
      v.raw_trie_.add(t.content, static_cast<int32_t>(k));
    }
  }
  return v;
}

const AddedToken* AddedVocabulary::token(int32_t id) const {
  const int32_t* index = by_id_.find(static_cast<uint64_t>(static_cast<uint32_t>(id)));
  return index == nullptr ? nullptr : &tokens_[*index];
}

std::optional<std::string_view> AddedVocabulary::id_to_token(int32_t id) const {
  const int32_t* index = by_id_.find(static_cast<uint64_t>(static_cast<uint32_t>(id)));
  if (index == nullptr) return std::nullopt;
  if (normalized_content_[*index]) return std::string_view(*normalized_content_[*index]);
  return std::string_view(tokens_[*index].content);
}

void AddedVocabulary::split(Pieces* pieces, bool normalized_pass) const {
  const Trie& trie = normalized_pass ? normalized_trie_ : raw_trie_;
  if (trie.empty()) return;
  for (const Piece& p : pieces->list) {
    if (p.id >= 0) {
      pieces->next.push_back(p);
    } else {
      split_piece(pieces, p, trie);
    }
  }
  pieces->commit();
}

void AddedVocabulary::split_piece(Pieces* pieces, const Piece& piece, const Trie& trie) const {
  std::string_view text = pieces->text(piece);
  const size_t n = text.size();
  size_t start_offset = 0;  // end of the previous accepted token
  size_t pos = 0;
  while (pos < n) {
    if (!trie.may_start(static_cast<unsigned char>(text[pos]))) {
      ++pos;
      continue;
    }
    size_t end = 0;
    int32_t index = -1;
    if (!trie.longest_at(text, pos, &end, &index)) {
      ++pos;
      continue;
    }
    size_t start = pos;
    pos = end;  // the search resumes after this match even if it is not accepted
    const AddedToken& t = tokens_[index];
    size_t stop = end;
    if (t.single_word) {
      bool start_space = start == 0 || !is_word_char(last_char(text.substr(0, start)));
      bool stop_space = stop == n || [&] {
        size_t q = stop;
        return !is_word_char(next_code_point(text, &q));
      }();
      if (!start_space || !stop_space) continue;
    }
    if (t.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), start_offset);
    if (t.rstrip) stop += leading_space_len(text.substr(stop));
    start = std::max(start, start_offset);
    pos = std::max(pos, stop);  // never let a later match overlap swallowed whitespace
    if (start_offset < start) {
      pieces->emit(piece.begin + static_cast<uint32_t>(start_offset),
                   piece.begin + static_cast<uint32_t>(start), piece.at_start && start_offset == 0);
    }
    pieces->next.push_back({piece.begin + static_cast<uint32_t>(start),
                            piece.begin + static_cast<uint32_t>(stop), t.id,
                            piece.at_start && start == 0});
    start_offset = stop;
  }
  if (start_offset < n) {
    pieces->emit(piece.begin + static_cast<uint32_t>(start_offset), piece.end,
                 piece.at_start && start_offset == 0);
  }
}

}  // namespace vllm::tok
