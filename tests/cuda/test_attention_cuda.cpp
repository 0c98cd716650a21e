// Backend parity for paged attention: vllm::cuda::paged_attention against
// vllm::cpu::paged_attention on fresh random inputs, table-driven over decode batches,
// prefill from position 0, chunked prefill continuing from cached KV, mixed batches, a 16k
// context, GQA groups 1..16, head dims 64/128/256 and block sizes 8/16/32/64, in F32 and BF16
// (the CPU op runs in f32 on the same bf16-rounded values). BF16 prefill runs on every
// kernel the device has: on compute capability 9.0 the wgmma one (head dims 128 and 256),
// the mma.sync one and the CUDA-core one; BF16 decode on the tensor-core kernel and the
// CUDA-core one, also compared with each other over BF16 and FP8 caches.
//
// Every case shuffles the block ids, and fills what the kernels must not read with NaN: the
// cache blocks no request owns, the slots of a request's last block past its context, and
// the block-table entries past a request's context (garbage ids: poisoned blocks and ids
// outside the cache). Outputs start as NaN, so an element never written fails too.
// Without a GPU only the argument checks and the workspace-size tests run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention_batch.h"
#include "backend/cpu/attention.h"
#include "backend/cuda/attention.cuh"
#include "backend/cuda/runtime.h"
#include "cuda_test_util.h"

