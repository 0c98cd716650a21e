#include "engine/worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/logging.h"
#include "parallel/shm_communicator.h"
#include "parallel/shm_group.h"

extern char** environ;

namespace vllm::engine {
namespace {

using namespace std::chrono_literals;
using parallel::Socket;

constexpr size_t kMaxControlFrame = size_t{1} << 20;
// How long a worker has to exit after the shutdown message, or after an abort, before it is
// killed.
constexpr auto kShutdownGrace = 10s;
constexpr auto kAbortGrace = 2s;

std::string self_executable() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return {};
  path[n] = '\0';
  return path;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status),
                       strsignal(WTERMSIG(status)));
  }
  return "stopped";
}

std::string unique_group_name() {
  static std::atomic<int> counter{0};
  return fmt::format("/vllm-tp-{}-{}", getpid(), counter++);
}

// This environment, plus the CPU thread count each rank gets when none was set: the host's
// cores shared among the ranks (VLLM_CPU_THREADS, base/thread_pool.h).
std::vector<std::string> worker_environment(int world_size) {
  std::vector<std::string> env;
  bool threads_set = false;
  for (char** e = environ; *e != nullptr; ++e) {
    env.emplace_back(*e);
    threads_set |= std::strncmp(*e, "VLLM_CPU_THREADS=", 17) == 0;
  }
  if (!threads_set) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    env.push_back(fmt::format("VLLM_CPU_THREADS={}", std::max(1, cores / world_size)));
  }
  return env;
}

Expected<pid_t> spawn(const std::string& exe, const std::vector<std::string>& args,
                      const std::vector<std::string>& env) {
  std::vector<char*> argv, envp;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // A process group of its own: the terminal's Ctrl-C goes to rank 0 only.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, exe.c_str(), nullptr, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return make_error(ErrorCode::kIoError, "cannot start '{}': {}", exe, std::strerror(rc));
  }
  return pid;
}

}  // namespace

