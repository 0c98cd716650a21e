// Streaming tokenizer.json reader (see json_loader.h). The DOM part follows nlohmann's own
// SAX DOM builder; model.vocab and model.merges are captured into vectors.
#include "tokenizer/json_loader.h"

namespace vllm::tok {
namespace {

using nlohmann::json;

class Handler {
 public:
  explicit Handler(TokenizerJson* out) : out_(out) {}

  std::string error;  // a capture error (the JSON itself was fine so far)

  bool null() { return value(json()); }
  bool boolean(bool v) { return value(json(v)); }
  bool number_integer(json::number_integer_t v) {
    if (mode_ == Mode::kVocab) return vocab_id(v);
    return value(json(v));
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (mode_ == Mode::kVocab) {
      return vocab_id(v > static_cast<uint64_t>(INT64_MAX) ? -1 : static_cast<int64_t>(v));
    }
    return value(json(v));
  }
  bool number_float(json::number_float_t v, const json::string_t&) { return value(json(v)); }
  bool string(json::string_t& v) {
    if (mode_ == Mode::kMerges) return merge_string(v);
    return value(json(std::move(v)));
  }
  bool binary(json::binary_t&) { return capture_error("binary value"); }

  bool start_object(std::size_t) {
    if (pending_ == Mode::kVocab && mode_ == Mode::kDom) {
      pending_ = Mode::kDom;
      mode_ = Mode::kVocab;
      out_->vocab.emplace();
      return true;
    }
    pending_ = Mode::kDom;
    if (mode_ != Mode::kDom) return capture_error("an object");
    json* p = value(json(json::value_t::object)) ? last_ : nullptr;
    if (p == nullptr) return false;
    stack_.push_back(p);
    return true;
  }
  bool key(json::string_t& k) {
    if (mode_ == Mode::kVocab) {
      vocab_key_ = std::move(k);
      return true;
    }
    if (mode_ != Mode::kDom) return capture_error("an object");
    if (stack_.size() == 1) top_key_ = k;
    if (stack_.size() == 2 && top_key_ == "model") {
      if (k == "vocab") pending_ = Mode::kVocab;
      if (k == "merges") pending_ = Mode::kMerges;
    }
    object_element_ = &(*stack_.back())[k];
    return true;
  }
  bool end_object() {
    if (mode_ == Mode::kVocab) {
      mode_ = Mode::kDom;
      return true;
    }
    if (mode_ != Mode::kDom) return capture_error("an object");
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) {
    if (pending_ == Mode::kMerges && mode_ == Mode::kDom) {
      pending_ = Mode::kDom;
      mode_ = Mode::kMerges;
      merge_depth_ = 1;
      out_->merges.emplace();
      return true;
    }
    pending_ = Mode::kDom;
    if (mode_ == Mode::kMerges) {
      if (merge_depth_ != 1) return capture_error("a nested array");
      merge_depth_ = 2;
      merge_parts_ = 0;
      out_->merges->push_back(MergeEntry{});
      return true;
    }
    if (mode_ != Mode::kDom) return capture_error("an array");
    json* p = value(json(json::value_t::array)) ? last_ : nullptr;
    if (p == nullptr) return false;
    stack_.push_back(p);
    return true;
  }
  bool end_array() {
    if (mode_ == Mode::kMerges) {
      if (merge_depth_ == 2) {
        if (merge_parts_ != 2) return capture_error("a pair of two strings");
        merge_depth_ = 1;
        return true;
      }
      mode_ = Mode::kDom;
      return true;
    }
    if (mode_ != Mode::kDom) return capture_error("an array");
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    if (error.empty()) error = e.what();
    return false;
  }

 private:
  enum class Mode { kDom, kVocab, kMerges };

  bool value(json v) {
    pending_ = Mode::kDom;
    if (mode_ != Mode::kDom) return capture_error(std::string(v.type_name()));
    if (stack_.empty()) {
      out_->dom = std::move(v);
      last_ = &out_->dom;
    } else if (stack_.back()->is_array()) {
      stack_.back()->push_back(std::move(v));
      last_ = &stack_.back()->back();
    } else {
      *object_element_ = std::move(v);
      last_ = object_element_;
    }
    return true;
  }
  bool vocab_id(int64_t id) {
    out_->vocab->emplace_back(std::move(vocab_key_), id);
    return true;
  }
  bool merge_string(json::string_t& s) {
    if (merge_depth_ == 1) {
      out_->merges->push_back(MergeEntry{std::move(s), std::string(), true});
      return true;
    }
    MergeEntry& e = out_->merges->back();
    if (merge_parts_ == 0) {
      e.first = std::move(s);
    } else if (merge_parts_ == 1) {
      e.second = std::move(s);
    } else {
      return capture_error("a pair of two strings");
    }
    ++merge_parts_;
    return true;
  }
  bool capture_error(const std::string& got) {
    if (mode_ == Mode::kVocab) {
      error = "model.vocab[\"" + vocab_key_.substr(0, 64) + "\"]: expected a token id, got " + got;
    } else {
      error = "model.merges[" + std::to_string(out_->merges ? out_->merges->size() : 0) +
              "]: expected \"a b\" or [\"a\", \"b\"], got " + got;
    }
    return false;
  }

  TokenizerJson* out_;
  std::vector<json*> stack_;
  json* object_element_ = nullptr;
  json* last_ = nullptr;
  std::string top_key_;
  Mode mode_ = Mode::kDom;
  Mode pending_ = Mode::kDom;  // the next container is the vocab / merges table
  std::string vocab_key_;
  int merge_depth_ = 0;
  int merge_parts_ = 0;
};

}  // namespace

Expected<TokenizerJson> parse_tokenizer_json(std::string_view text, std::string_view source) {
  TokenizerJson out;
  Handler handler(&out);
  bool ok = json::sax_parse(text.begin(), text.end(), &handler, json::input_format_t::json,
                            /*strict=*/true, /*ignore_comments=*/false);
  if (!ok) {
    if (out.vocab || out.merges) {
      if (handler.error.rfind("model.", 0) == 0) {
        return make_error(ErrorCode::kInvalidFormat, "{}: {}", source, handler.error);
      }
    }
    return make_error(ErrorCode::kInvalidFormat, "{}: not valid JSON ({})", source,
                      handler.error.substr(0, 200));
  }
  return out;
}

}  // namespace vllm::tok
