// Validation of a safetensors header, held in memory (SafetensorsFile::parse_header).
//
// The rules follow the Hugging Face Rust crate, which defines the format in practice:
// the header length is capped at 100 MB, the header is one JSON object, every entry has a
// known dtype, a non-negative integer shape and [begin, end] offsets with
// (end - begin) == numel * dtype size, and the entries sorted by offset tile the data section
// exactly (no overlap, no hole, nothing after the last tensor). Every error names the source,
// the tensor if one is involved, and what is wrong.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "loader/safetensors.h"

namespace vllm {
namespace {

using nlohmann::json;

// serde_json, which the reference crate uses, refuses nesting deeper than 128.
constexpr size_t kMaxJsonDepth = 128;

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

// Builds the DOM through nlohmann's own SAX DOM builder, adding what its plain parse() lacks:
// the parser's error message, a nesting limit, and detection of repeated top-level keys
// (which parse() would silently collapse to the last one).
class HeaderSax {
 public:
  explicit HeaderSax(json& root) : dom_(root, /*allow_exceptions=*/false) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) {
    return dom_.number_float(v, s);
  }
  bool string(json::string_t& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool start_object(size_t n) { return enter() && dom_.start_object(n); }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(size_t n) { return enter() && dom_.start_array(n); }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  bool key(json::string_t& k) {
    if (depth_ == 1 && !top_level_keys_.insert(k).second) {
      error_ = fmt::format("tensor '{}' appears twice in the header", k);
      return false;
    }
    return dom_.key(k);
  }
  template <class Exception>
  bool parse_error(size_t /*position*/, const std::string& /*token*/, const Exception& ex) {
    error_ = fmt::format("header is not valid JSON ({})", ex.what());
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  bool enter() {
    if (++depth_ > kMaxJsonDepth) {
      error_ = fmt::format("header JSON nests deeper than {} levels", kMaxJsonDepth);
      return false;
    }
    return true;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  size_t depth_ = 0;
  std::set<std::string> top_level_keys_;
  std::string error_;
};

// A JSON integer >= 0, or nullopt for negative / fractional / non-number values.
std::optional<uint64_t> as_unsigned(const json& value) {
  if (const auto* u = value.get_ptr<const json::number_unsigned_t*>()) return *u;
  return std::nullopt;
}

std::string describe(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

// "an array", "a number": the JSON type of `value` with its article.
std::string a_type(const json& value) {
  std::string_view name = value.type_name();
  const bool vowel =
      !name.empty() && std::string_view("aeiou").find(name[0]) != std::string_view::npos;
  return fmt::format("{} {}", vowel ? "an" : "a", name);
}

Status entry_error(std::string_view source, const std::string& name, std::string_view what) {
  return make_error(ErrorCode::kInvalidFormat, "{}: tensor '{}': {}", source, name, what);
}

Expected<SafetensorsEntry> parse_entry(std::string_view source, const std::string& name,
                                       const json& value, uint64_t data_bytes) {
  if (!value.is_object()) {
    return entry_error(source, name,
                       fmt::format("entry is {}, expected an object with dtype, shape and "
                                   "data_offsets",
                                   a_type(value)));
  }
  SafetensorsEntry entry;
  entry.name = name;

  auto dtype_it = value.find("dtype");
  if (dtype_it == value.end()) return entry_error(source, name, "missing \"dtype\"");
  const auto* dtype_name_ptr = dtype_it->get_ptr<const std::string*>();
  if (dtype_name_ptr == nullptr) {
    return entry_error(source, name,
                       fmt::format("\"dtype\" is {}, expected a string", describe(*dtype_it)));
  }
  auto dtype = dtype_from_name(*dtype_name_ptr);
  if (!dtype) {
    return Status(dtype.status().code(),
                  fmt::format("{}: tensor '{}': {}", source, name, dtype.status().message()));
  }
  entry.dtype = *dtype;

  auto shape_it = value.find("shape");
  if (shape_it == value.end()) return entry_error(source, name, "missing \"shape\"");
  if (!shape_it->is_array()) {
    return entry_error(
        source, name,
        fmt::format("\"shape\" is {}, expected a list of integers", describe(*shape_it)));
  }
  // Every partial product of the non-zero dims must fit in int64 (strides and numel do).
  uint64_t nonzero_product = 1;
  bool has_zero_dim = false;
  for (const json& dim : *shape_it) {
    auto d = as_unsigned(dim);
    if (!d || *d > static_cast<uint64_t>(INT64_MAX)) {
      return entry_error(source, name,
                         fmt::format("shape {} has a dimension {} that is not a non-negative "
                                     "integer",
                                     describe(*shape_it), describe(dim)));
    }
    if (*d == 0) {
      has_zero_dim = true;
    } else if (nonzero_product > static_cast<uint64_t>(INT64_MAX) / *d) {
      return entry_error(
          source, name,
          fmt::format("shape {} has more elements than fit in 64 bits", describe(*shape_it)));
    }
    if (*d != 0) nonzero_product *= *d;
    entry.shape.push_back(static_cast<int64_t>(*d));
  }
  const uint64_t numel = has_zero_dim ? 0 : nonzero_product;
  const uint64_t esize = dtype_size(entry.dtype);
  if (numel > UINT64_MAX / esize) {
    return entry_error(source, name,
                       fmt::format("shape {} of {} is larger than 2^64 bytes",
                                   shape_to_string(entry.shape), dtype_name(entry.dtype)));
  }

  auto offsets_it = value.find("data_offsets");
  if (offsets_it == value.end()) return entry_error(source, name, "missing \"data_offsets\"");
  std::optional<uint64_t> begin, end;
  if (offsets_it->is_array() && offsets_it->size() == 2) {
    begin = as_unsigned((*offsets_it)[0]);
    end = as_unsigned((*offsets_it)[1]);
  }
  if (!begin || !end) {
    return entry_error(source, name,
                       fmt::format("\"data_offsets\" is {}, expected [begin, end] with "
                                   "non-negative integers",
                                   describe(*offsets_it)));
  }
  if (*begin > *end) {
    return entry_error(source, name,
                       fmt::format("data_offsets [{}, {}] begin after their end", *begin, *end));
  }
  if (*end > data_bytes) {
    return entry_error(source, name,
                       fmt::format("data_offsets [{}, {}] are outside the data section ({} "
                                   "bytes)",
                                   *begin, *end, data_bytes));
  }
  if (*end - *begin != numel * esize) {
    return entry_error(source, name,
                       fmt::format("shape {} of {} needs {} bytes but data_offsets [{}, {}] "
                                   "span {}",
                                   shape_to_string(entry.shape), dtype_name(entry.dtype),
                                   numel * esize, *begin, *end, *end - *begin));
  }
  entry.data_begin = *begin;
  entry.data_end = *end;
  return entry;
}

Status parse_metadata(std::string_view source, const json& value,
                      std::map<std::string, std::string>& out) {
  if (!value.is_object()) {
    return make_error(ErrorCode::kInvalidFormat,
                      "{}: \"__metadata__\" is {}, expected an object of strings", source,
                      a_type(value));
  }
  for (const auto& [key, item] : value.items()) {
    const auto* text = item.get_ptr<const std::string*>();
    if (text == nullptr) {
      return make_error(ErrorCode::kInvalidFormat,
                        "{}: \"__metadata__\" key '{}' is {}, expected a string", source, key,
                        describe(item));
    }
    out.emplace(key, *text);
  }
  return Status::ok();
}

// Entries sorted by (begin, end) must start at 0, follow each other without gap or overlap,
// and end where the data section ends.
Status check_tiling(std::string_view source, const SafetensorsHeader& header) {
  uint64_t covered = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry& e : header.entries) {
    if (e.data_begin > covered) {
      return make_error(ErrorCode::kInvalidFormat,
                        "{}: bytes [{}, {}) of the data section belong to no tensor (a hole "
                        "before tensor '{}')",
                        source, covered, e.data_begin, e.name);
    }
    if (e.data_begin < covered) {
      return make_error(ErrorCode::kInvalidFormat,
                        "{}: tensor '{}' at [{}, {}] overlaps tensor '{}' at [{}, {}]", source,
                        e.name, e.data_begin, e.data_end, previous->name, previous->data_begin,
                        previous->data_end);
    }
    covered = e.data_end;
    previous = &e;
  }
  if (covered != header.data_bytes) {
    return make_error(
        ErrorCode::kInvalidFormat,
        "{}: the data section is {} bytes but the tensors cover only {} (trailing "
        "bytes after {})",
        source, header.data_bytes, covered,
        previous ? fmt::format("tensor '{}'", previous->name) : std::string("the header"));
  }
  return Status::ok();
}

}  // namespace

Expected<SafetensorsHeader> SafetensorsFile::parse_header(std::span<const uint8_t> file_bytes,
                                                          std::string_view source) {
  const uint64_t file_size = file_bytes.size();
  if (file_size == 0) {
    return make_error(ErrorCode::kInvalidFormat,
                      "{}: file is empty (a safetensors file starts with an 8-byte header "
                      "length)",
                      source);
  }
  if (file_size < 8) {
    return make_error(ErrorCode::kInvalidFormat,
                      "{}: file is truncated: {} bytes, shorter than the 8-byte header length",
                      source, file_size);
  }
  SafetensorsHeader header;
  header.header_bytes = read_u64_le(file_bytes.data());
  if (header.header_bytes > kSafetensorsMaxHeaderBytes) {
    return make_error(ErrorCode::kInvalidFormat,
                      "{}: header length {} is larger than the {}-byte limit (not a "
                      "safetensors file?)",
                      source, header.header_bytes, kSafetensorsMaxHeaderBytes);
  }
  if (header.header_bytes > file_size - 8) {
    return make_error(ErrorCode::kInvalidFormat,
                      "{}: header length {} is past the end of the file (file is {} bytes; "
                      "truncated?)",
                      source, header.header_bytes, file_size);
  }
  header.data_start = 8 + header.header_bytes;
  header.data_bytes = file_size - header.data_start;

  const auto* text = reinterpret_cast<const char*>(file_bytes.data() + 8);
  json root;
  HeaderSax sax(root);
  if (!json::sax_parse(text, text + header.header_bytes, &sax)) {
    std::string why = sax.error().empty() ? std::string("header is not valid JSON") : sax.error();
    return make_error(ErrorCode::kInvalidFormat, "{}: {}", source, why);
  }
  if (!root.is_object()) {
    return make_error(ErrorCode::kInvalidFormat,
                      "{}: header is {}, expected a JSON object of tensor entries", source,
                      a_type(root));
  }

  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      VLLM_RETURN_IF_ERROR(parse_metadata(source, value, header.metadata));
      continue;
    }
    VLLM_ASSIGN_OR_RETURN(SafetensorsEntry entry,
                          parse_entry(source, key, value, header.data_bytes));
    header.entries.push_back(std::move(entry));
  }
  std::sort(header.entries.begin(), header.entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              if (a.data_begin != b.data_begin) return a.data_begin < b.data_begin;
              if (a.data_end != b.data_end) return a.data_end < b.data_end;
              return a.name < b.name;
            });
  VLLM_RETURN_IF_ERROR(check_tiling(source, header));
  return header;
}

}  // namespace vllm
