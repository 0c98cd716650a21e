// Post-processors of tokenizer.json, reduced to what they do to one sequence's ids when
// add_special_tokens is set: TemplateProcessing (special tokens around $A), ByteLevel
// (offsets only: no ids), BertProcessing / RobertaProcessing ([CLS] A [SEP]) and Sequence.
#include "tokenizer/components.h"
#include "tokenizer/json_util.h"

namespace vllm::tok {
namespace {

// [token, id] as Bert/Roberta write their cls / sep.
Expected<int32_t> read_token_pair(const json& j, std::string_view key, std::string_view where) {
  const json* v = json_find(j, key);
  std::string field = join_path(where, key);
  if (v == nullptr || !v->is_array() || v->size() != 2 || !(*v)[0].is_string() ||
      !(*v)[1].is_number_integer() || (*v)[1].get<int64_t>() < 0 ||
      (*v)[1].get<int64_t>() > INT32_MAX) {
    return make_error(ErrorCode::kInvalidFormat, "{}: expected [\"token\", id]", field);
  }
  return static_cast<int32_t>((*v)[1].get<int64_t>());
}

// One piece of a template: a sequence ($A / $B) or a special token name.
struct TemplatePiece {
  bool is_sequence = false;
  std::string name;  // "A" / "B" or the special token's id
};

Expected<TemplatePiece> parse_piece(const json& p, std::string_view where) {
  TemplatePiece piece;
  if (p.is_string()) {  // the string form: "$A", "$B:1", "[CLS]", "[SEP]:1"
    std::string s = p.get<std::string>();
    size_t colon = s.rfind(':');
    if (colon != std::string::npos && colon > 0) s = s.substr(0, colon);
    if (!s.empty() && s[0] == '$') {
      piece.is_sequence = true;
      piece.name = s.size() == 1 ? "A" : s.substr(1);
    } else {
      piece.name = s;
    }
    return piece;
  }
  if (p.is_object() && p.size() == 1) {
    const std::string& kind = p.begin().key();
    const json& body = p.begin().value();
    if ((kind == "Sequence" || kind == "SpecialToken") && body.is_object()) {
      VLLM_ASSIGN_OR_RETURN(piece.name, read_required_string(body, "id", where));
      piece.is_sequence = kind == "Sequence";
      return piece;
    }
  }
  return make_error(ErrorCode::kInvalidFormat,
                    "{}: expected {{\"Sequence\": ...}} or {{\"SpecialToken\": ...}}", where);
}

Expected<PostProcessor> make_template(const json& j, std::string_view where) {
  PostProcessor out;
  const json* single = json_find(j, "single");
  std::string single_where = join_path(where, "single");
  if (single == nullptr)
    return make_error(ErrorCode::kInvalidFormat, "{}: missing field", single_where);
  json pieces = *single;
  if (pieces.is_string()) {  // "[CLS] $A [SEP]"
    json list = json::array();
    std::string s = pieces.get<std::string>();
    size_t pos = 0;
    while (pos < s.size()) {
      size_t end = s.find(' ', pos);
      if (end == std::string::npos) end = s.size();
      if (end > pos) list.push_back(s.substr(pos, end - pos));
      pos = end + 1;
    }
    pieces = std::move(list);
  }
  if (!pieces.is_array()) return wrong_type(single_where, "an array", pieces);
  const json* specials = json_find(j, "special_tokens");
  bool seen_sequence = false;
  for (size_t i = 0; i < pieces.size(); ++i) {
    std::string piece_where = fmt::format("{}[{}]", single_where, i);
    VLLM_ASSIGN_OR_RETURN(TemplatePiece piece, parse_piece(pieces[i], piece_where));
    if (piece.is_sequence) {
      if (piece.name != "A" || seen_sequence) {
        return make_error(ErrorCode::kUnsupported,
                          "{}: a single-sequence template may only hold $A once", piece_where);
      }
      seen_sequence = true;
      continue;
    }
    const json* special = specials == nullptr ? nullptr : json_find(*specials, piece.name);
    const json* ids = special == nullptr ? nullptr : json_find(*special, "ids");
    if (ids == nullptr || !ids->is_array()) {
      return make_error(ErrorCode::kInvalidFormat,
                        "{}: special token \"{}\" is missing from special_tokens (or has no ids)",
                        piece_where, piece.name);
    }
    std::vector<int32_t>& target = seen_sequence ? out.suffix : out.prefix;
    for (const json& id : *ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return make_error(ErrorCode::kInvalidFormat, "{}: special token \"{}\": bad id {}",
                          piece_where, piece.name, id.dump().substr(0, 32));
      }
      target.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
  }
  if (!seen_sequence) {
    return make_error(ErrorCode::kInvalidFormat, "{}: the template has no $A", single_where);
  }
  return out;
}

}  // namespace

Expected<PostProcessor> make_post_processor(const nlohmann::json& j, std::string_view where) {
  if (!j.is_object()) return wrong_type(where, "an object", j);
  VLLM_ASSIGN_OR_RETURN(std::string type, read_required_string(j, "type", where));
  if (type == "ByteLevel") return PostProcessor{};
  if (type == "TemplateProcessing") return make_template(j, where);
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    VLLM_ASSIGN_OR_RETURN(int32_t cls, read_token_pair(j, "cls", where));
    VLLM_ASSIGN_OR_RETURN(int32_t sep, read_token_pair(j, "sep", where));
    return PostProcessor{{cls}, {sep}};
  }
  if (type == "Sequence") {
    PostProcessor out;
    VLLM_RETURN_IF_ERROR(for_each_element(j, "processors", where, [&](const json& e, std::string w) {
      VLLM_ASSIGN_OR_RETURN(PostProcessor p, make_post_processor(e, w));
      // Each processor wraps the previous result.
      p.prefix.insert(p.prefix.end(), out.prefix.begin(), out.prefix.end());
      out.prefix = std::move(p.prefix);
      out.suffix.insert(out.suffix.end(), p.suffix.begin(), p.suffix.end());
      return Status::ok();
    }));
    return out;
  }
  return make_error(ErrorCode::kUnsupported, "{}: post-processor type '{}' is not supported", where,
                    type);
}

}  // namespace vllm::tok
