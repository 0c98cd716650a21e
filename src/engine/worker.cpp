#include "engine/worker.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "base/logging.h"
#include "engine/engine_args.h"
#include "engine/forward_step.h"
#include "engine/step_message.h"
#include "model/model.h"
#include "parallel/shm_communicator.h"
#include "parallel/shm_group.h"
#include "parallel/socket.h"
#include "parallel/step_channel.h"

namespace vllm::engine {
namespace {

using namespace std::chrono_literals;

constexpr size_t kMaxControlFrame = size_t{1} << 20;
constexpr auto kConnectTimeout = 60s;

struct Spec {
  int rank = 0, world_size = 0;
  std::string group, step_channel, model, load_format, device, dtype;
  int64_t max_model_len = 0;
  bool enable_expert_parallel = false;
  std::string quantization;
  std::string mamba_cache_dtype, mamba_ssm_cache_dtype;
  std::string kv_cache_dtype;
};

Expected<Spec> parse_spec(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return make_error(ErrorCode::kInvalidFormat, "rank 0 sent no spec");
  Spec s;
  try {
    s.rank = j.at("rank").get<int>();
    s.world_size = j.at("world_size").get<int>();
    s.group = j.at("group").get<std::string>();
    s.step_channel = j.at("step_channel").get<std::string>();
    s.model = j.at("model").get<std::string>();
    s.load_format = j.at("load_format").get<std::string>();
    s.device = j.at("device").get<std::string>();
    s.dtype = j.at("dtype").get<std::string>();
    s.max_model_len = j.at("max_model_len").get<int64_t>();
    s.enable_expert_parallel = j.at("enable_expert_parallel").get<bool>();
    s.quantization = j.at("quantization").get<std::string>();
    s.mamba_cache_dtype = j.at("mamba_cache_dtype").get<std::string>();
    s.mamba_ssm_cache_dtype = j.at("mamba_ssm_cache_dtype").get<std::string>();
    s.kv_cache_dtype = j.at("kv_cache_dtype").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    return make_error(ErrorCode::kInvalidFormat, "rank 0's spec: {}", e.what());
  }
  return s;
}

class Worker {
 public:
  explicit Worker(const WorkerOptions& options) : options_(options) {}

  int run() {
    Status s = serve();
    if (s.is_ok()) return 0;
    VLLM_LOG_ERROR("{}", s.message());
    // Rank 0 learns why; the group's collectives on every rank stop waiting.
    if (socket_.valid()) {
      (void)socket_.send_frame(nlohmann::json({{"error", s.message()}}).dump());
    }
    if (comm_)
      comm_->abort(fmt::format("tensor-parallel worker rank {}: {}", options_.rank, s.message()));
    return 1;
  }

  ~Worker() {
    stop_watch_ = true;
    if (watch_.joinable()) watch_.join();
  }

 private:
  Status serve() {
    VLLM_ASSIGN_OR_RETURN(socket_,
                          parallel::Socket::connect(options_.master_addr, options_.master_port,
                                                    parallel::deadline_in(kConnectTimeout)));
    VLLM_RETURN_IF_ERROR(socket_.send_frame(
        nlohmann::json({{"rank", options_.rank}, {"pid", static_cast<int>(getpid())}}).dump()));
    VLLM_ASSIGN_OR_RETURN(
        std::string text,
        socket_.recv_frame(kMaxControlFrame, parallel::deadline_in(kConnectTimeout)));
    VLLM_ASSIGN_OR_RETURN(Spec spec, parse_spec(text));
    if (spec.rank != options_.rank) {
      return make_error(ErrorCode::kInvalidArgument, "rank 0 addressed rank {} as rank {}",
                        options_.rank, spec.rank);
    }
    VLLM_ASSIGN_OR_RETURN(auto group, parallel::ShmGroup::open(spec.group, spec.rank));
    comm_ = std::make_shared<parallel::ShmCommunicator>(group);
    watch_ = std::thread([this] { watch_rank0(); });
    std::unique_ptr<parallel::StepChannel> channel;
    if (spec.step_channel == "tcp") {
      channel = std::make_unique<parallel::TcpStepChannel>(std::vector<parallel::Socket*>{&socket_},
                                                           [this] { return comm_->health(); });
    } else {
      channel = std::make_unique<parallel::ShmStepChannel>(group);
    }

    LoadOptions load;
    load.max_model_len = spec.max_model_len;
    load.load_format = spec.load_format;
    VLLM_ASSIGN_OR_RETURN(auto placement, resolve_device(spec.device, spec.dtype));
    load.device = placement.first;
    load.dtype = placement.second;
    load.comm = comm_;
    load.enable_expert_parallel = spec.enable_expert_parallel;
    load.quantization = spec.quantization;
    load.mamba_cache_dtype = spec.mamba_cache_dtype;
    load.mamba_ssm_cache_dtype = spec.mamba_ssm_cache_dtype;
    load.kv_cache_dtype = spec.kv_cache_dtype;
    auto model = load_model(spec.model, load);
    if (!model) return model.status().with_context("cannot load model");
    VLLM_RETURN_IF_ERROR(socket_.send_frame(nlohmann::json({{"ready", true}}).dump()));
    VLLM_LOG_DEBUG("Loaded rank {} of {}", spec.rank, spec.world_size);

    // Test hook: VLLM_TEST_TP_WORKER_FAIL_AFTER_STEPS=N makes this worker's N-th step fail,
    // as a model error would (the tests check that rank 0 reports it and does not hang).
    int64_t fail_at_step = 0, steps = 0;
    if (const char* fail = std::getenv("VLLM_TEST_TP_WORKER_FAIL_AFTER_STEPS")) {
      fail_at_step = std::strtoll(fail, nullptr, 10);
    }
    std::optional<ModelCache> cache;
    while (true) {
      VLLM_ASSIGN_OR_RETURN(std::string bytes, channel->receive());
      VLLM_ASSIGN_OR_RETURN(StepMessage message, decode_step_message(bytes));
      switch (message.kind) {
        case StepKind::kInitCache: {
          cache.reset();
          auto made = (*model)->create_cache(message.cache);
          if (!made) return made.status().with_context("cannot allocate the caches");
          cache = std::move(*made);
          break;
        }
        case StepKind::kForward: {
          if (!cache) return make_error(ErrorCode::kInternal, "a step came before the caches");
          if (++steps == fail_at_step) {
            return make_error(ErrorCode::kInternal, "worker step failed on purpose (test hook)");
          }
          auto logits = run_forward_step(**model, *cache, message.forward, nullptr);
          if (!logits) return logits.status().with_context("step");
          break;
        }
        case StepKind::kShutdown:
          return Status::ok();
      }
    }
  }

  // Rank 0 gone (its end of the connection closed): abort the group and exit at once.
  void watch_rank0() {
    while (!stop_watch_) {
      if (socket_.peer_closed()) {
        const std::string why = "rank 0 closed its connection (it exited)";
        VLLM_LOG_ERROR("{}; exiting", why);
        comm_->abort(fmt::format("tensor-parallel worker rank {}: {}", options_.rank, why));
        std::_Exit(1);
      }
      std::this_thread::sleep_for(50ms);
    }
  }

  WorkerOptions options_;
  parallel::Socket socket_;
  std::shared_ptr<parallel::Communicator> comm_;
  std::thread watch_;
  std::atomic<bool> stop_watch_{false};
};

}  // namespace

int run_worker(const WorkerOptions& options) {
  log::set_line_prefix(fmt::format("(Worker rank={} pid={}) ", options.rank, getpid()));
  Worker worker(options);
  return worker.run();
}

}  // namespace vllm::engine
