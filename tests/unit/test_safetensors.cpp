// Safetensors reader and writer: round trips, layout compatibility with the Hugging Face
// writer, zero-copy views, and a battery of malformed files that must each fail with the
// right error code and a message naming the file and the offending tensor or field.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"
#include "temp_dir.h"

namespace vllm {
namespace test_safetensors {
namespace {

using testing::TempDir;

// A file from a header text and `data_bytes` zero bytes of data section (no padding added).
std::vector<uint8_t> raw_file(std::string_view header, size_t data_bytes = 0) {
  std::vector<uint8_t> out;
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.resize(out.size() + data_bytes, 0);
  return out;
}

// Deterministic bytes for a tensor, different per tensor.
Tensor patterned(const Shape& shape, DType dtype, int seed) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* bytes = static_cast<uint8_t*>(t.data_ptr());
  for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(seed * 31 + i * 7);
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

bool inside(const void* p, std::span<const uint8_t> range) {
  auto* c = static_cast<const uint8_t*>(p);
  return c >= range.data() && c <= range.data() + range.size();
}

TEST(Safetensors, RoundTripAllDtypesScalarsAndEmpty) {
  TempDir dir("vllm_st");
  NamedTensors tensors;
  const std::vector<DType> dtypes = {DType::kF32,    DType::kF16, DType::kBF16, DType::kF8E4M3,
                                     DType::kF8E5M2, DType::kF64, DType::kI64,  DType::kI32,
                                     DType::kI16,    DType::kI8,  DType::kU8,   DType::kBool};
  int seed = 0;
  for (DType d : dtypes) {
    // Odd sizes so that a naive name-ordered layout would misalign the wider types.
    tensors.emplace_back(fmt::format("w.{}", dtype_name(d)), patterned({3, 5}, d, ++seed));
  }
  tensors.emplace_back("scalar", patterned({}, DType::kF32, ++seed));
  tensors.emplace_back("empty", patterned({0}, DType::kBF16, ++seed));
  tensors.emplace_back("empty2d", patterned({4, 0}, DType::kI64, ++seed));
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "hi"}};
  const auto path = dir / "model.safetensors";
  ASSERT_TRUE(write_safetensors(path, tensors, metadata).is_ok());

  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.has_value()) << file.status().to_string();
  EXPECT_EQ(file->size(), tensors.size());
  EXPECT_EQ(file->metadata(), metadata);
  // The data section starts 8-aligned: the header is space-padded.
  auto header = SafetensorsFile::parse_header(file->bytes(), "x");
  ASSERT_TRUE(header.has_value());
  EXPECT_EQ(header->header_bytes % 8, 0u);
  for (const auto& [name, expected] : tensors) {
    SCOPED_TRACE(name);
    const SafetensorsEntry* entry = file->find(name);
    ASSERT_NE(entry, nullptr);
    EXPECT_EQ(entry->dtype, expected.dtype());
    EXPECT_EQ(entry->shape, expected.shape());
    auto got = file->tensor(name);
    ASSERT_TRUE(got.has_value()) << got.status().to_string();
    EXPECT_EQ(got->dtype(), expected.dtype());
    EXPECT_EQ(got->shape(), expected.shape());
    EXPECT_TRUE(same_bytes(*got, expected));
    // Zero-copy: the view points into the mapping, aligned to its element size.
    EXPECT_TRUE(inside(got->data_ptr(), file->bytes()));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(got->data_ptr()) % got->element_size(), 0u);
  }
  EXPECT_EQ(file->find("nope"), nullptr);
}

TEST(Safetensors, ViewOutlivesTheFileObject) {
  TempDir dir("vllm_st");
  Tensor w = patterned({16}, DType::kF32, 3);
  const auto path = dir / "a.safetensors";
  ASSERT_TRUE(write_safetensors(path, {{"w", w}}).is_ok());
  Tensor view;
  {
    auto file = SafetensorsFile::open(path);
    ASSERT_TRUE(file.has_value());
    view = file->tensor("w").value();
  }
  EXPECT_TRUE(same_bytes(view, w));  // the mapping is kept alive by the view (ASan checks)
}