namespace vllm {
namespace {

using cuda_test::AttnCase;
using cuda_test::cpu_reference;
using cuda_test::describe;
using cuda_test::fill_nan;
using cuda_test::HostBatch;
using cuda_test::i32_tensor;
using cuda_test::make_batch;
using cuda_test::random_tensor;
using cuda_test::relative_l2;
using cuda_test::to_f32;

double tolerance(DType dtype) {
  return dtype == DType::kF32 ? 1e-5 : 1e-2;
}

// The batch's tensors on the GPU, a NaN-poisoned output and the workspace.
struct DeviceBatch {
  Tensor query, kv_cache, block_tables, out, workspace;
  cuda::PagedAttentionParams params;
};

DeviceBatch to_device(const HostBatch& b, const AttnCase& c, bool with_workspace) {
  DeviceBatch d;
  auto copy = [](const Tensor& t) {
    auto r = cuda::copy_to_device(t);
    VLLM_CHECK_MSG(r.has_value(), "{}", r.status().to_string());
    return *r;
  };
  d.query = copy(b.query);
  d.kv_cache = copy(b.kv_cache);
  d.block_tables = copy(b.block_tables);
  d.out = copy(fill_nan(b.query.shape(), b.query.dtype()));
  d.params.query_start_loc = copy(i32_tensor(b.query_start_loc));
  d.params.seq_lens = copy(i32_tensor(b.seq_lens));
  d.params.max_query_len = b.max_query_len;
  d.params.max_seq_len = b.max_seq_len;
  d.params.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const size_t bytes = cuda::paged_attention_workspace_size(static_cast<int64_t>(b.seq_lens.size()),
                                                            c.kv_heads, c.head_dim, b.max_seq_len);
  if (with_workspace && bytes > 0) {
    d.workspace =
        Tensor::empty({static_cast<int64_t>((bytes + 3) / 4)}, DType::kF32, Device::cuda());
  }
  return d;
}

std::vector<int32_t> repeat(int32_t value, size_t n) {
  return std::vector<int32_t>(n, value);
}

std::vector<int32_t> random_lengths(size_t n, int32_t lo, int32_t hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<AttnCase> parity_cases() {
  std::vector<AttnCase> cases;
  // Decode: one query per request, contexts 1..5000 (single-chunk and split requests).
  cases.push_back({"decode R=64", repeat(1, 64), random_lengths(64, 1, 5000, 1), 4, 4, 128, 16});
  cases.push_back(
      {"decode edges", repeat(1, 8), {1, 2, 15, 16, 17, 255, 1000, 5000}, 2, 1, 64, 32});
  cases.push_back({"decode G=8", repeat(1, 5), {1, 33, 511, 513, 4097}, 2, 8, 256, 16});
  cases.push_back({"decode G=16", repeat(1, 3), {700, 3000, 9}, 1, 16, 128, 16});
  cases.push_back({"decode G=6 (Qwen3.5-27B)", repeat(1, 4), {2048, 1, 999, 4000}, 4, 6, 256, 16});
  cases.push_back({"decode block 64", repeat(1, 3), {64, 65, 2000}, 2, 2, 128, 64});
  // Prefill from position 0.
  cases.push_back({"prefill 2048", {2048}, {2048}, 2, 4, 256, 16});
  cases.push_back({"prefill varlen", {100, 7, 300, 1}, {100, 7, 300, 1}, 2, 2, 128, 32});
  cases.push_back({"prefill G=1", {513, 64}, {513, 64}, 3, 1, 64, 16});
  cases.push_back({"prefill G=3", {77, 130}, {77, 130}, 2, 3, 128, 16});
  // Chunked prefill continuing from cached KV.
  cases.push_back({"chunked 37 at 1000", {37}, {1000}, 4, 4, 128, 16});
  cases.push_back({"chunked varlen", {37, 500, 2, 129}, {1000, 1500, 300, 4096}, 2, 8, 64, 32});
  cases.push_back({"chunked D=256", {64, 17}, {2100, 17}, 4, 4, 256, 32});
  // Head dim 256 prefill at the Qwen3.5 groups (4B: 4, 27B: 6, 35B-A3B: 8): several requests
  // whose rows are not whole 128-row query tiles nor whole key tiles, from position 0 and
  // continuing from cached KV, small and large cache blocks.
  cases.push_back(
      {"prefill D=256 G=6 varlen", {300, 77, 1, 129}, {300, 77, 1, 129}, 4, 6, 256, 16});
  cases.push_back({"prefill D=256 G=8 varlen", {513, 40, 200}, {513, 40, 200}, 2, 8, 256, 16});
  cases.push_back({"prefill D=256 G=4 block 8", {150, 3}, {150, 3}, 1, 4, 256, 8});
  cases.push_back({"chunked D=256 G=6", {100, 33, 250}, {1000, 700, 251}, 4, 6, 256, 16});
  cases.push_back({"chunked D=256 G=8 block 64", {65, 130}, {4000, 131}, 2, 8, 256, 64});
  cases.push_back(
      {"chunked D=256 G=4 mixed", {1, 95, 2, 640}, {3000, 95, 40, 1700}, 2, 4, 256, 16});
  // Head dim 128 prefill (the wgmma kernel's other instantiation).
  cases.push_back({"prefill D=128 G=4 varlen", {333, 1000}, {333, 1000}, 2, 4, 128, 16});
  cases.push_back({"chunked D=128 G=8", {70, 129}, {1200, 900}, 2, 8, 128, 32});
  // Mixed decode and prefill rows in one batch.
  cases.push_back(
      {"mixed", {1, 64, 1, 3, 200, 1, 2}, {900, 64, 1, 3000, 700, 17, 4000}, 2, 8, 64, 32});
  cases.push_back({"mixed G=4 D=256", {1, 300, 1, 1}, {5000, 1200, 30, 2500}, 4, 4, 256, 16});
  // One request, long context: split into many chunks, and unsplit without a workspace.
  cases.push_back({"long 16k", {1}, {16384}, 4, 4, 256, 16});
  // Head dims without a tiled kernel (the small test checkpoints) take the generic kernel.
  cases.push_back({"generic D=20 mixed", {1, 40, 3}, {90, 40, 200}, 2, 3, 20, 4});
  cases.push_back({"generic D=24 chunked", {9, 1}, {33, 57}, 2, 3, 24, 16});
  cases.push_back({"generic D=16 prefill", {50}, {50}, 2, 3, 16, 4});
  cases.push_back({"generic D=32 decode", repeat(1, 6), {1, 2, 17, 64, 65, 300}, 2, 2, 32, 16});
  cases.push_back({"generic D=96 mixed", {1, 130}, {600, 130}, 2, 4, 96, 16});
  cases.push_back({"long 16k, 5 queries", {5}, {16384}, 2, 2, 128, 32});
  cases.push_back({"long 16k no split", {1}, {16384}, 4, 4, 256, 16, false});
  cases.push_back(
      {"decode R=64 no split", repeat(1, 64), random_lengths(64, 1, 5000, 2), 2, 2, 64, 16, false});
  return cases;
}

// The BF16 prefill kernels a parity case runs on. kDefault is the default parameters' choice:
// the wgmma kernel on compute capability 9.0 at head dims 128 and 256, mma.sync otherwise
// (and it is the only pass for F32, whose prefill is on CUDA cores). Decode runs on tensor
// cores in the first two passes and on CUDA cores in kCudaCores.
enum class PrefillKernel { kDefault, kMma, kCudaCores };

std::string kernel_name(PrefillKernel kernel, DType dtype, int64_t head_dim, bool sm90a) {
  if (dtype != DType::kBF16) return "";
  switch (kernel) {
    case PrefillKernel::kDefault:
      return sm90a && (head_dim == 128 || head_dim == 256) ? " (wgmma)" : " (mma.sync)";
    case PrefillKernel::kMma:
      return " (mma.sync)";
    case PrefillKernel::kCudaCores:
      return " (CUDA cores)";
  }
  return "";
}

class AttentionCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: CUDA parity tests skipped";
    Status status = cuda::init();
    ASSERT_TRUE(status.is_ok()) << status.to_string();
    wgmma_ = cuda::runs_sm90a(0);
  }
  std::mt19937 rng_{20250301};
  bool wgmma_ = false;  // the device runs the sm_90a kernels (the wgmma prefill)
};

TEST_F(AttentionCuda, MatchesCpu) {
  for (const AttnCase& c : parity_cases()) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      HostBatch b = make_batch(c, dtype, rng_);
      Tensor ref = cpu_reference(b, c);
      DeviceBatch d = to_device(b, c, c.workspace);
      // BF16 prefill: the default kernel (wgmma where the device runs it), the mma.sync one
      // (already the default elsewhere) and the CUDA-core one.
      for (PrefillKernel kernel :
           {PrefillKernel::kDefault, PrefillKernel::kMma, PrefillKernel::kCudaCores}) {
        if (dtype == DType::kF32 && kernel != PrefillKernel::kDefault) continue;
        if (kernel == PrefillKernel::kMma && !wgmma_) continue;
        SCOPED_TRACE(describe(c, dtype) + kernel_name(kernel, dtype, c.head_dim, wgmma_));
        auto poison = cuda::copy_into_device(fill_nan(b.query.shape(), dtype), d.out);
        ASSERT_TRUE(poison.is_ok()) << poison.to_string();
        d.params.tensor_cores = kernel != PrefillKernel::kCudaCores;
        d.params.decode_tensor_cores = kernel != PrefillKernel::kCudaCores;
        d.params.wgmma = kernel == PrefillKernel::kDefault;
        Status s = cuda::paged_attention(d.query, d.kv_cache, d.block_tables, d.params, d.workspace,
                                         d.out, nullptr);
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        auto out = cuda::copy_to_host(d.out);
        ASSERT_TRUE(out) << out.status().to_string();
        EXPECT_TRUE(relative_l2(to_f32(*out), ref, tolerance(dtype)));
      }
    }
  }
}

