// Tokenizer: loads tokenizer.json and drives encode / decode through its stages, in the
// order `tokenizers`' TokenizerImpl uses (see components.h for the stages).
#include "tokenizer/tokenizer.h"

#include <fstream>
#include <functional>
#include <thread>

#include "tokenizer/json_loader.h"
#include "tokenizer/json_util.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode_util.h"

namespace vllm {

using tok::json;

namespace {

Expected<std::string> read_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return make_error(ErrorCode::kNotFound,
                      "{}: no such file (give tokenizer.json or the model folder holding it)",
                      path.string());
  }
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return make_error(ErrorCode::kIoError, "{}: cannot open for reading", path.string());
  std::streamoff size = in.tellg();
  if (size < 0) return make_error(ErrorCode::kIoError, "{}: cannot read", path.string());
  std::string text(static_cast<size_t>(size), '\0');
  in.seekg(0);
  if (!in.read(text.data(), size)) {
    return make_error(ErrorCode::kIoError, "{}: read failed", path.string());
  }
  return text;
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Expected<Tokenizer> Tokenizer::from_file(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path file = path;
  if (std::filesystem::is_directory(path, ec)) file = path / "tokenizer.json";
  VLLM_ASSIGN_OR_RETURN(std::string text, read_file(file));
  return from_json(text, file.string());
}

Expected<Tokenizer> Tokenizer::from_json(std::string_view json_text, std::string_view source) {
  VLLM_ASSIGN_OR_RETURN(tok::TokenizerJson parsed, tok::parse_tokenizer_json(json_text, source));
  const json& j = parsed.dom;
  if (!j.is_object()) {
    return make_error(ErrorCode::kInvalidFormat, "{}: expected a JSON object at the top level",
                      source);
  }
  auto impl = std::make_unique<Impl>();
  impl->source = std::string(source);
  auto in_source = [&](const Status& s) { return s.with_context(source); };

  if (const json* v = json_find(j, "version"); v != nullptr) {
    if (!v->is_string() || v->get<std::string>() != "1.0") {
      return make_error(ErrorCode::kUnsupported, "{}: version: unknown tokenizer version {}",
                        source, v->dump().substr(0, 32));
    }
  }
  if (const json* v = json_find(j, "normalizer")) {
    auto n = tok::make_normalizer(*v, "normalizer");
    if (!n) return in_source(n.status());
    impl->normalizer = std::move(n).value();
  }
  if (const json* v = json_find(j, "pre_tokenizer")) {
    auto p = tok::make_pre_tokenizer(*v, "pre_tokenizer");
    if (!p) return in_source(p.status());
    impl->pre_tokenizer = std::move(p).value();
  }
  const json* model = json_find(j, "model");
  if (model == nullptr) return make_error(ErrorCode::kInvalidFormat, "{}: model: missing", source);
  {
    auto m = tok::BpeModel::from_json(*model, "model", parsed.vocab ? &*parsed.vocab : nullptr,
                                      parsed.merges ? &*parsed.merges : nullptr);
    if (!m) return in_source(m.status());
    impl->model = std::move(m).value();
  }
  if (const json* v = json_find(j, "decoder")) {
    auto d = tok::make_decoder(*v, "decoder");
    if (!d) return in_source(d.status());
    impl->decoder = std::move(d).value();
    impl->decoder_has_byte_fallback = impl->decoder->has_byte_fallback();
    bool fused = false;
    impl->decoder_appends_only = impl->decoder->appends_only(&fused);
  }
  if (const json* v = json_find(j, "post_processor")) {
    auto p = tok::make_post_processor(*v, "post_processor");
    if (!p) return in_source(p.status());
    impl->post_processor = std::move(p).value();
  }
  {
    const json* list = json_find(j, "added_tokens");
    auto a = tok::AddedVocabulary::from_json(list ? *list : json(), "added_tokens", impl->model,
                                             impl->normalizer.get());
    if (!a) return in_source(a.status());
    impl->added = std::move(a).value();
  }
  return Tokenizer(std::move(impl));
}

Status Tokenizer::Impl::encode_into(std::string_view text, bool add_special_tokens,
                                    std::vector<int32_t>* ids) const {
  size_t bad = tok::find_invalid_utf8(text);
  if (bad != std::string_view::npos) {
    return make_error(ErrorCode::kInvalidArgument,
                      "text to encode is not valid UTF-8 (bad byte 0x{:02X} at offset {})",
                      static_cast<unsigned char>(text[bad]), bad);
  }
  if (text.size() > (size_t{1} << 30)) {
    return make_error(ErrorCode::kInvalidArgument, "text to encode is too long ({} bytes)",
                      text.size());
  }
  if (add_special_tokens && post_processor) {
    ids->insert(ids->end(), post_processor->prefix.begin(), post_processor->prefix.end());
  }
  thread_local tok::Pieces ws;
  ws.arena.assign(text);
  ws.list.clear();
  ws.next.clear();
  if (!text.empty()) ws.list.push_back({0, static_cast<uint32_t>(text.size()), -1, true});

  added.split(&ws, /*normalized_pass=*/false);
  if (normalizer) {
    for (const tok::Piece& p : ws.list) {
      if (p.id >= 0) {
        ws.next.push_back(p);
        continue;
      }
      ws.buffer.clear();
      VLLM_RETURN_IF_ERROR(normalizer->normalize(ws.text(p), &ws.buffer));
      auto begin = static_cast<uint32_t>(ws.arena.size());
      ws.arena += ws.buffer;
      ws.emit(begin, static_cast<uint32_t>(ws.arena.size()), p.at_start);
    }
    ws.commit();
  }
  added.split(&ws, /*normalized_pass=*/true);
  if (pre_tokenizer) VLLM_RETURN_IF_ERROR(pre_tokenizer->pre_tokenize(&ws));

  // Take a word cache that no other thread holds right now (or go without).
  size_t first = std::hash<std::thread::id>()(std::this_thread::get_id()) % cache_shards.size();
  std::unique_lock<std::mutex> lock;
  tok::WordCache* cache = nullptr;
  for (size_t k = 0; k < cache_shards.size() && cache == nullptr; ++k) {
    CacheShard& shard = cache_shards[(first + k) % cache_shards.size()];
    std::unique_lock<std::mutex> attempt(shard.mutex, std::try_to_lock);
    if (attempt.owns_lock()) {
      lock = std::move(attempt);
      cache = &shard.cache;
    }
  }
  for (const tok::Piece& p : ws.list) {
    if (p.id >= 0) {
      ids->push_back(p.id);
    } else {
      VLLM_RETURN_IF_ERROR(model.tokenize(ws.text(p), ids, cache));
    }
  }
  if (add_special_tokens && post_processor) {
    ids->insert(ids->end(), post_processor->suffix.begin(), post_processor->suffix.end());
  }
  if (ws.arena.capacity() > (size_t{16} << 20)) {  // do not keep a huge input's memory
    ws.arena = std::string();
    ws.list = {};
    ws.next = {};
  }
  return Status::ok();
}

std::optional<std::string_view> Tokenizer::Impl::token_string(int32_t id) const {
  if (auto s = added.id_to_token(id)) return s;
  return model.id_to_token(id);
}

bool Tokenizer::Impl::is_special_id(int32_t id) const {
  std::optional<std::string_view> s = token_string(id);
  return s && added.is_special_content(*s);
}

bool Tokenizer::Impl::is_pending_byte_token(int32_t id) const {
  if (!decoder_has_byte_fallback) return false;
  std::optional<std::string_view> s = token_string(id);
  return s && s->size() == 6 && s->substr(0, 3) == "<0x" && (*s)[5] == '>';
}

Expected<std::string> Tokenizer::Impl::decode_window(std::span<const int32_t> ids,
                                                     bool skip_special_tokens,
                                                     bool at_start) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    std::optional<std::string_view> s = token_string(id);
    if (!s) {
      return make_error(ErrorCode::kOutOfRange,
                        "token id {} is not in the vocabulary of {} (ids 0..{})", id, source,
                        std::max(model.max_id(), added.max_id()));
    }
    if (skip_special_tokens && added.is_special_content(*s)) continue;
    tokens.emplace_back(*s);
  }
  std::string text;
  if (decoder) {
    tok::DecodeState state{at_start, false};
    VLLM_RETURN_IF_ERROR(decoder->decode_chain(&tokens, &state));
    for (const std::string& t : tokens) text += t;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) text += ' ';
      text += tokens[i];
    }
  }
  return text;
}

