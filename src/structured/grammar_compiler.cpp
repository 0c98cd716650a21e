// GrammarCompiler and its cache (grammar_compiler.h).
#include "structured/grammar_compiler.h"

#include <utility>

namespace vllm::structured {

GrammarCompiler::GrammarCompiler(std::shared_ptr<const TokenVocabulary> vocab,
                                 GrammarCompilerOptions options)
    : vocab_(std::move(vocab)), options_(std::move(options)) {}

GrammarCompiler::Result GrammarCompiler::compile_uncached(
    const StructuredOutputsParams& params) const {
  VLLM_ASSIGN_OR_RETURN(Grammar grammar, build_grammar(params));
  auto compiled = CompiledGrammar::compile(grammar, vocab_, options_.compile);
  if (!compiled) return compiled.status().with_context(params.kind_name());
  return compiled;
}

GrammarCompiler::Result GrammarCompiler::compile(const StructuredOutputsParams& params) {
  const std::string key = params.cache_key();
  std::promise<Result> promise;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      ++hits_;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return it->second.grammar;
    }
    auto pending = in_flight_.find(key);
    if (pending != in_flight_.end()) {
      std::shared_future<Result> wait = pending->second;
      ++hits_;
      lock.unlock();
      return wait.get();
    }
    ++misses_;
    in_flight_.emplace(key, promise.get_future().share());
  }
  Result result = compile_uncached(params);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (result) insert(key, *result);
    in_flight_.erase(key);
  }
  promise.set_value(result);
  return result;
}

void GrammarCompiler::insert(const std::string& key,
                             std::shared_ptr<const CompiledGrammar> grammar) {
  const size_t bytes = grammar->memory_bytes() + key.size();
  if (bytes > options_.cache_bytes) return;  // too large to keep
  lru_.push_front(key);
  cache_[key] = Entry{std::move(grammar), bytes, lru_.begin()};
  bytes_ += bytes;
  while (bytes_ > options_.cache_bytes && !lru_.empty()) {
    const std::string& victim = lru_.back();
    auto it = cache_.find(victim);
    bytes_ -= it->second.bytes;
    cache_.erase(it);
    lru_.pop_back();
  }
}

GrammarCacheStats GrammarCompiler::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return GrammarCacheStats{hits_, misses_, cache_.size(), bytes_};
}

}  // namespace vllm::structured