// BF16 decode on the tensor-core kernel (attention_decode_mma.cuh) against the CPU op and
// against the CUDA-core small kernel, over BF16 and FP8 caches: Qwen3.5-27B's decode at batch
// 64 (4 kv heads, G 6, D 256: 1024-token contexts, mixed lengths, split and not), GQA groups 1
// to 16, head dims 64 / 128 / 256, several tokens in one small block, batch 1 at 16k. Outputs
// and the split workspace start as NaN, so a row or partial never written fails.
TEST_F(AttentionCuda, DecodeTensorCoresMatchCpuAndCudaCores) {
  const std::vector<AttnCase> cases = {
      {"27B decode R=64 1024", repeat(1, 64), repeat(1024, 64), 4, 6, 256, 16},
      {"27B decode R=64 mixed", repeat(1, 64), random_lengths(64, 1, 3000, 3), 4, 6, 256, 16},
      {"27B decode R=64 no split", repeat(1, 64), random_lengths(64, 1, 3000, 4), 4, 6, 256, 16,
       false},
      {"decode G=1 D=128", repeat(1, 9), {1, 2, 15, 16, 17, 100, 1000, 4097, 33}, 2, 1, 128, 32},
      {"decode G=2 D=256 block 64", repeat(1, 5), {1, 17, 100, 1000, 9000}, 4, 2, 256, 64},
      {"decode G=8 D=128 batch 1", {1}, {16384}, 2, 8, 128, 16},
      {"decode G=16 D=256", repeat(1, 3), {700, 3000, 9}, 1, 16, 256, 16},
      {"decode G=4 D=64", repeat(1, 4), {5, 64, 65, 2500}, 2, 4, 64, 16},
      {"3 tokens G=4 D=128", {3, 3, 1}, {500, 3, 2000}, 2, 4, 128, 16},
      {"2 tokens G=8 D=256", {2, 1}, {4000, 1}, 2, 8, 256, 32},
  };
  const KvCacheScales scaled{0.004f, 0.05f};
  auto copy = [](const Tensor& t) {
    auto r = cuda::copy_to_device(t);
    VLLM_CHECK_MSG(r.has_value(), "{}", r.status().to_string());
    return *r;
  };
  for (const AttnCase& c : cases) {
    HostBatch b = make_batch(c, DType::kBF16, rng_);
    ASSERT_LE(b.max_query_len * c.group, 16) << c.name;
    DeviceBatch d = to_device(b, c, c.workspace);
    for (bool fp8 : {false, true}) {
      SCOPED_TRACE(describe(c, DType::kBF16) + (fp8 ? " FP8 cache" : " BF16 cache"));
      Tensor host_cache = fp8 ? cuda_test::fp8_cache(b.kv_cache, scaled) : b.kv_cache;
      Tensor ref =
          fp8 ? cuda_test::cpu_reference_fp8(b, c, host_cache, scaled) : cpu_reference(b, c);
      Tensor cache = fp8 ? copy(host_cache) : d.kv_cache;
      d.params.kv_scales = fp8 ? scaled : KvCacheScales{};
      Tensor outs[2];
      for (bool tensor_cores : {true, false}) {
        d.params.decode_tensor_cores = tensor_cores;
        ASSERT_TRUE(cuda::copy_into_device(fill_nan(b.query.shape(), DType::kBF16), d.out).is_ok());
        if (d.workspace.defined()) {
          ASSERT_TRUE(
              cuda::copy_into_device(fill_nan(d.workspace.shape(), DType::kF32), d.workspace)
                  .is_ok());
        }
        Status s = cuda::paged_attention(d.query, cache, d.block_tables, d.params, d.workspace,
                                         d.out, nullptr);
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        auto out = cuda::copy_to_host(d.out);
        ASSERT_TRUE(out) << out.status().to_string();
        outs[tensor_cores ? 0 : 1] = to_f32(*out);
      }
      EXPECT_TRUE(relative_l2(outs[0], ref, tolerance(DType::kBF16))) << "tensor cores";
      EXPECT_TRUE(relative_l2(outs[1], ref, tolerance(DType::kBF16))) << "CUDA cores";
      EXPECT_TRUE(relative_l2(outs[0], outs[1], tolerance(DType::kBF16)))
          << "tensor cores against CUDA cores";
    }
  }
}

