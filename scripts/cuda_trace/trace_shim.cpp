// A kernel timeline of any CUDA program, CUDA-graph replays included, without Nsight Systems:
// an LD_PRELOAD library that turns on CUPTI's kernel activity records at load and writes one
// CSV row per kernel (start and end in ns, the launch's correlation id, the graph id, grid and
// block size, registers, demangled name) to $VLLM_TRACE_OUT. scripts/cuda_trace.sh builds and
// runs it; analyze.py reads the CSV. Without $VLLM_TRACE_OUT it does nothing.
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace {

FILE* g_out = nullptr;
std::mutex g_mu;
size_t g_rows = 0;

constexpr size_t kBufferBytes = 8 << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = kBufferBytes;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *max_records = 0;  // as many as fit
}

// The demangled name with CSV's separators replaced.
std::string csv_name(const char* mangled) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : mangled;
  std::free(demangled);
  for (char& c : name) {
    if (c == ',' || c == '\n' || c == '"') c = ';';
  }
  return name;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(g_mu);
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || g_out == nullptr) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    std::fprintf(g_out, "%llu,%llu,%u,%u,%d,%d,%u,%s\n", static_cast<unsigned long long>(k->start),
                 static_cast<unsigned long long>(k->end), k->correlationId, k->graphId,
                 k->gridX * k->gridY * k->gridZ, k->blockX * k->blockY * k->blockZ,
                 static_cast<unsigned>(k->registersPerThread), csv_name(k->name).c_str());
    ++g_rows;
  }
  std::free(buffer);
}

struct Trace {
  Trace() {
    const char* path = std::getenv("VLLM_TRACE_OUT");
    if (path == nullptr || *path == '\0') return;
    g_out = std::fopen(path, "w");
    if (g_out == nullptr) {
      std::fprintf(stderr, "cuda_trace: cannot write %s\n", path);
      return;
    }
    std::fprintf(g_out, "start,end,correlation,graph,grid,block,registers,name\n");
    CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r == CUPTI_SUCCESS) r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (r == CUPTI_SUCCESS) r = cuptiActivityFlushPeriod(200);  // ms: keep buffers moving
    if (r != CUPTI_SUCCESS) {
      const char* what = nullptr;
      cuptiGetResultString(r, &what);
      std::fprintf(stderr, "cuda_trace: CUPTI kernel activity unavailable: %s\n",
                   what != nullptr ? what : "unknown error");
    }
  }
  ~Trace() {
    if (g_out == nullptr) return;
    cuptiActivityFlushAll(1);
    std::lock_guard<std::mutex> lock(g_mu);
    std::fprintf(stderr, "cuda_trace: %zu kernels\n", g_rows);
    std::fclose(g_out);
    g_out = nullptr;
  }
};

Trace g_trace;

}  // namespace
