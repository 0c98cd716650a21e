// GrammarCompiler: StructuredOutputsParams -> CompiledGrammar for one vocabulary, with a
// cache of compiled grammars keyed by their text and options.
//
// Thread-safe: the server's request threads compile (so errors reach the client as a 400
// before anything is queued) while the engine thread looks the same grammar up again. The
// cache is least-recently-used, bounded in bytes; a grammar being compiled by one thread is
// waited for, not compiled twice. Errors are not cached.
#pragma once

#include <cstdint>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/status.h"
#include "structured/compiled_grammar.h"
#include "structured/structured_outputs.h"
#include "structured/vocab.h"

namespace vllm::structured {

struct GrammarCompilerOptions {
  CompileOptions compile;
  size_t cache_bytes = size_t{1} << 30;  // 1 GiB of compiled grammars
};

struct GrammarCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  size_t entries = 0;
  size_t bytes = 0;
};

class GrammarCompiler {
 public:
  explicit GrammarCompiler(std::shared_ptr<const TokenVocabulary> vocab,
                           GrammarCompilerOptions options = GrammarCompilerOptions());

  using Result = Expected<std::shared_ptr<const CompiledGrammar>>;
  Result compile(const StructuredOutputsParams& params);

  const TokenVocabulary& vocab() const { return *vocab_; }
  std::shared_ptr<const TokenVocabulary> vocab_ptr() const { return vocab_; }
  GrammarCacheStats stats() const;

 private:
  struct Entry {
    std::shared_ptr<const CompiledGrammar> grammar;
    size_t bytes = 0;
    std::list<std::string>::iterator lru;
  };

  Result compile_uncached(const StructuredOutputsParams& params) const;
  void insert(const std::string& key, std::shared_ptr<const CompiledGrammar> grammar);

  std::shared_ptr<const TokenVocabulary> vocab_;
  GrammarCompilerOptions options_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Entry> cache_;
  std::list<std::string> lru_;  // most recent first
  std::unordered_map<std::string, std::shared_future<Result>> in_flight_;
  size_t bytes_ = 0;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
};

}  // namespace vllm::structured