TEST(Safetensors, WriterMatchesHuggingFaceLayout) {
  // Byte-for-byte the layout the Hugging Face crate writes for these inputs.
  Tensor t = Tensor::empty({1, 2, 3}, DType::kF32);
  for (int i = 0; i < 6; ++i) t.data<float>()[i] = static_cast<float>(i);
  auto bytes = serialize_safetensors({{"attn.0", t}});
  ASSERT_TRUE(bytes.has_value());
  const std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(header.size(), 64u);
  std::vector<uint8_t> expected = raw_file(header);
  expected.insert(expected.end(), static_cast<uint8_t*>(t.data_ptr()),
                  static_cast<uint8_t*>(t.data_ptr()) + 24);
  EXPECT_EQ(*bytes, expected);

  auto empty = serialize_safetensors({});
  ASSERT_TRUE(empty.has_value());
  EXPECT_EQ(*empty, raw_file("{}      "));

  // Wider dtypes first, then names: every tensor stays aligned.
  auto mixed = serialize_safetensors({{"a", patterned({3}, DType::kU8, 1)},
                                      {"b", patterned({1}, DType::kF64, 2)},
                                      {"c", patterned({1}, DType::kF16, 3)}});
  ASSERT_TRUE(mixed.has_value());
  auto parsed = SafetensorsFile::parse_header(*mixed, "mixed");
  ASSERT_TRUE(parsed.has_value()) << parsed.status().to_string();
  ASSERT_EQ(parsed->entries.size(), 3u);
  EXPECT_EQ(parsed->entries[0].name, "b");
  EXPECT_EQ(parsed->entries[1].name, "c");
  EXPECT_EQ(parsed->entries[2].name, "a");
  EXPECT_EQ(parsed->entries[2].data_begin, 10u);
}

TEST(Safetensors, WriterNonContiguousAndErrors) {
  Tensor t = patterned({3, 4}, DType::kI32, 5);
  Tensor cols = t.slice(1, 1, 3);  // [3, 2], not contiguous
  auto bytes = serialize_safetensors({{"cols", cols}});
  ASSERT_TRUE(bytes.has_value());
  auto header = SafetensorsFile::parse_header(*bytes, "mem");
  ASSERT_TRUE(header.has_value());
  const int32_t* data = reinterpret_cast<const int32_t*>(bytes->data() + header->data_start);
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 2; ++c) EXPECT_EQ(data[r * 2 + c], t.data<int32_t>()[r * 4 + c + 1]);
  }

  auto dup = serialize_safetensors({{"x", t}, {"x", t}});
  ASSERT_FALSE(dup.has_value());
  EXPECT_EQ(dup.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(dup.status().message().find("'x'"), std::string::npos);
  auto reserved = serialize_safetensors({{"__metadata__", t}});
  EXPECT_EQ(reserved.status().code(), ErrorCode::kInvalidArgument);
  auto undefined = serialize_safetensors({{"u", Tensor()}});
  EXPECT_EQ(undefined.status().code(), ErrorCode::kInvalidArgument);
  auto bad_utf8 = serialize_safetensors({{"\xff\xfe", t}});
  EXPECT_EQ(bad_utf8.status().code(), ErrorCode::kInvalidArgument);
}