// The long cases really split (and the no-workspace ones really do not need to).
TEST(AttentionCudaPlan, LongContextsSplit) {
  EXPECT_GT(cuda::paged_attention_workspace_size(1, 4, 256, 16384), 0u);
  EXPECT_GT(cuda::paged_attention_workspace_size(64, 4, 128, 5000), 0u);
  EXPECT_GT(cuda::paged_attention_workspace_size(1, 4, 256, 100), 0u);     // two 64-key chunks
  EXPECT_EQ(cuda::paged_attention_workspace_size(1, 4, 256, 63), 0u);      // too short
  EXPECT_EQ(cuda::paged_attention_workspace_size(512, 8, 128, 8192), 0u);  // enough blocks
}

TEST(AttentionCudaPlan, WorkspaceSizeIsBounded) {
  for (int64_t d : {64, 128, 256}) {
    const size_t bound = cuda::paged_attention_max_workspace_size(d);
    for (int64_t r : {1, 2, 3, 7, 16, 64, 100, 255, 1000}) {
      for (int64_t hk : {1, 2, 4, 8}) {
        for (int64_t len : {1, 511, 512, 4096, 16384, 131072, 1 << 20}) {
          EXPECT_LE(cuda::paged_attention_workspace_size(r, hk, d, len), bound)
              << "R=" << r << " Hk=" << hk << " D=" << d << " len=" << len;
        }
      }
    }
  }
}

