// Checkpoint discovery: sharded (index), single-file and globbed folders, and the errors a
// user sees for a broken folder (each naming the folder / index / shard / tensor involved).
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "loader/checkpoint.h"
#include "loader/safetensors_writer.h"
#include "temp_dir.h"

namespace vllm {
namespace test_checkpoint {
namespace {

using testing::TempDir;

Tensor filled(const Shape& shape, float value) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = value + static_cast<float>(i);
  return t;
}

void expect_error(const Status& st, ErrorCode code, std::initializer_list<std::string> needles) {
  EXPECT_EQ(st.code(), code) << st.to_string();
  for (const std::string& needle : needles) {
    EXPECT_NE(st.message().find(needle), std::string::npos)
        << "'" << needle << "' missing from: " << st.message();
  }
}

const char* kIndex = R"({
  "metadata": {"total_size": 40},
  "weight_map": {
    "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
    "model.norm.weight": "model-00001-of-00002.safetensors",
    "lm_head.weight": "model-00002-of-00002.safetensors"
  }
})";

void write_shards(const TempDir& dir) {
  ASSERT_TRUE(write_safetensors(dir / "model-00001-of-00002.safetensors",
                                {{"model.embed_tokens.weight", filled({2, 3}, 1.0f)},
                                 {"model.norm.weight", filled({3}, 10.0f)}})
                  .is_ok());
  ASSERT_TRUE(write_safetensors(dir / "model-00002-of-00002.safetensors",
                                {{"lm_head.weight", filled({1, 3}, 20.0f)}})
                  .is_ok());
}

TEST(Checkpoint, ShardedWithIndex) {
  TempDir dir("vllm_ckpt");
  write_shards(dir);
  dir.write("model.safetensors.index.json", kIndex);
  // A stray file the index does not name is not opened (it is not even valid).
  dir.write("stray.safetensors", "junk");

  auto ckpt = Checkpoint::open(dir.path());
  ASSERT_TRUE(ckpt.has_value()) << ckpt.status().to_string();
  EXPECT_EQ(ckpt->files().size(), 2u);
  EXPECT_EQ(ckpt->names(), (std::vector<std::string>{"lm_head.weight", "model.embed_tokens.weight",
                                                     "model.norm.weight"}));
  EXPECT_TRUE(ckpt->contains("model.norm.weight"));
  EXPECT_FALSE(ckpt->contains("model.layers.0.mlp.weight"));
  ASSERT_NE(ckpt->file_of("lm_head.weight"), nullptr);
  EXPECT_EQ(ckpt->file_of("lm_head.weight")->path().filename(), "model-00002-of-00002.safetensors");
  EXPECT_EQ(ckpt->file_of("nope"), nullptr);

  auto head = ckpt->tensor("lm_head.weight");
  ASSERT_TRUE(head.has_value());
  EXPECT_EQ(head->shape(), (Shape{1, 3}));
  EXPECT_EQ(head->data<float>()[2], 22.0f);
  auto norm = ckpt->tensor("model.norm.weight");
  ASSERT_TRUE(norm.has_value());
  EXPECT_EQ(norm->data<float>()[0], 10.0f);

  auto missing = ckpt->tensor("model.layers.0.mlp.weight");
  ASSERT_FALSE(missing.has_value());
  expect_error(missing.status(), ErrorCode::kNotFound,
               {"tensor 'model.layers.0.mlp.weight' not found in checkpoint", dir.path().string()});
}

