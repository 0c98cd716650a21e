// Microbenchmarks of the CPU ops, starting with linear() (the bulk of CPU inference time):
// f32 and bf16 weights at decode (M = 1, 8) and prefill (M = 128) sizes, N = K = 2048, for
// each kernel variant (portable, AVX2, AVX-512; variants the CPU lacks are skipped).
// Reports GFLOP/s (2*M*N*K per call) and weight bytes streamed per second. BM_SgemmBaseline
// is one single-threaded OpenBLAS sgemm over the whole problem (f32 weights), the reference
// point for linear() run with VLLM_CPU_THREADS=1.
//
//   ./build/benchmarks/bench_cpu_ops [--benchmark_filter=Linear]   (VLLM_CPU_THREADS=n to pin)
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <random>

#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/ops.h"
#include "base/float_convert.h"
#include "base/thread_pool.h"

namespace vllm {
namespace {

Tensor random_f32(const Shape& shape, uint32_t seed) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

Tensor to_bf16(const Tensor& src) {
  Tensor t = Tensor::empty(src.shape(), DType::kBF16);
  const float* s = src.data<float>();
  uint16_t* d = t.data<uint16_t>();
  for (int64_t i = 0; i < src.numel(); ++i) d[i] = f32_to_bf16(s[i]);
  return t;
}

void BM_Linear(benchmark::State& state, DType weight_dtype, cpu::CpuIsa isa) {
  if (cpu::set_active_isa(isa) != isa) {
    state.SkipWithError("this CPU does not support the ISA");
    return;
  }
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  Tensor x = random_f32({M, K}, 1);
  Tensor w = random_f32({N, K}, 2);
  if (weight_dtype == DType::kBF16) w = to_bf16(w);
  Tensor out = Tensor::empty({M, N}, DType::kF32);
  for (auto _ : state) {
    Status s = cpu::linear(x, w, Tensor(), out);
    if (!s.is_ok()) {
      state.SkipWithError(s.to_string().c_str());
      break;
    }
    benchmark::DoNotOptimize(out.data<float>());
    benchmark::ClobberMemory();
  }
  const double flops = 2.0 * static_cast<double>(M * N * K);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["weight_GB/s"] = benchmark::Counter(static_cast<double>(w.nbytes()) * 1e-9,
                                                     benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = default_thread_pool().num_threads();
}

void BM_SgemmBaseline(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  Tensor x = random_f32({M, K}, 1);
  Tensor w = random_f32({N, K}, 2);
  Tensor out = Tensor::empty({M, N}, DType::kF32);
#if defined(OPENBLAS_VERSION)
  openblas_set_num_threads(1);
#endif
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(M), static_cast<int>(N),
                static_cast<int>(K), 1.0f, x.data<float>(), static_cast<int>(K), w.data<float>(),
                static_cast<int>(K), 0.0f, out.data<float>(), static_cast<int>(N));
    benchmark::DoNotOptimize(out.data<float>());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(M * N * K) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void linear_sizes(benchmark::internal::Benchmark* b) {
  for (int64_t m : {1, 8, 128}) b->Args({m, 2048, 2048});
  for (int64_t m : {1, 8}) b->Args({m, 8192, 256});  // the demo model's lm_head
  b->ArgNames({"M", "N", "K"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

using cpu::CpuIsa;
BENCHMARK_CAPTURE(BM_Linear, f32_portable, DType::kF32, CpuIsa::kPortable)->Apply(linear_sizes);
BENCHMARK_CAPTURE(BM_Linear, f32_avx2, DType::kF32, CpuIsa::kAvx2)->Apply(linear_sizes);
BENCHMARK_CAPTURE(BM_Linear, f32_avx512, DType::kF32, CpuIsa::kAvx512)->Apply(linear_sizes);
BENCHMARK_CAPTURE(BM_Linear, bf16_portable, DType::kBF16, CpuIsa::kPortable)->Apply(linear_sizes);
BENCHMARK_CAPTURE(BM_Linear, bf16_avx2, DType::kBF16, CpuIsa::kAvx2)->Apply(linear_sizes);
BENCHMARK_CAPTURE(BM_Linear, bf16_avx512, DType::kBF16, CpuIsa::kAvx512)->Apply(linear_sizes);
BENCHMARK(BM_SgemmBaseline)->Apply(linear_sizes);

}  // namespace
}  // namespace vllm

BENCHMARK_MAIN();
