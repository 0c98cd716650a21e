// random_checkpoint: writes a Hugging Face folder with random bf16 weights for a config.json,
// so that a model we have no weights for (configs/Qwen3-0.6B) can be converted to GGUF and
// timed in both engines on identical weights.
//
//   random_checkpoint CONFIG_DIR OUT_DIR [--seed N]
//
// The tensors are exactly those our model loader asks for (names and shapes), filled the way
// --load-format dummy fills them (uniform in [-1e-3, 1e-3) from a seeded generator).
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "loader/hf_config.h"
#include "loader/safetensors_writer.h"
#include "model/models/registry.h"
#include "model/weights.h"

namespace vllm::peers {
namespace {

// Hands out the inner source's tensors and keeps each one under its checkpoint name.
class RecordingWeights final : public WeightSource {
 public:
  explicit RecordingWeights(WeightSource& inner) : inner_(inner) {}
  Expected<Tensor> get(const std::string& name, const Shape& shape) override {
    for (const auto& [seen, t] : recorded_) {
      if (seen == name) return t;  // tied weights are asked for twice
    }
    VLLM_ASSIGN_OR_RETURN(Tensor t, inner_.get(name, shape));
    recorded_.emplace_back(name, t);
    return t;
  }
  bool contains(const std::string& name) const override { return inner_.contains(name); }
  const NamedTensors& recorded() const { return recorded_; }

 private:
  WeightSource& inner_;
  NamedTensors recorded_;
};

Status run(const std::filesystem::path& config_dir, const std::filesystem::path& out_dir,
           uint64_t seed) {
  VLLM_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(config_dir));
  DummyWeights dummy(DType::kBF16, Device::cpu(), seed);
  RecordingWeights weights(dummy);
  LoadOptions options;
  options.max_model_len = 256;  // the caches are not built here; keeps the rope table small
  VLLM_ASSIGN_OR_RETURN(auto model, create_model(config, weights, options));
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec)
    return make_error(ErrorCode::kIoError, "cannot create {}: {}", out_dir.string(), ec.message());
  std::filesystem::copy_file(config_dir / "config.json", out_dir / "config.json",
                             std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) return make_error(ErrorCode::kIoError, "cannot copy config.json: {}", ec.message());
  return write_safetensors(out_dir / "model.safetensors", weights.recorded(), {{"format", "pt"}});
}

}  // namespace
}  // namespace vllm::peers

int main(int argc, char** argv) {
  uint64_t seed = 0;
  if (argc == 5 && std::strcmp(argv[3], "--seed") == 0) {
    seed = std::strtoull(argv[4], nullptr, 10);
  } else if (argc != 3) {
    std::fprintf(stderr, "usage: random_checkpoint CONFIG_DIR OUT_DIR [--seed N]\n");
    return 2;
  }
  vllm::Status status = vllm::peers::run(argv[1], argv[2], seed);
  if (!status.is_ok()) {
    std::fprintf(stderr, "random_checkpoint: %s\n", status.to_string().c_str());
    return 1;
  }
  std::printf("wrote %s\n", argv[2]);
  return 0;
}