Expected<std::unique_ptr<WorkerGroup>> WorkerGroup::start(const ParallelConfig& config,
                                                          const WorkerLoadSpec& load) {
  const int world = config.tensor_parallel_size;
  if (config.nnodes != 1 || config.node_rank != 0) {
    return make_error(ErrorCode::kUnsupported,
                      "--nnodes {} / --node-rank {}: ranks on several hosts need the NCCL "
                      "communicator (CUDA builds); the CPU backend's shared-memory all-reduce "
                      "runs every rank on one host",
                      config.nnodes, config.node_rank);
  }
  if (world < 2) {
    return make_error(ErrorCode::kInvalidArgument,
                      "a worker group needs --tensor-parallel-size 2 or more, not {}", world);
  }
  std::string channel = config.step_channel;
  if (channel.empty()) {
    const char* env = std::getenv("VLLM_TP_STEP_CHANNEL");
    channel = env != nullptr && *env != '\0' ? env : "shm";
  }
  if (channel != "shm" && channel != "tcp") {
    return make_error(ErrorCode::kInvalidArgument,
                      "step channel '{}' is not one of shm, tcp (VLLM_TP_STEP_CHANNEL)", channel);
  }
  std::unique_ptr<WorkerGroup> g(new WorkerGroup());
  g->world_size_ = world;
  g->startup_timeout_s_ = config.startup_timeout_s;
  parallel::ShmGroupOptions shm_options;
  shm_options.world_size = world;
  VLLM_ASSIGN_OR_RETURN(g->shm_, parallel::ShmGroup::create(unique_group_name(), shm_options));
  g->comm_ = std::make_shared<parallel::ShmCommunicator>(g->shm_);
  if (pipe2(g->wake_pipe_, O_CLOEXEC) != 0) {
    return make_error(ErrorCode::kIoError, "pipe: {}", std::strerror(errno));
  }
  auto listener = parallel::Listener::listen(config.master_addr, config.master_port.value_or(0));
  if (!listener) {
    return listener.status().with_context(
        "tensor parallelism: the rendezvous (--master-addr, "
        "--master-port)");
  }
  const std::string exe =
      config.worker_executable.empty() ? self_executable() : config.worker_executable;
  const std::vector<std::string> env = worker_environment(world);
  g->workers_.resize(static_cast<size_t>(world - 1));
  for (int r = 1; r < world; ++r) {
    Worker& w = g->workers_[static_cast<size_t>(r - 1)];
    w.rank = r;
    auto pid = spawn(exe,
                     {exe, "worker", "--master-addr", config.master_addr, "--master-port",
                      std::to_string(listener->port()), "--rank", std::to_string(r)},
                     env);
    if (!pid) {
      return pid.status().with_context(fmt::format("tensor-parallel worker rank {}", r));
    }
    w.pid = *pid;
  }
  VLLM_LOG_INFO("Tensor parallelism: started {} worker processes (pids {}), rendezvous at {}:{}",
                world - 1, fmt::join(g->worker_pids(), ", "), config.master_addr, listener->port());

  // Each worker connects and says its rank; one that exits first is an error naming it.
  const parallel::Deadline deadline =
      parallel::Clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(config.startup_timeout_s * 1000));
  auto none_exited = [&]() -> Status {
    for (Worker& w : g->workers_) {
      int status = 0;
      if (!w.socket.valid() && !w.reaped && waitpid(w.pid, &status, WNOHANG) == w.pid) {
        w.reaped = true;
        return make_error(ErrorCode::kInternal,
                          "tensor-parallel worker rank {} (pid {}) {} before connecting to rank "
                          "0 (see its log above)",
                          w.rank, w.pid, describe_status(status));
      }
    }
    return Status::ok();
  };
  for (int connected = 0; connected < world - 1;) {
    auto socket = listener->accept(deadline, none_exited);
    if (!socket) {
      return socket.status().with_context("waiting for the tensor-parallel workers to connect");
    }
    auto hello = socket->recv_frame(kMaxControlFrame, parallel::deadline_in(10s), none_exited);
    if (!hello) continue;
    const auto json = nlohmann::json::parse(*hello, nullptr, false);
    const int rank = json.is_object() ? json.value("rank", -1) : -1;
    if (rank < 1 || rank >= world || g->workers_[static_cast<size_t>(rank - 1)].socket.valid()) {
      VLLM_LOG_WARNING(
          "Tensor parallelism: ignoring a connection that is not a worker of this "
          "group ({})",
          hello->substr(0, 80));
      continue;
    }
    g->workers_[static_cast<size_t>(rank - 1)].socket = std::move(*socket);
    ++connected;
  }
  for (Worker& w : g->workers_) {
    const nlohmann::json spec = {{"rank", w.rank},
                                 {"world_size", world},
                                 {"group", g->shm_->name()},
                                 {"step_channel", channel},
                                 {"model", load.model},
                                 {"load_format", load.load_format},
                                 {"device", load.device},
                                 {"dtype", load.dtype},
                                 {"max_model_len", load.max_model_len},
                                 {"enable_expert_parallel", load.enable_expert_parallel},
                                 {"quantization", load.quantization},
                                 {"mamba_cache_dtype", load.mamba_cache_dtype},
                                 {"mamba_ssm_cache_dtype", load.mamba_ssm_cache_dtype},
                                 {"kv_cache_dtype", load.kv_cache_dtype}};
    VLLM_RETURN_IF_ERROR(w.socket.send_frame(spec.dump()));
  }
  if (channel == "tcp") {
    std::vector<Socket*> peers;
    for (Worker& w : g->workers_) peers.push_back(&w.socket);
    g->channel_ = std::make_unique<parallel::TcpStepChannel>(std::move(peers), nullptr);
  } else {
    g->channel_ = std::make_unique<parallel::ShmStepChannel>(g->shm_);
  }
  g->monitor_ = std::thread([group = g.get()] { group->monitor(); });
  return g;
}

WorkerGroup::~WorkerGroup() {
  bool healthy = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    healthy = failure_.is_ok();
  }
  // In order: the shutdown message, and the workers exit once they have read it. Otherwise
  // (a failure, or a start that did not finish): abort the group and close the connections,
  // which every worker watches, so they exit at once wherever they are.
  const bool orderly = healthy && channel_ != nullptr;
  if (orderly) {
    StepMessage bye;
    bye.kind = StepKind::kShutdown;
    (void)channel_->publish(encode_step_message(bye));
  } else {
    if (comm_ != nullptr) comm_->abort("rank 0 is shutting the tensor-parallel group down");
    stop_monitor();
    for (Worker& w : workers_) w.socket.close();
  }
  const auto grace = parallel::Clock::now() + (orderly ? kShutdownGrace : kAbortGrace);
  for (Worker& w : workers_) {
    if (w.pid <= 0 || w.reaped) continue;
    int status = 0;
    while (waitpid(w.pid, &status, WNOHANG) != w.pid) {
      if (parallel::Clock::now() >= grace) {
        VLLM_LOG_WARNING("Tensor parallelism: worker rank {} (pid {}) did not exit; killing it",
                         w.rank, w.pid);
        kill(w.pid, SIGKILL);
        waitpid(w.pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    w.reaped = true;
  }
  stop_monitor();
}

void WorkerGroup::stop_monitor() {
  if (monitor_.joinable()) {
    const char byte = 1;
    (void)!write(wake_pipe_[1], &byte, 1);
    monitor_.join();
  }
  for (int& fd : wake_pipe_) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

Status WorkerGroup::wait_ready() {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(startup_timeout_s_ * 1000));
  {
    std::unique_lock<std::mutex> lock(mutex_);
    const bool settled = cv_.wait_until(lock, deadline, [&] {
      return !failure_.is_ok() ||
             std::all_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.ready; });
    });
    if (!failure_.is_ok()) return failure_;
    if (!settled) {
      return make_error(ErrorCode::kInternal,
                        "tensor-parallel workers did not load their shards within {} s",
                        startup_timeout_s_);
    }
  }
  // Every rank has mapped the segment: its name can go, so nothing is left in /dev/shm
  // whatever happens later.
  shm_->unlink();
  return Status::ok();
}

