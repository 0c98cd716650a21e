// Splitting a piece along delimiter matches with `tokenizers`' SplitDelimiterBehavior
// (NormalizedString::split): Removed, Isolated, MergedWithPrevious, MergedWithNext,
// Contiguous. Shared by the Split, Digits, Metaspace and punctuation pre-tokenizers.
#include <algorithm>

#include "tokenizer/components.h"
#include "tokenizer/json_util.h"

namespace vllm::tok {

Expected<SplitBehavior> parse_split_behavior(const nlohmann::json& object, std::string_view where,
                                             SplitBehavior fallback) {
  const json* value = json_find(object, "behavior");
  if (value == nullptr) return fallback;
  if (!value->is_string()) return wrong_type(join_path(where, "behavior"), "a string", *value);
  const std::string& name = value->get_ref<const std::string&>();
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return make_error(ErrorCode::kInvalidFormat, "{}: unknown split behavior '{}'",
                    join_path(where, "behavior"), name);
}

void split_piece(Pieces* pieces, const Piece& piece, std::vector<Segment>& segs,
                 SplitBehavior behavior) {
  // Fold the segments as NormalizedString::split does; `is_match` becomes "remove".
  std::vector<Segment> out;
  out.reserve(segs.size());
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (Segment s : segs) out.push_back({s.begin, s.end, false});
      break;
    case SplitBehavior::kRemoved:
      out = segs;
      break;
    case SplitBehavior::kContiguous: {
      bool previous = false;
      for (Segment s : segs) {
        if (s.is_match == previous && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back({s.begin, s.end, false});
        }
        previous = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous = false;
      for (Segment s : segs) {
        if (s.is_match && !previous && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back({s.begin, s.end, false});
        }
        previous = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous = false;
      for (size_t k = segs.size(); k-- > 0;) {
        Segment s = segs[k];
        if (s.is_match && !previous && !out.empty()) {
          out.back().begin = s.begin;
        } else {
          out.push_back({s.begin, s.end, false});
        }
        previous = s.is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  for (const Segment& s : out) {
    if (s.is_match) continue;  // removed
    pieces->emit(piece.begin + s.begin, piece.begin + s.end, piece.at_start && s.begin == 0);
  }
}

}  // namespace vllm::tok