// Row-strided query (the q columns of a fused qkv buffer) and a strided output slice: the
// columns around the output stay untouched.
TEST_F(AttentionCuda, StridedQueryAndOutput) {
  const AttnCase c{"strided", {1, 40, 1}, {300, 90, 2000}, 2, 4, 128, 16};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(describe(c, dtype));
    HostBatch b = make_batch(c, dtype, rng_);
    Tensor ref = cpu_reference(b, c);
    DeviceBatch d = to_device(b, c, true);
    const int64_t tokens = b.query.size(0), width = b.query.size(1);
    const int64_t kv_width = 2 * c.kv_heads * c.head_dim;
    // Fused [T, q | k | v] with the query in the first columns.
    Tensor fused = random_tensor({tokens, width + kv_width}, dtype, rng_, 0.0f, 1.0f);
    const size_t elem = dtype_size(dtype);
    for (int64_t t = 0; t < tokens; ++t) {
      std::memcpy(static_cast<char*>(fused.data_ptr()) + t * (width + kv_width) * elem,
                  static_cast<const char*>(b.query.data_ptr()) + t * width * elem, width * elem);
    }
    auto fused_gpu = cuda::copy_to_device(fused);
    auto out_big = cuda::copy_to_device(fill_nan({tokens, width + 16}, dtype));
    ASSERT_TRUE(fused_gpu && out_big);
    Tensor q_view = fused_gpu->slice(1, 0, width);
    Tensor out_view = out_big->slice(1, 8, 8 + width);
    Status s = cuda::paged_attention(q_view, d.kv_cache, d.block_tables, d.params, d.workspace,
                                     out_view, nullptr);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    auto out = cuda::copy_to_host(*out_big);
    ASSERT_TRUE(out);
    Tensor out_f32 = to_f32(*out);
    EXPECT_TRUE(relative_l2(out_f32.slice(1, 8, 8 + width).clone(), ref, tolerance(dtype)));
    int64_t written_outside = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t col = 0; col < width + 16; ++col) {
        const bool inside = col >= 8 && col < 8 + width;
        if (!inside && !std::isnan(out_f32.data<float>()[t * (width + 16) + col])) {
          ++written_outside;
        }
      }
    }
    EXPECT_EQ(written_outside, 0);
  }
}

// Device-side inputs that break the host-given bounds: the request's rows come out NaN and
// nothing is read out of bounds; the other requests are unaffected.
TEST_F(AttentionCuda, BrokenDeviceInputsGiveNanRows) {
  const AttnCase c{"bounds", {1, 1, 6}, {700, 900, 800}, 2, 2, 64, 16};
  HostBatch b = make_batch(c, DType::kF32, rng_);
  Tensor ref = cpu_reference(b, c);
  // Request 1: a context longer than max_seq_len says. Request 2: a block id outside the
  // cache inside its context.
  HostBatch broken = b;
  broken.block_tables = b.block_tables.clone();
  broken.seq_lens[1] = 1000;
  broken.block_tables.data<int32_t>()[2 * broken.block_tables.size(1) + 3] =
      static_cast<int32_t>(b.kv_cache.size(0) + 7);
  DeviceBatch d = to_device(broken, c, true);
  d.params.max_seq_len = 900;
  Status s = cuda::paged_attention(d.query, d.kv_cache, d.block_tables, d.params, d.workspace,
                                   d.out, nullptr);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  auto out = cuda::copy_to_host(d.out);
  ASSERT_TRUE(out) << out.status().to_string();  // no sticky illegal-address error either
  Tensor got = to_f32(*out);
  EXPECT_TRUE(relative_l2(got.slice(0, 0, 1).clone(), ref.slice(0, 0, 1).clone(), 1e-5));
  for (int64_t t = 1; t < got.size(0); ++t) {
    for (int64_t col = 0; col < got.size(1); ++col) {
      ASSERT_TRUE(std::isnan(got.data<float>()[t * got.size(1) + col]))
          << "token " << t << " column " << col;
    }
  }
}

