// The C ABI of include/vllm.h over EngineClient. Every entry point catches everything: no
// exception crosses into C.
#include "vllm.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "engine/engine_client.h"
#include "loader/hf_config.h"

namespace {

thread_local std::string g_last_error;

vllm_status fail(vllm_status status, std::string message) {
  g_last_error = std::move(message);
  return status;
}

vllm_status from_status(const vllm::Status& s) {
  switch (s.code()) {
    case vllm::ErrorCode::kOk: return VLLM_OK;
    case vllm::ErrorCode::kInvalidArgument:
    case vllm::ErrorCode::kOutOfRange: return fail(VLLM_INVALID_ARGUMENT, s.to_string());
    case vllm::ErrorCode::kNotFound: return fail(VLLM_NOT_FOUND, s.to_string());
    default: return fail(VLLM_ERROR, s.to_string());
  }
}

struct Pending {
  std::mutex mutex;  // polls of one request from several threads take turns
  std::shared_ptr<vllm::engine::OutputStream> stream;
  std::deque<int32_t> tokens;  // received, not yet handed out
  const char* finish_reason = nullptr;
};

}  // namespace

struct vllm_engine {
  std::unique_ptr<vllm::engine::EngineClient> client;
  std::mutex mutex;
  std::unordered_map<std::string, std::shared_ptr<Pending>> requests;
};