TEST(Checkpoint, SingleFileAndGlob) {
  TempDir single("vllm_ckpt");
  ASSERT_TRUE(write_safetensors(single / "model.safetensors", {{"w", filled({4}, 0.0f)}}).is_ok());
  single.write("other.safetensors", "not read: model.safetensors wins");
  auto one = Checkpoint::open(single.path());
  ASSERT_TRUE(one.has_value()) << one.status().to_string();
  EXPECT_EQ(one->names(), std::vector<std::string>{"w"});

  TempDir glob("vllm_ckpt");
  ASSERT_TRUE(write_safetensors(glob / "b.safetensors", {{"b", filled({1}, 2.0f)}}).is_ok());
  ASSERT_TRUE(write_safetensors(glob / "a.safetensors", {{"a", filled({1}, 1.0f)}}).is_ok());
  glob.write("notes.txt", "ignored");
  auto two = Checkpoint::open(glob.path());
  ASSERT_TRUE(two.has_value()) << two.status().to_string();
  ASSERT_EQ(two->files().size(), 2u);
  EXPECT_EQ(two->files()[0].path().filename(), "a.safetensors");  // sorted
  EXPECT_EQ(two->tensor("b")->data<float>()[0], 2.0f);

  // The same name in two globbed files is ambiguous.
  ASSERT_TRUE(write_safetensors(glob / "c.safetensors", {{"a", filled({1}, 3.0f)}}).is_ok());
  auto dup = Checkpoint::open(glob.path());
  ASSERT_FALSE(dup.has_value());
  expect_error(dup.status(), ErrorCode::kInvalidFormat, {"'a'", "a.safetensors", "c.safetensors"});
}

TEST(Checkpoint, IndexNamingMissingShard) {
  TempDir dir("vllm_ckpt");
  ASSERT_TRUE(write_safetensors(dir / "model-00001-of-00002.safetensors",
                                {{"model.embed_tokens.weight", filled({2, 3}, 1.0f)},
                                 {"model.norm.weight", filled({3}, 10.0f)}})
                  .is_ok());
  dir.write("model.safetensors.index.json", kIndex);
  auto ckpt = Checkpoint::open(dir.path());
  ASSERT_FALSE(ckpt.has_value());
  expect_error(
      ckpt.status(), ErrorCode::kNotFound,
      {"model.safetensors.index.json", "'model-00002-of-00002.safetensors'", "does not exist"});
}

TEST(Checkpoint, IndexMapsTensorMissingFromShard) {
  TempDir dir("vllm_ckpt");
  write_shards(dir);
  std::string index = kIndex;
  index.replace(index.find("\"lm_head.weight\""), 16, "\"lm_head.bias\"");
  dir.write("model.safetensors.index.json", index);
  auto ckpt = Checkpoint::open(dir.path());
  ASSERT_FALSE(ckpt.has_value());
  expect_error(ckpt.status(), ErrorCode::kInvalidFormat,
               {"model.safetensors.index.json", "'lm_head.bias'",
                "'model-00002-of-00002.safetensors'", "does not contain"});
}

TEST(Checkpoint, BadIndexFiles) {
  struct Case {
    std::string text;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"{not json", "not valid JSON"},
      {R"({"metadata": {}})", "weight_map"},
      {R"({"weight_map": []})", "weight_map"},
      {R"({"weight_map": {}})", "empty"},
      {R"({"weight_map": {"w": 3}})", "'w'"},
      {R"({"weight_map": {"w": "../outside.safetensors"}})", "inside the model folder"},
      {R"({"weight_map": {"w": "/etc/passwd"}})", "inside the model folder"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    TempDir dir("vllm_ckpt");
    const auto index = dir.write("model.safetensors.index.json", c.text);
    auto ckpt = Checkpoint::open(dir.path());
    ASSERT_FALSE(ckpt.has_value());
    expect_error(ckpt.status(), ErrorCode::kInvalidFormat, {index.string(), c.needle});
  }
}

TEST(Checkpoint, BadShardNamesTheShard) {
  TempDir dir("vllm_ckpt");
  const auto bad = dir.write("model.safetensors", std::string("\x02\0\0\0\0\0\0\0[]", 10));
  auto ckpt = Checkpoint::open(dir.path());
  ASSERT_FALSE(ckpt.has_value());
  expect_error(ckpt.status(), ErrorCode::kInvalidFormat, {bad.string(), "array"});
}

TEST(Checkpoint, NoWeightsOrNoFolder) {
  TempDir dir("vllm_ckpt");
  dir.write("config.json", "{}");
  auto none = Checkpoint::open(dir.path());
  ASSERT_FALSE(none.has_value());
  expect_error(none.status(), ErrorCode::kNotFound, {dir.path().string(), "no safetensors"});

  auto absent = Checkpoint::open(dir / "does-not-exist");
  ASSERT_FALSE(absent.has_value());
  expect_error(absent.status(), ErrorCode::kNotFound, {"does-not-exist"});
}

}  // namespace
}  // namespace test_checkpoint
}  // namespace vllm