// A block id outside the cache inside a prefill request's context, on the default BF16
// prefill kernel at head dim 256 (wgmma on compute capability 9.0): every row of that request
// comes out NaN (each of its query tiles reads the block), nothing is read out of bounds, and
// the decode request beside it is unaffected.
TEST_F(AttentionCuda, BadBlockIdInPrefillGivesNanRows) {
  const AttnCase c{"bad block prefill", {1, 200}, {700, 900}, 2, 4, 256, 16};
  SCOPED_TRACE(describe(c, DType::kBF16) +
               kernel_name(PrefillKernel::kDefault, DType::kBF16, c.head_dim, wgmma_));
  HostBatch b = make_batch(c, DType::kBF16, rng_);
  Tensor ref = cpu_reference(b, c);
  HostBatch broken = b;
  broken.block_tables = b.block_tables.clone();
  broken.block_tables.data<int32_t>()[broken.block_tables.size(1) + 3] =
      static_cast<int32_t>(b.kv_cache.size(0) + 7);
  DeviceBatch d = to_device(broken, c, true);
  Status s = cuda::paged_attention(d.query, d.kv_cache, d.block_tables, d.params, d.workspace,
                                   d.out, nullptr);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  auto out = cuda::copy_to_host(d.out);
  ASSERT_TRUE(out) << out.status().to_string();
  Tensor got = to_f32(*out);
  EXPECT_TRUE(relative_l2(got.slice(0, 0, 1).clone(), ref.slice(0, 0, 1).clone(), 1e-2));
  for (int64_t t = 1; t < got.size(0); ++t) {
    for (int64_t col = 0; col < got.size(1); ++col) {
      ASSERT_TRUE(std::isnan(got.data<float>()[t * got.size(1) + col]))
          << "token " << t << " column " << col;
    }
  }
}

// ---- Argument checks: they run before any CUDA call, so no GPU is needed ----------------

// A CUDA-device tensor over host memory that is never dereferenced.
class FakeCuda {
 public:
  Tensor make(const Shape& shape, DType dtype) {
    const int64_t n = std::max<int64_t>(1, *checked_numel(shape));
    buffers_.emplace_back(static_cast<size_t>(n) * dtype_size(dtype) / 8 + 16);
    auto address = reinterpret_cast<uintptr_t>(buffers_.back().data());
    address = (address + 63) / 64 * 64;  // as aligned as a cudaMalloc'd pointer
    return Tensor::borrow(reinterpret_cast<void*>(address), shape, dtype, Device::cuda(), nullptr);
  }

 private:
  std::vector<std::vector<uint64_t>> buffers_;
};

struct ArgSet {
  Tensor query, kv_cache, block_tables, out, workspace;
  cuda::PagedAttentionParams params;
};

ArgSet good_args(FakeCuda& fake, DType dtype, int64_t head_dim, int64_t q_heads, int64_t kv_heads,
                 int64_t block_size) {
  ArgSet a;
  a.query = fake.make({5, q_heads * head_dim}, dtype);
  a.out = fake.make({5, q_heads * head_dim}, dtype);
  a.kv_cache = fake.make({8, 2, block_size, kv_heads, head_dim}, dtype);
  a.block_tables = fake.make({2, 4}, DType::kI32);
  a.params.query_start_loc = fake.make({3}, DType::kI32);
  a.params.seq_lens = fake.make({2}, DType::kI32);
  a.params.max_query_len = 4;
  a.params.max_seq_len = 30;
  a.params.scale = 0.125f;
  return a;
}