Status WorkerGroup::publish(const StepMessage& message) {
  if (Status h = health(); !h.is_ok()) return h;
  Status sent = channel_->publish(encode_step_message(message));
  if (sent.is_ok()) return sent;
  Status h = health();  // a failure the monitor found explains it better
  return h.is_ok() ? sent : h;
}

Status WorkerGroup::init_cache(const CacheConfig& config) {
  StepMessage m;
  m.kind = StepKind::kInitCache;
  m.cache = config;
  return publish(m);
}

Status WorkerGroup::forward(const ForwardStep& step) {
  StepMessage m;
  m.kind = StepKind::kForward;
  m.forward = step;
  return publish(m);
}

void WorkerGroup::abort(const Status& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_.is_ok()) failure_ = reason;
  }
  comm_->abort(reason.message());
  cv_.notify_all();
}

Status WorkerGroup::health() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

void WorkerGroup::set_failure_callback(std::function<void(const Status&)> callback) {
  std::lock_guard<std::mutex> lock(callback_mutex_);
  callback_ = std::move(callback);
  const Status failed = health();
  if (callback_ && !failed.is_ok()) callback_(failed);
}

std::vector<pid_t> WorkerGroup::worker_pids() const {
  std::vector<pid_t> pids;
  for (const Worker& w : workers_) pids.push_back(w.pid);
  return pids;
}

std::string WorkerGroup::describe_exit(Worker& w, int wait_ms) {
  if (w.reaped) return {};
  int status = 0;
  for (int waited = 0; waited <= wait_ms; waited += 10) {
    if (waitpid(w.pid, &status, WNOHANG) == w.pid) {
      w.reaped = true;
      return describe_status(status);
    }
    std::this_thread::sleep_for(10ms);
  }
  return {};
}

void WorkerGroup::fail(Worker& w, const std::string& what) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ || !failure_.is_ok()) return;
  }
  const Status failure = make_error(
      ErrorCode::kInternal, "tensor-parallel worker rank {} (pid {}) {}", w.rank, w.pid, what);
  VLLM_LOG_ERROR("{}", failure.message());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_.is_ok()) return;
    failure_ = failure;
  }
  comm_->abort(failure.message());
  cv_.notify_all();
  std::lock_guard<std::mutex> lock(callback_mutex_);
  if (callback_) callback_(failure);
}

void WorkerGroup::monitor() {
  while (true) {
    std::vector<pollfd> fds{{wake_pipe_[0], POLLIN, 0}};
    std::vector<Worker*> watched;
    for (Worker& w : workers_) {
      if (!w.socket.valid()) continue;
      fds.push_back({w.socket.fd(), POLLIN, 0});
      watched.push_back(&w);
    }
    const int n = ::poll(fds.data(), fds.size(), 1000);
    if (n < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) return;
    for (size_t i = 0; i < watched.size(); ++i) {
      if (fds[i + 1].revents == 0) continue;
      Worker& w = *watched[i];
      auto frame = w.socket.recv_frame(kMaxControlFrame, parallel::deadline_in(5s));
      if (!frame) {
        w.socket.close();
        bool stopping = false;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          stopping = stopping_;
        }
        if (stopping) continue;
        const std::string how = describe_exit(w, 2000);
        fail(w, how.empty() ? "closed its connection to rank 0" : how);
        continue;
      }
      const auto json = nlohmann::json::parse(*frame, nullptr, false);
      if (json.is_object() && json.contains("error")) {
        fail(w, "failed: " + json.value("error", std::string("(no message)")));
      } else if (json.is_object() && json.value("ready", false)) {
        {
          std::lock_guard<std::mutex> lock(mutex_);
          w.ready = true;
        }
        cv_.notify_all();
      }
    }
  }
}

}  // namespace vllm::engine
