// Model folder -> running EngineCore; see engine_args.h.
#include "engine/engine_args.h"

#include <filesystem>

#include "model/model.h"
#include "structured/vocab.h"

namespace vllm::engine {

Expected<LoadedEngine> build_engine(const EngineArgs& args) {
  LoadOptions load;
  load.max_model_len = args.max_model_len;
  load.load_format = args.load_format;
  auto model = load_model(args.model, load);
  if (!model) return model.status().with_context("cannot load model");
  LoadedEngine out;
  VLLM_ASSIGN_OR_RETURN(out.generation, load_generation_config(args.model));
  const std::filesystem::path tokenizer_file = std::filesystem::path(args.model) / "tokenizer.json";
  if (std::filesystem::exists(tokenizer_file)) {
    VLLM_ASSIGN_OR_RETURN(auto tokenizer, Tokenizer::from_file(tokenizer_file));
    out.tokenizer = std::make_unique<Tokenizer>(std::move(tokenizer));
  }
  std::vector<int32_t> eos;
  for (int64_t id : (*model)->config().eos_token_ids) eos.push_back(static_cast<int32_t>(id));
  for (int64_t id : out.generation.eos_token_ids) eos.push_back(static_cast<int32_t>(id));
  EngineConfig config = args.engine;
  config.scheduler.max_model_len = args.max_model_len;
  config.num_gpu_blocks_override = args.num_gpu_blocks_override;
  config.enable_prefix_caching = args.enable_prefix_caching;
  if (args.seed) config.seed = static_cast<uint64_t>(*args.seed);
  // Structured outputs work on the tokenizer's token bytes; the EOS ids end a grammar.
  std::shared_ptr<const structured::TokenVocabulary> vocab;
  if (out.tokenizer) {
    auto v = structured::TokenVocabulary::from_tokenizer(
        *out.tokenizer, static_cast<int32_t>((*model)->config().vocab_size), eos);
    if (!v) return v.status().with_context("cannot read the tokenizer's vocabulary");
    vocab = std::move(*v);
  }
  auto core = EngineCore::create(std::move(*model), config, std::move(eos), std::move(vocab));
  if (!core) return core.status().with_context("cannot start the engine");
  out.core = std::move(*core);
  return out;
}

}  // namespace vllm::engine