Status call(ArgSet& a) {
  return cuda::paged_attention(a.query, a.kv_cache, a.block_tables, a.params, a.workspace, a.out,
                               nullptr);
}

void expect_error(const Status& s, ErrorCode code, const std::string& needle) {
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

TEST(AttentionCudaArgs, RejectsWrongDtypes) {
  FakeCuda fake;
  ArgSet a = good_args(fake, DType::kF32, 64, 4, 2, 16);
  a.query = fake.make({5, 256}, DType::kF16);
  expect_error(call(a), ErrorCode::kInvalidArgument, "query");
  a = good_args(fake, DType::kBF16, 64, 4, 2, 16);
  a.kv_cache = fake.make({8, 2, 16, 2, 64}, DType::kF32);
  expect_error(call(a), ErrorCode::kInvalidArgument, "kv_cache");
  a = good_args(fake, DType::kBF16, 64, 4, 2, 16);
  a.out = fake.make({5, 256}, DType::kF32);
  expect_error(call(a), ErrorCode::kInvalidArgument, "out");
  a = good_args(fake, DType::kF32, 64, 4, 2, 16);
  a.block_tables = fake.make({2, 4}, DType::kI64);
  expect_error(call(a), ErrorCode::kInvalidArgument, "block_tables");
  a = good_args(fake, DType::kF32, 64, 4, 2, 16);
  a.params.seq_lens = fake.make({2}, DType::kI64);
  expect_error(call(a), ErrorCode::kInvalidArgument, "seq_lens");
}

TEST(AttentionCudaArgs, RejectsUnsupportedShapes) {
  FakeCuda fake;
  ArgSet a = good_args(fake, DType::kBF16, 320, 4, 2, 16);
  expect_error(call(a), ErrorCode::kUnsupported, "head_dim 320");
  a = good_args(fake, DType::kBF16, 128, 3, 2, 16);  // 3 query heads over 2 kv heads
  expect_error(call(a), ErrorCode::kInvalidArgument, "not a multiple of kv heads");
  a = good_args(fake, DType::kF32, 64, 4, 2, 24);
  expect_error(call(a), ErrorCode::kUnsupported, "power of two");
  a = good_args(fake, DType::kF32, 64, 4, 2, 16);
  a.params.query_start_loc = fake.make({2}, DType::kI32);  // R + 1 = 3 expected
  expect_error(call(a), ErrorCode::kInvalidArgument, "query_start_loc");
  a = good_args(fake, DType::kF32, 64, 4, 2, 16);
  a.params.max_seq_len = 65;  // the table holds 4 blocks of 16 tokens
  expect_error(call(a), ErrorCode::kInvalidArgument, "max_seq_len");
  a = good_args(fake, DType::kF32, 64, 4, 2, 16);
  a.out = fake.make({6, 256}, DType::kF32);
  expect_error(call(a), ErrorCode::kInvalidArgument, "out");
}

TEST(AttentionCudaArgs, RejectsSmallWorkspaceAndHostTensors) {
  FakeCuda fake;
  // 1 request at 16k context splits, so a 16-byte workspace is too small.
  ArgSet a = good_args(fake, DType::kBF16, 256, 4, 1, 16);
  a.block_tables = fake.make({2, 1024}, DType::kI32);
  a.params.max_seq_len = 16384;
  a.params.seq_lens = fake.make({1}, DType::kI32);
  a.params.query_start_loc = fake.make({2}, DType::kI32);
  a.workspace = fake.make({4}, DType::kF32);
  expect_error(call(a), ErrorCode::kInvalidArgument, "workspace");

  a = good_args(fake, DType::kF32, 64, 4, 2, 16);
  a.kv_cache = Tensor::zeros({8, 2, 16, 2, 64}, DType::kF32);  // left on the host
  expect_error(call(a), ErrorCode::kInvalidArgument, "expected a CUDA tensor");
}

}  // namespace
}  // namespace vllm
