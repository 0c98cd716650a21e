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
#include <immintrin.h>

#include <random>
#include <vector>

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

// Decode as the model sees it: M rows against weights streamed from DRAM (a set of matrices
// well beyond the last-level cache, used in turn), at Qwen3-0.6B's MLP shapes. The figure
// to compare is weight_GB/s against BM_ReadBaseline, a vector sum over as many bytes. The
// demo model's shapes are here too: on an idle machine its weights stay in the last-level
// cache, which BM_Linear's single matrix shows; under load they come from DRAM, as here.
constexpr int kStreamCopies = 24;

void BM_LinearStream(benchmark::State& state, cpu::CpuIsa isa) {
  if (cpu::set_active_isa(isa) != isa) {
    state.SkipWithError("this CPU does not support the ISA");
    return;
  }
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  Tensor x = random_f32({M, K}, 1);
  std::vector<Tensor> ws;
  for (int i = 0; i < kStreamCopies; ++i) ws.push_back(to_bf16(random_f32({N, K}, 2 + i)));
  Tensor out = Tensor::empty({M, N}, DType::kF32);
  size_t i = 0;
  for (auto _ : state) {
    Status s = cpu::linear(x, ws[i++ % ws.size()], Tensor(), out);
    if (!s.is_ok()) {
      state.SkipWithError(s.to_string().c_str());
      break;
    }
    benchmark::DoNotOptimize(out.data<float>());
    benchmark::ClobberMemory();
  }
  state.counters["weight_GB/s"] = benchmark::Counter(static_cast<double>(ws[0].nbytes()) * 1e-9,
                                                     benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = default_thread_pool().num_threads();
}

// One thread summing the same bytes as BM_LinearStream reads, as 64-bit lanes of the widest
// vectors this CPU has (AVX-512, else AVX2), in four streams side by side (the four quarters
// of the matrix, as the M = 1 kernels read their rows): the read bandwidth a decode GEMV
// could reach on one core. (A scalar sum, which the compiler does not vectorise far enough,
// reported ~26 GB/s where one Zen 4 core streams 40+; one vector stream reads as much as
// four on an idle machine, less when other cores load the memory.)
__attribute__((target("avx512f"))) uint64_t sum_avx512(const uint8_t* p, size_t bytes) {
  const size_t q = bytes / 4 / 64 * 64;
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = 0; i < q; i += 64) {
    s0 = _mm512_add_epi64(s0, _mm512_loadu_si512(p + i));
    s1 = _mm512_add_epi64(s1, _mm512_loadu_si512(p + q + i));
    s2 = _mm512_add_epi64(s2, _mm512_loadu_si512(p + 2 * q + i));
    s3 = _mm512_add_epi64(s3, _mm512_loadu_si512(p + 3 * q + i));
  }
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
  uint64_t sum = 0;
  for (uint64_t lane : lanes) sum += lane;
  return sum;
}

__attribute__((target("avx2"))) uint64_t sum_avx2(const uint8_t* p, size_t bytes) {
  const size_t q = bytes / 4 / 32 * 32;
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = 0; i < q; i += 32) {
    s0 = _mm256_add_epi64(s0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    s1 = _mm256_add_epi64(s1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + q + i)));
    s2 = _mm256_add_epi64(s2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * q + i)));
    s3 = _mm256_add_epi64(s3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 3 * q + i)));
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3)));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

void BM_ReadBaseline(benchmark::State& state) {
  const cpu::CpuIsa isa = cpu::detected_isa();
  if (isa == cpu::CpuIsa::kPortable) {
    state.SkipWithError("this CPU has neither AVX2 nor AVX-512");
    return;
  }
  const int64_t N = state.range(1), K = state.range(2);
  std::vector<Tensor> ws;
  for (int i = 0; i < kStreamCopies; ++i) ws.push_back(to_bf16(random_f32({N, K}, 2 + i)));
  size_t i = 0;
  for (auto _ : state) {
    const Tensor& w = ws[i++ % ws.size()];
    const auto* p = static_cast<const uint8_t*>(w.data_ptr());
    uint64_t sum =
        isa == cpu::CpuIsa::kAvx512 ? sum_avx512(p, w.nbytes()) : sum_avx2(p, w.nbytes());
    benchmark::DoNotOptimize(sum);
  }
  state.counters["weight_GB/s"] = benchmark::Counter(static_cast<double>(ws[0].nbytes()) * 1e-9,
                                                     benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(cpu::isa_name(isa)));
}

void stream_sizes(benchmark::internal::Benchmark* b) {
  b->Args({1, 3072, 1024});  // gate or up
  b->Args({1, 1024, 3072});  // down
  b->Args({8, 3072, 1024});
  b->Args({1, 8192, 256});     // the demo model's lm_head
  b->Args({1, 776, 256});      // its fused GDN input projection (24 copies: 9.5 MiB)
  b->Args({128, 3072, 1024});  // prefill
  b->Args({128, 1024, 3072});
  b->ArgNames({"M", "N", "K"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

void linear_sizes(benchmark::internal::Benchmark* b) {
  for (int64_t m : {1, 8, 128}) b->Args({m, 2048, 2048});
  for (int64_t m : {1, 8}) b->Args({m, 8192, 256});  // the demo model's lm_head
  b->Args({128, 768, 256});  // a 128-token prefill through a demo-model-sized projection
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
BENCHMARK_CAPTURE(BM_LinearStream, bf16_avx2, CpuIsa::kAvx2)->Apply(stream_sizes);
BENCHMARK_CAPTURE(BM_LinearStream, bf16_avx512, CpuIsa::kAvx512)->Apply(stream_sizes);
BENCHMARK(BM_ReadBaseline)->Apply(stream_sizes);

}  // namespace
}  // namespace vllm

BENCHMARK_MAIN();
