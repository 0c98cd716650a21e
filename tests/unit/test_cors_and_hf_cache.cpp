// CORS as vLLM configures Starlette's CORSMiddleware (preflight answers, simple-response
// headers, the JSON-list flags), and Hugging Face ids found in a local Hugging Face cache.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "cli/hf_cache.h"
#include "server/cors.h"
#include "temp_dir.h"

namespace vllm {
namespace test_cors_and_hf_cache {
namespace {

using server::CorsOptions;
using server::CorsPolicy;

std::string header(const server::HeaderList& headers, const std::string& name) {
  for (const auto& [k, v] : headers) {
    if (k == name) return v;
  }
  return "<none>";
}

TEST(Cors, DefaultsAllowEverything) {
  CorsPolicy cors{CorsOptions{}};
  const std::string requested = "X-Custom, Content-Type";
  auto p = cors.preflight("http://a.example", "DELETE", &requested);
  EXPECT_EQ(p.status, 200);
  EXPECT_EQ(p.body, "OK");
  EXPECT_EQ(header(p.headers, "Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(header(p.headers, "Access-Control-Allow-Methods"),
            "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT");
  EXPECT_EQ(header(p.headers, "Access-Control-Allow-Headers"), requested);  // mirrored
  EXPECT_EQ(header(p.headers, "Vary"), "<none>");
  auto simple = cors.simple_headers("http://a.example", false);
  EXPECT_EQ(header(simple, "Access-Control-Allow-Origin"), "*");
  // With a cookie the origin is named, never "*".
  auto cookie = cors.simple_headers("http://a.example", true);
  EXPECT_EQ(header(cookie, "Access-Control-Allow-Origin"), "http://a.example");
  EXPECT_EQ(header(cookie, "Vary"), "Origin");
}

TEST(Cors, ListedOriginsMethodsHeaders) {
  CorsOptions options;
  options.allowed_origins = {"http://a.example"};
  options.allowed_methods = {"POST"};
  options.allowed_headers = {"Authorization"};
  options.allow_credentials = true;
  CorsPolicy cors(options);
  const std::string ok_headers = "authorization, content-type";
  auto ok = cors.preflight("http://a.example", "POST", &ok_headers);
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(header(ok.headers, "Access-Control-Allow-Origin"), "http://a.example");
  EXPECT_EQ(header(ok.headers, "Vary"), "Origin");
  EXPECT_EQ(header(ok.headers, "Access-Control-Allow-Credentials"), "true");
  EXPECT_EQ(header(ok.headers, "Access-Control-Allow-Headers"),
            "Accept, Accept-Language, Authorization, Content-Language, Content-Type");
  const std::string bad_headers = "x-other";
  auto bad = cors.preflight("http://b.example", "GET", &bad_headers);
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.body, "Disallowed CORS origin, method, headers");
  EXPECT_EQ(header(bad.headers, "Access-Control-Allow-Origin"), "<none>");
  auto simple = cors.simple_headers("http://a.example", false);
  EXPECT_EQ(header(simple, "Access-Control-Allow-Origin"), "http://a.example");
  EXPECT_EQ(header(simple, "Access-Control-Allow-Credentials"), "true");
  auto other = cors.simple_headers("http://b.example", false);
  EXPECT_EQ(header(other, "Access-Control-Allow-Origin"), "<none>");
}

TEST(Cors, FlagValuesAreJsonLists) {
  auto ok = server::parse_cors_list("--allowed-origins", R"(["http://a", "http://b"])");
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(*ok, (std::vector<std::string>{"http://a", "http://b"}));
  auto not_list = server::parse_cors_list("--allowed-origins", "http://a");
  ASSERT_FALSE(not_list.has_value());
  EXPECT_NE(not_list.status().message().find("--allowed-origins takes a JSON list"),
            std::string::npos);
  EXPECT_FALSE(server::parse_cors_list("--allowed-methods", "[1]").has_value());
}

TEST(HfCache, RepoIdShapes) {
  EXPECT_TRUE(cli::is_hf_repo_id("Qwen/Qwen3.5-4B"));
  EXPECT_TRUE(cli::is_hf_repo_id("gpt2"));
  EXPECT_TRUE(cli::is_hf_repo_id("meta-llama/Llama-3.1-8B-Instruct"));
  EXPECT_FALSE(cli::is_hf_repo_id("/abs/path"));
  EXPECT_FALSE(cli::is_hf_repo_id("a/b/c"));
  EXPECT_FALSE(cli::is_hf_repo_id("./model"));
  EXPECT_FALSE(cli::is_hf_repo_id("org/na--me"));
  EXPECT_FALSE(cli::is_hf_repo_id("org/-name"));
  EXPECT_FALSE(cli::is_hf_repo_id(""));
}

TEST(HfCache, FindsSnapshotsByRefOrCommit) {
  testing::TempDir cache("vllm_hf_cache");
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  const auto repo = cache.path() / "models--Org--Tiny-Model";
  std::filesystem::create_directories(repo / "refs");
  std::filesystem::create_directories(repo / "snapshots" / commit);
  testing::TempDir unused("vllm_hf_unused");
  cache.write("models--Org--Tiny-Model/refs/main", commit + "\n");

  auto found = cli::find_hf_snapshot("Org/Tiny-Model", "main", cache.path().string());
  ASSERT_TRUE(found.has_value()) << found.status().message();
  EXPECT_EQ(*found, repo / "snapshots" / commit);
  auto by_commit = cli::find_hf_snapshot("Org/Tiny-Model", commit, cache.path().string());
  ASSERT_TRUE(by_commit.has_value());
  EXPECT_EQ(*by_commit, repo / "snapshots" / commit);

  auto missing = cli::find_hf_snapshot("Org/Other", "main", cache.path().string());
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(
      missing.status().message().find((cache.path() / "models--Org--Other/refs/main").string()),
      std::string::npos)
      << missing.status().message();
  auto no_branch = cli::find_hf_snapshot("Org/Tiny-Model", "dev", cache.path().string());
  EXPECT_FALSE(no_branch.has_value());

  // The cache folder comes from the environment when no --download-dir is given.
  const char* saved = std::getenv("HF_HUB_CACHE");
  const std::string saved_value = saved ? saved : "";
  setenv("HF_HUB_CACHE", cache.path().c_str(), 1);
  EXPECT_EQ(cli::hf_hub_cache_dir(), cache.path());
  auto from_env = cli::find_hf_snapshot("Org/Tiny-Model");
  EXPECT_TRUE(from_env.has_value());
  unsetenv("HF_HUB_CACHE");
  const char* saved_home = std::getenv("HF_HOME");
  const std::string saved_home_value = saved_home ? saved_home : "";
  setenv("HF_HOME", unused.path().c_str(), 1);
  EXPECT_EQ(cli::hf_hub_cache_dir(), unused.path() / "hub");
  if (saved_home)
    setenv("HF_HOME", saved_home_value.c_str(), 1);
  else
    unsetenv("HF_HOME");
  if (saved) setenv("HF_HUB_CACHE", saved_value.c_str(), 1);
}

}  // namespace
}  // namespace test_cors_and_hf_cache
}  // namespace vllm