TEST(Safetensors, UnalignedTensorIsCopied) {
  // Legal but unusual: an F32 at data offset 1. The reader must not hand out a misaligned
  // float pointer; it returns an aligned copy with the same bytes.
  std::string header = R"({"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("f":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<uint8_t> bytes = raw_file(header);
  const float value = 2.5f;
  bytes.push_back(7);
  const auto* v = reinterpret_cast<const uint8_t*>(&value);
  bytes.insert(bytes.end(), v, v + 4);
  TempDir dir("vllm_st");
  auto file = SafetensorsFile::open(dir.write("u.safetensors", bytes));
  ASSERT_TRUE(file.has_value()) << file.status().to_string();
  auto f = file->tensor("f");
  ASSERT_TRUE(f.has_value());
  EXPECT_FALSE(inside(f->data_ptr(), file->bytes()));
  EXPECT_EQ(f->data<float>()[0], 2.5f);
  auto b = file->tensor("b");
  ASSERT_TRUE(b.has_value());
  EXPECT_TRUE(inside(b->data_ptr(), file->bytes()));
  EXPECT_EQ(b->data<uint8_t>()[0], 7);
}

TEST(Safetensors, MissingTensorAndMissingFile) {
  TempDir dir("vllm_st");
  const auto path = dir / "m.safetensors";
  ASSERT_TRUE(write_safetensors(path, {{"w", patterned({2}, DType::kF32, 1)}}).is_ok());
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.has_value());
  auto missing = file->tensor("model.norm.weight");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'model.norm.weight'"), std::string::npos);
  EXPECT_NE(missing.status().message().find(path.string()), std::string::npos);

  auto absent = SafetensorsFile::open(dir / "absent.safetensors");
  ASSERT_FALSE(absent.has_value());
  EXPECT_EQ(absent.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(absent.status().message().find("absent.safetensors"), std::string::npos);
}

// ---- Malformed files ---------------------------------------------------------------------

struct MalformedCase {
  const char* label;  // also the file name
  std::vector<uint8_t> bytes;
  ErrorCode code;
  std::vector<std::string> needles;  // besides the file name, the message must contain these
};

std::vector<uint8_t> with_length(uint64_t n, size_t total) {
  std::vector<uint8_t> out(total, ' ');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  return out;
}

std::string deep_nesting(int depth) {
  return R"({"__metadata__":)" + std::string(static_cast<size_t>(depth), '[') +
         std::string(static_cast<size_t>(depth), ']') + "}";
}

std::vector<MalformedCase> malformed_cases() {
  const ErrorCode kFmt = ErrorCode::kInvalidFormat;
  return {
      {"empty_file", {}, kFmt, {"empty"}},
      {"truncated_length", {8, 0, 0, 0, 0}, kFmt, {"truncated", "5 bytes"}},
      {"header_past_eof", with_length(9000, 512), kFmt, {"9000", "past the end", "512"}},
      {"header_absurd", with_length(1ull << 40, 64), kFmt, {"1099511627776", "limit"}},
      {"header_not_json", raw_file("{\"w\": nope}"), kFmt, {"not valid JSON", "parse error"}},
      {"header_not_object", raw_file("[1, 2]"), kFmt, {"an array", "expected a JSON object"}},
      {"trailing_garbage", raw_file("{} x"), kFmt, {"not valid JSON"}},
      {"entry_not_object", raw_file(R"({"w": 5})"), kFmt, {"'w'", "number"}},
      {"unknown_dtype",
       raw_file(R"({"w":{"dtype":"U17","shape":[1],"data_offsets":[0,1]}})", 1),
       ErrorCode::kUnsupported,
       {"'w'", "'U17'"}},
      {"missing_dtype",
       raw_file(R"({"w":{"shape":[1],"data_offsets":[0,1]}})", 1),
       kFmt,
       {"'w'", "missing \"dtype\""}},
      {"dtype_not_string",
       raw_file(R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,1]}})", 1),
       kFmt,
       {"'w'", "\"dtype\" is 4"}},
      {"missing_shape",
       raw_file(R"({"w":{"dtype":"U8","data_offsets":[0,1]}})", 1),
       kFmt,
       {"'w'", "missing \"shape\""}},
      {"shape_not_list",
       raw_file(R"({"w":{"dtype":"U8","shape":"1","data_offsets":[0,1]}})", 1),
       kFmt,
       {"'w'", "\"shape\""}},
      {"negative_dim",
       raw_file(R"({"w":{"dtype":"U8","shape":[2,-2],"data_offsets":[0,4]}})", 4),
       kFmt,
       {"'w'", "-2", "non-negative"}},
      {"fractional_dim",
       raw_file(R"({"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", 1),
       kFmt,
       {"'w'", "1.5"}},
      {"numel_overflow",
       raw_file(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]}})", 1),
       kFmt,
       {"'w'", "64 bits"}},
      {"missing_data_offsets",
       raw_file(R"({"w":{"dtype":"U8","shape":[1]}})", 1),
       kFmt,
       {"'w'", "missing \"data_offsets\""}},
      {"data_offsets_one_value",
       raw_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[1]}})", 1),
       kFmt,
       {"'w'", "[begin, end]"}},
      {"begin_after_end",
       raw_file(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}})", 4),
       kFmt,
       {"'w'", "[4, 2]", "begin after"}},
      {"offsets_outside_data",
       raw_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8),
       kFmt,
       {"'w'", "[0, 16]", "outside the data section", "8 bytes"}},
      {"offsets_overlap",
       raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                12),
       kFmt,
       {"'a'", "'b'", "overlaps"}},
      {"hole_between_tensors",
       raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                12),
       kFmt,
       {"'b'", "hole", "[4, 8)"}},
      {"hole_at_start",
       raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
       kFmt,
       {"'a'", "[0, 4)"}},
      {"trailing_data",
       raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 12),
       kFmt,
       {"'a'", "12 bytes", "cover only 4"}},
      {"size_mismatch",
       raw_file(R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,8]}})", 8),
       kFmt,
       {"'w'", "[2, 3]", "BF16", "needs 12 bytes", "span 8"}},
      {"duplicate_name",
       raw_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                R"("w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                2),
       kFmt,
       {"'w'", "twice"}},
      {"metadata_not_object",
       raw_file(R"({"__metadata__":["pt"]})"),
       kFmt,
       {"__metadata__", "array"}},
      {"metadata_value_not_string",
       raw_file(R"({"__metadata__":{"format":1}})"),
       kFmt,
       {"__metadata__", "'format'"}},
      {"nesting_too_deep", raw_file(deep_nesting(500)), kFmt, {"deeper than 128"}},
  };
}