extern "C" {

void vllm_engine_options_init(vllm_engine_options* options) {
  if (options == nullptr) return;
  *options = vllm_engine_options{};
  options->max_num_seqs = 256;
  options->max_num_batched_tokens = 8192;
  options->block_size = 16;
  options->kv_cache_memory_bytes = int64_t{1} << 30;
  options->enable_prefix_caching = 1;
  options->load_format = "auto";
}

vllm_status vllm_engine_create(const char* model_dir, const vllm_engine_options* options,
                               vllm_engine** engine) {
  try {
    if (model_dir == nullptr || engine == nullptr) {
      return fail(VLLM_INVALID_ARGUMENT, "model_dir and engine must not be NULL");
    }
    vllm_engine_options opts;
    vllm_engine_options_init(&opts);
    if (options != nullptr) opts = *options;
    vllm::LoadOptions load;
    load.max_model_len = opts.max_model_len;
    load.load_format = opts.load_format != nullptr ? opts.load_format : "auto";
    auto model = vllm::load_model(model_dir, load);
    if (!model) return from_status(model.status());
    auto generation = vllm::load_generation_config(model_dir);
    if (!generation) return from_status(generation.status());
    std::vector<int32_t> eos;
    for (int64_t id : (*model)->config().eos_token_ids) eos.push_back(static_cast<int32_t>(id));
    for (int64_t id : generation->eos_token_ids) eos.push_back(static_cast<int32_t>(id));

    vllm::engine::EngineConfig config;
    config.scheduler.max_num_seqs = opts.max_num_seqs;
    config.scheduler.max_num_batched_tokens = opts.max_num_batched_tokens;
    config.scheduler.max_model_len = opts.max_model_len;
    config.block_size = opts.block_size;
    if (opts.num_gpu_blocks_override > 0) config.num_gpu_blocks_override = opts.num_gpu_blocks_override;
    config.kv_cache_memory_bytes = opts.kv_cache_memory_bytes;
    config.enable_prefix_caching = opts.enable_prefix_caching != 0;
    config.seed = opts.seed;
    if (config.scheduler.max_num_seqs <= 0 || config.scheduler.max_num_batched_tokens <= 0 ||
        config.block_size <= 0 || config.kv_cache_memory_bytes <= 0) {
      return fail(VLLM_INVALID_ARGUMENT,
                  "max_num_seqs, max_num_batched_tokens, block_size and kv_cache_memory_bytes "
                  "must be positive");
    }
    auto core = vllm::engine::EngineCore::create(std::move(*model), config, std::move(eos));
    if (!core) return from_status(core.status());
    auto* created = new vllm_engine();
    created->client = std::make_unique<vllm::engine::EngineClient>(std::move(*core));
    *engine = created;
    return VLLM_OK;
  } catch (const std::exception& e) {
    return fail(VLLM_ERROR, e.what());
  } catch (...) {
    return fail(VLLM_ERROR, "unknown error");
  }
}

void vllm_engine_destroy(vllm_engine* engine) {
  try {
    delete engine;
  } catch (...) {
  }
}

vllm_status vllm_submit(vllm_engine* engine, const char* request_id, const int32_t* prompt,
                        size_t prompt_len, const char* sampling_json) {
  try {
    if (engine == nullptr || request_id == nullptr || (prompt == nullptr && prompt_len > 0)) {
      return fail(VLLM_INVALID_ARGUMENT, "engine, request_id and prompt must not be NULL");
    }
    nlohmann::json request = nlohmann::json::object();
    if (sampling_json != nullptr) {
      request = nlohmann::json::parse(sampling_json, nullptr, /*allow_exceptions=*/false);
      if (request.is_discarded() || !request.is_object()) {
        return fail(VLLM_INVALID_ARGUMENT, "sampling_json is not a JSON object");
      }
    }
    auto params = vllm::SamplingParams::from_json(request);
    if (!params) return from_status(params.status());
    std::lock_guard<std::mutex> lock(engine->mutex);
    if (engine->requests.count(request_id) != 0) {
      return fail(VLLM_INVALID_ARGUMENT, std::string("request id ") + request_id + " is in use");
    }
    auto stream = engine->client->add_request(request_id,
                                              std::vector<int32_t>(prompt, prompt + prompt_len),
                                              std::move(*params));
    if (!stream) return from_status(stream.status());
    auto pending = std::make_shared<Pending>();
    pending->stream = *stream;
    engine->requests.emplace(request_id, std::move(pending));
    return VLLM_OK;
  } catch (const std::exception& e) {
    return fail(VLLM_ERROR, e.what());
  } catch (...) {
    return fail(VLLM_ERROR, "unknown error");
  }
}

vllm_status vllm_poll(vllm_engine* engine, const char* request_id, int32_t timeout_ms,
                      int32_t* tokens, size_t capacity, size_t* num_tokens, int* finished,
                      const char** finish_reason) {
  try {
    if (engine == nullptr || request_id == nullptr || num_tokens == nullptr ||
        finished == nullptr || (tokens == nullptr && capacity > 0)) {
      return fail(VLLM_INVALID_ARGUMENT, "engine, request_id, num_tokens and finished must not "
                                         "be NULL (tokens may be NULL only with capacity 0)");
    }
    *num_tokens = 0;
    *finished = 0;
    std::shared_ptr<Pending> pending;
    {
      std::lock_guard<std::mutex> lock(engine->mutex);
      auto it = engine->requests.find(request_id);
      if (it == engine->requests.end()) {
        return fail(VLLM_NOT_FOUND, std::string("no live request ") + request_id);
      }
      pending = it->second;
    }
    std::lock_guard<std::mutex> poll_lock(pending->mutex);
    auto take = [&](const vllm::engine::EngineCoreOutput& out) {
      pending->tokens.insert(pending->tokens.end(), out.new_token_ids.begin(),
                             out.new_token_ids.end());
      if (out.finished()) {
        pending->finish_reason = vllm::engine::finish_reason(out.status).data();
      }
    };
    if (pending->tokens.empty() && pending->finish_reason == nullptr) {
      std::optional<vllm::engine::EngineCoreOutput> out;
      if (timeout_ms < 0) {
        out = pending->stream->next();
      } else {
        out = pending->stream->next(std::chrono::milliseconds(timeout_ms));
      }
      if (out) take(*out);
    }
    while (auto more = pending->stream->next(std::chrono::milliseconds(0))) take(*more);
    if (pending->tokens.empty() && pending->finish_reason == nullptr) return VLLM_TIMEOUT;
    while (*num_tokens < capacity && !pending->tokens.empty()) {
      tokens[(*num_tokens)++] = pending->tokens.front();
      pending->tokens.pop_front();
    }
    if (pending->tokens.empty() && pending->finish_reason != nullptr) {
      *finished = 1;
      if (finish_reason != nullptr) *finish_reason = pending->finish_reason;
      std::lock_guard<std::mutex> lock(engine->mutex);
      engine->requests.erase(request_id);
    }
    return VLLM_OK;
  } catch (const std::exception& e) {
    return fail(VLLM_ERROR, e.what());
  } catch (...) {
    return fail(VLLM_ERROR, "unknown error");
  }
}

vllm_status vllm_abort(vllm_engine* engine, const char* request_id) {
  try {
    if (engine == nullptr || request_id == nullptr) {
      return fail(VLLM_INVALID_ARGUMENT, "engine and request_id must not be NULL");
    }
    engine->client->abort_request(request_id);
    return VLLM_OK;
  } catch (const std::exception& e) {
    return fail(VLLM_ERROR, e.what());
  } catch (...) {
    return fail(VLLM_ERROR, "unknown error");
  }
}

const char* vllm_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"
