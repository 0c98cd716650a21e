// Maps config.json "architectures" names to model implementations.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/weights.h"

namespace vllm {

using ModelFactory = Expected<std::unique_ptr<Model>> (*)(const ModelConfig&, WeightSource&,
                                                          const LoadOptions&);

class ModelRegistry {
 public:
  void add(const std::string& architecture, ModelFactory factory) {
    factories_[architecture] = factory;
  }
  ModelFactory find(const std::string& architecture) const {
    auto it = factories_.find(architecture);
    return it == factories_.end() ? nullptr : it->second;
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, factory] : factories_) out.push_back(name);
    return out;
  }

 private:
  std::map<std::string, ModelFactory> factories_;
};

const ModelRegistry& model_registry();

// Builds the model config.architectures names from any weight source (checkpoint or dummy).
Expected<std::unique_ptr<Model>> create_model(const ModelConfig& config, WeightSource& weights,
                                              const LoadOptions& options);

// One per model family file.
void register_llama_models(ModelRegistry& registry);
void register_qwen3_5_models(ModelRegistry& registry);  // Qwen3.5 / 3.6, dense and MoE
void register_qwen3_next_models(ModelRegistry& registry);

}  // namespace vllm