class MalformedSafetensors : public ::testing::TestWithParam<MalformedCase> {};

TEST_P(MalformedSafetensors, FailsWithCodeAndMessage) {
  const MalformedCase& c = GetParam();
  TempDir dir("vllm_st_bad");
  const auto path = dir.write(std::string(c.label) + ".safetensors", c.bytes);
  auto file = SafetensorsFile::open(path);
  ASSERT_FALSE(file.has_value()) << c.label << " was accepted";
  const Status& st = file.status();
  EXPECT_EQ(st.code(), c.code) << st.to_string();
  EXPECT_NE(st.message().find(path.string()), std::string::npos) << st.message();
  for (const std::string& needle : c.needles) {
    EXPECT_NE(st.message().find(needle), std::string::npos)
        << "'" << needle << "' missing from: " << st.message();
  }
  // The in-memory parser agrees with the file reader.
  auto parsed = SafetensorsFile::parse_header(c.bytes, "in-memory");
  ASSERT_FALSE(parsed.has_value());
  EXPECT_EQ(parsed.status().code(), c.code);
  EXPECT_NE(parsed.status().message().find("in-memory"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Battery, MalformedSafetensors, ::testing::ValuesIn(malformed_cases()),
                         [](const ::testing::TestParamInfo<MalformedCase>& info) {
                           return std::string(info.param.label);
                         });

TEST(Safetensors, AcceptsEdgeCasesTheReferenceAccepts) {
  // Entries in any order in the JSON, zero-size tensors sharing an offset, unknown extra
  // fields, trailing spaces, no tensors at all.
  const std::string header = R"({"z":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"extra":true},)"
                             R"("e1":{"dtype":"F32","shape":[0,3],"data_offsets":[2,2]},)"
                             R"("e2":{"dtype":"I64","shape":[0],"data_offsets":[2,2]},)"
                             R"("a":{"dtype":"U8","shape":[],"data_offsets":[2,3]}}   )";
  auto parsed = SafetensorsFile::parse_header(raw_file(header, 3), "edge");
  ASSERT_TRUE(parsed.has_value()) << parsed.status().to_string();
  ASSERT_EQ(parsed->entries.size(), 4u);
  EXPECT_EQ(parsed->entries.front().name, "z");
  EXPECT_EQ(parsed->entries.back().name, "a");
  EXPECT_TRUE(parsed->entries.back().shape.empty());
  auto none = SafetensorsFile::parse_header(raw_file("{}"), "none");
  ASSERT_TRUE(none.has_value());
  EXPECT_TRUE(none->entries.empty());
}

}  // namespace
}  // namespace test_safetensors
}  // namespace vllm