namespace tok {
std::string clean_up_tokenization(std::string text) {
  static const std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) {
    std::string out;
    size_t last = 0;
    for (size_t pos = text.find(from); pos != std::string::npos; pos = text.find(from, last)) {
      out.append(text, last, pos - last);
      out += to;
      last = pos + from.size();
    }
    if (last == 0) continue;
    out.append(text, last, std::string::npos);
    text.swap(out);
  }
  return text;
}
}  // namespace tok

Expected<std::vector<int32_t>> Tokenizer::encode(std::string_view text,
                                                 bool add_special_tokens) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  VLLM_RETURN_IF_ERROR(impl_->encode_into(text, add_special_tokens, &ids));
  return ids;
}

Expected<std::string> Tokenizer::decode(std::span<const int32_t> ids,
                                        const DecodeOptions& options) const {
  VLLM_ASSIGN_OR_RETURN(std::string text,
                        impl_->decode_window(ids, options.skip_special_tokens, true));
  if (options.clean_up_tokenization_spaces) {
    text = tok::clean_up_tokenization(std::move(text));
  }
  return text;
}

int32_t Tokenizer::vocab_size() const {
  return std::max(impl_->model.max_id(), impl_->added.max_id()) + 1;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = impl_->added.token_to_id(token)) return id;
  return impl_->model.token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  std::optional<std::string_view> s = impl_->token_string(id);
  if (!s) return std::nullopt;
  return std::string(*s);
}

bool Tokenizer::is_special(int32_t id) const {
  return impl_->is_special_id(id);
}

std::optional<std::string> Tokenizer::token_bytes(int32_t id) const {
  std::optional<std::string_view> s = impl_->token_string(id);
  if (!s) return std::nullopt;
  std::vector<std::string> tokens(1, std::string(*s));
  if (!impl_->decoder) return tokens[0];
  tok::DecodeState state;
  state.at_start = false;
  state.raw_bytes = true;
  if (!impl_->decoder->decode_chain(&tokens, &state).is_ok()) return std::nullopt;
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace vllm
