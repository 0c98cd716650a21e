// Backend parity for the small elementwise ops (backend/cuda/elementwise.cuh): each against
// its CPU op (embedding, add_inplace, silu_and_mul) or, where the CPU has none, a plain host
// loop, on fresh random inputs over odd widths, one and many rows (more than gridDim.y's
// 65535), and operands that are column slices of wider buffers (16-byte aligned, so the
// vectorised path runs with a row stride, and shifted by one element, so the element-wise
// path runs). Outputs start as NaN; columns outside a sliced output must stay NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/elementwise.cuh"
#include "base/counter_rng.h"
#include "base/float_convert.h"
#include "cuda_device_util.h"
#include "cuda_test_util.h"

namespace vllm {
namespace {

using cuda_test::fill_nan;
using cuda_test::kAligned;
using cuda_test::kContiguous;
using cuda_test::kUnaligned;
using cuda_test::Layout;
using cuda_test::nan_operand;
using cuda_test::Operand;
using cuda_test::random_operand;
using cuda_test::random_tensor;
using cuda_test::relative_l2;
using cuda_test::same_values;
using cuda_test::to_device;
using cuda_test::to_f32;
using cuda_test::to_host_f32;

double tolerance(DType dtype) {
  return dtype == DType::kF32 ? 1e-5 : 1e-2;
}

float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

class ElementwiseCuda : public cuda_test::CudaTest {
 protected:
  std::mt19937 rng_{20250101};
};

const DType kActs[] = {DType::kF32, DType::kBF16};
const Layout kLayouts[] = {kContiguous, kAligned, kUnaligned};

TEST_F(ElementwiseCuda, EmbeddingMatchesCpu) {
  const int64_t vocab = 1000;
  int cases = 0;
  for (int64_t hidden : {int64_t{7}, int64_t{64}, int64_t{2560}}) {
    for (DType table_dtype : kActs) {
      Tensor table = random_tensor({vocab, hidden}, table_dtype, rng_, 0.0f, 1.0f);
      Tensor table_gpu = to_device(table);
      for (DType out_dtype : kActs) {
        for (DType id_dtype : {DType::kI32, DType::kI64}) {
          for (int64_t tokens : {int64_t{1}, int64_t{5}, int64_t{300}}) {
            for (Layout layout : kLayouts) {
              SCOPED_TRACE(fmt::format("[{} x {}] table={} out={} ids={} out {}", tokens, hidden,
                                       dtype_name(table_dtype), dtype_name(out_dtype),
                                       dtype_name(id_dtype), layout.name()));
              Tensor ids = Tensor::empty({tokens}, id_dtype);
              std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
              for (int64_t t = 0; t < tokens; ++t) {
                const int64_t id = t == 0 ? vocab - 1 : pick(rng_);
                if (id_dtype == DType::kI64) {
                  ids.data<int64_t>()[t] = id;
                } else {
                  ids.data<int32_t>()[t] = static_cast<int32_t>(id);
                }
              }
              Tensor ref = Tensor::empty({tokens, hidden}, DType::kF32);
              ASSERT_TRUE(cpu::embedding(ids, table, ref).is_ok());

              Tensor ids_gpu = to_device(ids);
              Operand out = nan_operand(tokens, hidden, out_dtype, layout);
              Status s = cuda::embedding(ids_gpu, table_gpu, out.view, nullptr);
              ASSERT_TRUE(s.is_ok()) << s.to_string();
              EXPECT_TRUE(relative_l2(out.result_f32(), ref, tolerance(out_dtype)));
              EXPECT_TRUE(out.outside_untouched());
              ++cases;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 216);
}

TEST_F(ElementwiseCuda, EmbeddingOfAnIdOutsideTheVocabularyIsZero) {
  const int64_t vocab = 50, hidden = 24;
  for (DType dtype : kActs) {
    Tensor table = random_tensor({vocab, hidden}, dtype, rng_, 0.0f, 1.0f);
    Tensor ids = Tensor::empty({4}, DType::kI64);
    const int64_t values[] = {3, -1, vocab, 7};
    for (int i = 0; i < 4; ++i) ids.data<int64_t>()[i] = values[i];
    Tensor out_gpu = to_device(fill_nan({4, hidden}, dtype));
    Status s = cuda::embedding(to_device(ids), to_device(table), out_gpu, nullptr);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    Tensor got = to_host_f32(out_gpu);
    Tensor table_f32 = to_f32(table);
    Tensor ref = Tensor::zeros({4, hidden}, DType::kF32);
    for (int64_t c = 0; c < hidden; ++c) {
      ref.data<float>()[0 * hidden + c] = table_f32.data<float>()[3 * hidden + c];
      ref.data<float>()[3 * hidden + c] = table_f32.data<float>()[7 * hidden + c];
    }
    EXPECT_TRUE(same_values(got, ref)) << dtype_name(dtype);
  }
}

TEST_F(ElementwiseCuda, AddInplaceMatchesCpu) {
  struct Shape2 {
    int64_t rows, cols;
  };
  const Shape2 shapes[] = {{1, 7}, {3, 2560}, {257, 1000}, {70000, 8}};
  const std::pair<Layout, Layout> layouts[] = {
      {kContiguous, kContiguous}, {kAligned, kAligned}, {kUnaligned, kContiguous}};
  for (Shape2 shape : shapes) {
    for (DType dtype : kActs) {
      for (auto [dst_layout, src_layout] : layouts) {
        SCOPED_TRACE(fmt::format("[{} x {}] {} dst {} src {}", shape.rows, shape.cols,
                                 dtype_name(dtype), dst_layout.name(), src_layout.name()));
        Operand dst = random_operand(shape.rows, shape.cols, dtype, dst_layout, rng_);
        Operand src = random_operand(shape.rows, shape.cols, dtype, src_layout, rng_, 0.5f, 2.0f);
        Tensor ref = dst.input_f32();
        ASSERT_TRUE(cpu::add_inplace(ref, src.input_f32()).is_ok());
        Status s = cuda::add_inplace(dst.view, src.view, nullptr);
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        EXPECT_TRUE(relative_l2(dst.result_f32(), ref, tolerance(dtype)));
        EXPECT_TRUE(dst.outside_untouched());
      }
    }
  }
}

TEST_F(ElementwiseCuda, SiluAndMulMatchesCpu) {
  for (int64_t inter : {int64_t{7}, int64_t{64}, int64_t{1000}, int64_t{9216}}) {
    for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{257}}) {
      for (DType dtype : kActs) {
        for (Layout layout : kLayouts) {
          SCOPED_TRACE(fmt::format("[{} x 2 * {}] {} x and out {}", rows, inter, dtype_name(dtype),
                                   layout.name()));
          Operand x = random_operand(rows, 2 * inter, dtype, layout, rng_, 0.0f, 2.0f);
          Operand out = nan_operand(rows, inter, dtype, layout);
          Tensor ref = Tensor::empty({rows, inter}, DType::kF32);
          ASSERT_TRUE(cpu::silu_and_mul(x.input_f32(), ref).is_ok());
          Status s = cuda::silu_and_mul(x.view, out.view, nullptr);
          ASSERT_TRUE(s.is_ok()) << s.to_string();
          EXPECT_TRUE(relative_l2(out.result_f32(), ref, tolerance(dtype)));
          EXPECT_TRUE(out.outside_untouched());
        }
      }
    }
  }
}

TEST_F(ElementwiseCuda, SplitQGateMatchesHostLoop) {
  for (int64_t head_dim : {int64_t{5}, int64_t{64}, int64_t{256}}) {
    for (int64_t heads : {int64_t{1}, int64_t{3}, int64_t{16}}) {
      for (int64_t rows : {int64_t{1}, int64_t{7}, int64_t{129}}) {
        for (DType dtype : kActs) {
          for (Layout layout : {kContiguous, kAligned, kUnaligned}) {
            SCOPED_TRACE(fmt::format("[{} x {} heads x 2 * {}] {} {}", rows, heads, head_dim,
                                     dtype_name(dtype), layout.name()));
            const int64_t width = heads * head_dim;
            Operand q_gate = random_operand(rows, 2 * width, dtype, layout, rng_);
            Operand query = nan_operand(rows, width, dtype, layout);
            Operand gate = nan_operand(rows, width, dtype, kContiguous);
            Tensor src = q_gate.input_f32();
            Tensor q_ref = Tensor::empty({rows, width}, DType::kF32);
            Tensor g_ref = Tensor::empty({rows, width}, DType::kF32);
            for (int64_t t = 0; t < rows; ++t) {
              for (int64_t h = 0; h < heads; ++h) {
                for (int64_t d = 0; d < head_dim; ++d) {
                  const float* head = src.data<float>() + t * 2 * width + h * 2 * head_dim;
                  q_ref.data<float>()[t * width + h * head_dim + d] = head[d];
                  g_ref.data<float>()[t * width + h * head_dim + d] = head[head_dim + d];
                }
              }
            }
            Status s = cuda::split_q_gate(q_gate.view, head_dim, query.view, gate.view, nullptr);
            ASSERT_TRUE(s.is_ok()) << s.to_string();
            EXPECT_TRUE(same_values(query.result_f32(), q_ref)) << "query";
            EXPECT_TRUE(same_values(gate.result_f32(), g_ref)) << "gate";
            EXPECT_TRUE(query.outside_untouched());
          }
        }
      }
    }
  }
}

TEST_F(ElementwiseCuda, SigmoidGateMulMatchesHostLoop) {
  for (int64_t cols : {int64_t{7}, int64_t{512}, int64_t{4096}}) {
    for (int64_t rows : {int64_t{1}, int64_t{33}}) {
      for (DType dtype : kActs) {
        for (Layout layout : kLayouts) {
          SCOPED_TRACE(
              fmt::format("[{} x {}] {} gate {}", rows, cols, dtype_name(dtype), layout.name()));
          Operand x = random_operand(rows, cols, dtype, kContiguous, rng_);
          Operand gate = random_operand(rows, cols, dtype, layout, rng_, 0.0f, 3.0f);
          Tensor ref = x.input_f32();
          Tensor g = gate.input_f32();
          for (int64_t i = 0; i < ref.numel(); ++i) {
            ref.data<float>()[i] *= sigmoid(g.data<float>()[i]);
          }
          Status s = cuda::sigmoid_gate_mul(x.view, gate.view, nullptr);
          ASSERT_TRUE(s.is_ok()) << s.to_string();
          EXPECT_TRUE(relative_l2(x.result_f32(), ref, tolerance(dtype)));
        }
      }
    }
  }
}

TEST_F(ElementwiseCuda, AddSigmoidGatedMatchesHostLoop) {
  // gate as [T, 1], as [T], and as column 2 of a [T, 5] tensor (row stride 5).
  enum class GateForm { kColumn, kVector, kSlice };
  for (int64_t hidden : {int64_t{7}, int64_t{2560}}) {
    for (int64_t rows : {int64_t{1}, int64_t{70}}) {
      for (DType dtype : kActs) {
        for (GateForm form : {GateForm::kColumn, GateForm::kVector, GateForm::kSlice}) {
          for (Layout layout : {kContiguous, kUnaligned}) {
            SCOPED_TRACE(fmt::format("[{} x {}] {} gate form {} out {}", rows, hidden,
                                     dtype_name(dtype), static_cast<int>(form), layout.name()));
            Operand out = random_operand(rows, hidden, dtype, layout, rng_);
            Operand x = random_operand(rows, hidden, dtype, kContiguous, rng_);
            Tensor gate_host = random_tensor({rows, 5}, dtype, rng_, 0.0f, 2.0f);
            Tensor gate_all = to_device(gate_host);
            Tensor gate_f32 = to_f32(gate_host);
            Tensor gate_view;
            int64_t gate_col = 0;
            if (form == GateForm::kSlice) {
              gate_view = gate_all.slice(1, 2, 3);
              gate_col = 2;
            } else {
              Tensor first = to_device(gate_host.slice(1, 0, 1).clone());
              gate_view = form == GateForm::kColumn ? first : first.view({rows});
            }
            Tensor ref = out.input_f32();
            Tensor xs = x.input_f32();
            for (int64_t t = 0; t < rows; ++t) {
              const float s = sigmoid(gate_f32.data<float>()[t * 5 + gate_col]);
              for (int64_t i = 0; i < hidden; ++i) {
                ref.data<float>()[t * hidden + i] += s * xs.data<float>()[t * hidden + i];
              }
            }
            Status st = cuda::add_sigmoid_gated(out.view, x.view, gate_view, nullptr);
            ASSERT_TRUE(st.is_ok()) << st.to_string();
            EXPECT_TRUE(relative_l2(out.result_f32(), ref, tolerance(dtype)));
            EXPECT_TRUE(out.outside_untouched());
          }
        }
      }
    }
  }
}

TEST_F(ElementwiseCuda, GatherRowsMatchesHostLoop) {
  const int64_t tokens = 50;
  for (int64_t hidden : {int64_t{7}, int64_t{1024}}) {
    for (DType dtype : kActs) {
      for (DType out_dtype : {dtype, DType::kF32}) {
        for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{64}}) {
          for (Layout layout : kLayouts) {
            SCOPED_TRACE(fmt::format("{} of {} rows x {}: {} -> {}, x {}", n, tokens, hidden,
                                     dtype_name(dtype), dtype_name(out_dtype), layout.name()));
            Operand x = random_operand(tokens, hidden, dtype, layout, rng_);
            Tensor rows = Tensor::empty({n}, DType::kI64);
            std::uniform_int_distribution<int64_t> pick(0, tokens - 1);
            for (int64_t i = 0; i < n; ++i) {
              rows.data<int64_t>()[i] = i == 0 ? tokens - 1 : pick(rng_);
            }
            Tensor xs = x.input_f32();
            Tensor ref = Tensor::empty({n, hidden}, DType::kF32);
            for (int64_t i = 0; i < n; ++i) {
              for (int64_t c = 0; c < hidden; ++c) {
                ref.data<float>()[i * hidden + c] =
                    xs.data<float>()[rows.data<int64_t>()[i] * hidden + c];
              }
            }
            Operand out = nan_operand(n, hidden, out_dtype, layout);
            Status s = cuda::gather_rows(x.view, to_device(rows), out.view, nullptr);
            ASSERT_TRUE(s.is_ok()) << s.to_string();
            EXPECT_TRUE(same_values(out.result_f32(), ref));
            EXPECT_TRUE(out.outside_untouched());
          }
        }
      }
    }
  }
}

TEST_F(ElementwiseCuda, ZeroSlotsZeroesOnlyTheListedSlots) {
  struct Case {
    Shape shape;
    DType dtype;
  };
  // 768-byte slots (16-byte path), 18- and 20-byte slots (2-byte path).
  const Case cases[] = {
      {{9, 3, 64}, DType::kF32}, {{9, 3, 3}, DType::kBF16}, {{9, 5}, DType::kF32}};
  for (const Case& c : cases) {
    for (DType slot_dtype : {DType::kI32, DType::kI64}) {
      SCOPED_TRACE(fmt::format("state {} {} slots {}", shape_to_string(c.shape),
                               dtype_name(c.dtype), dtype_name(slot_dtype)));
      Tensor state = random_tensor(c.shape, c.dtype, rng_, 1.0f, 1.0f);
      // -1 is padding, 9 is past the state: both skipped; 2 appears twice.
      const int64_t slots[] = {2, -1, 7, 2, 0, 9, 8};
      Tensor slot_tensor = Tensor::empty({7}, slot_dtype);
      for (int i = 0; i < 7; ++i) {
        if (slot_dtype == DType::kI64) {
          slot_tensor.data<int64_t>()[i] = slots[i];
        } else {
          slot_tensor.data<int32_t>()[i] = static_cast<int32_t>(slots[i]);
        }
      }
      Tensor ref = to_f32(state);
      const int64_t per_slot = ref.numel() / c.shape[0];
      for (int64_t s : {0, 2, 7, 8}) {
        for (int64_t i = 0; i < per_slot; ++i) ref.data<float>()[s * per_slot + i] = 0.0f;
      }
      Tensor state_gpu = to_device(state);
      Status st = cuda::zero_slots(state_gpu, to_device(slot_tensor), nullptr);
      ASSERT_TRUE(st.is_ok()) << st.to_string();
      EXPECT_TRUE(same_values(to_host_f32(state_gpu), ref));
    }
  }
}

// Host reference of a conversion: decode, then round to the target dtype (as float_convert.h
// does, which matches PyTorch), decoded again to F32.
Tensor convert_on_host(const Tensor& src, DType dst) {
  Tensor f = to_f32(src);
  float* p = f.data<float>();
  for (int64_t i = 0; i < f.numel(); ++i) {
    if (dst == DType::kBF16) p[i] = bf16_to_f32(f32_to_bf16(p[i]));
    if (dst == DType::kF16) p[i] = f16_to_f32(f32_to_f16(p[i]));
  }
  return f;
}

TEST_F(ElementwiseCuda, ConvertRoundsToNearestEven) {
  const DType kFloats[] = {DType::kF32, DType::kBF16, DType::kF16};
  for (DType src_dtype : kFloats) {
    for (DType dst_dtype : kFloats) {
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{4096}, int64_t{1000003}}) {
        for (int64_t offset : {int64_t{0}, int64_t{1}}) {  // 1: unaligned views
          SCOPED_TRACE(fmt::format("{} -> {}, {} elements from offset {}", dtype_name(src_dtype),
                                   dtype_name(dst_dtype), n, offset));
          // Values up to a few hundred: inside F16's range, some of them F16 subnormals.
          Tensor src = random_tensor({n + offset}, src_dtype, rng_, 0.0f, 100.0f);
          Tensor src_gpu = to_device(src);
          Tensor dst_gpu = to_device(fill_nan({n + offset}, dst_dtype));
          Tensor src_view = src_gpu.slice(0, offset, offset + n);
          Tensor dst_view = dst_gpu.slice(0, offset, offset + n);
          Status s = cuda::convert(src_view, dst_view, nullptr);
          ASSERT_TRUE(s.is_ok()) << s.to_string();
          Tensor got = to_host_f32(dst_gpu).slice(0, offset, offset + n).clone();
          EXPECT_TRUE(
              same_values(got, convert_on_host(src.slice(0, offset, offset + n), dst_dtype)));
        }
      }
    }
  }
}

TEST_F(ElementwiseCuda, FillUniformIsReproducibleOnTheHost) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t n : {int64_t{1}, int64_t{13}, int64_t{1} << 20}) {
      for (uint64_t seed : {uint64_t{0}, uint64_t{12345}}) {
        for (auto [low, high] : {std::pair{-1e-3f, 1e-3f}, std::pair{-2.0f, 5.0f}}) {
          SCOPED_TRACE(
              fmt::format("{} x {} seed {} [{}, {})", dtype_name(dtype), n, seed, low, high));
          Tensor t = to_device(fill_nan({n}, dtype));
          Status s = cuda::fill_uniform(t, low, high, seed, nullptr);
          ASSERT_TRUE(s.is_ok()) << s.to_string();
          Tensor got = to_host_f32(t);
          Tensor ref = Tensor::empty({n}, DType::kF32);
          for (int64_t i = 0; i < n; ++i) {
            const float v = counter_uniform(seed, static_cast<uint64_t>(i), low, high);
            ref.data<float>()[i] = dtype == DType::kBF16  ? bf16_to_f32(f32_to_bf16(v))
                                   : dtype == DType::kF16 ? f16_to_f32(f32_to_f16(v))
                                                          : v;
          }
          EXPECT_TRUE(same_values(got, ref));
          if (n < 1024) continue;
          double sum = 0.0;
          float lo = high, hi = low;
          for (int64_t i = 0; i < n; ++i) {
            const float v = got.data<float>()[i];
            sum += v;
            lo = std::min(lo, v);
            hi = std::max(hi, v);
          }
          const double range = static_cast<double>(high) - low;
          EXPECT_NEAR(sum / static_cast<double>(n), (static_cast<double>(low) + high) / 2,
                      0.01 * range);
          // Rounding to BF16/F16 may step just past the ends.
          const double slack =
              dtype == DType::kF32 ? 0.0 : std::ldexp(std::max(std::abs(low), std::abs(high)), -7);
          EXPECT_GE(lo, low - slack);
          EXPECT_LE(hi, high + slack);
          EXPECT_LT(lo, low + 0.01 * range);
          EXPECT_GT(hi, high - 0.01 * range);
        }
      }
    }
  }
}

TEST_F(ElementwiseCuda, RejectsBadArguments) {
  Tensor x32 = to_device(random_tensor({2, 8}, DType::kF32, rng_, 0.0f, 1.0f));
  Tensor xbf = to_device(random_tensor({2, 8}, DType::kBF16, rng_, 0.0f, 1.0f));
  Tensor odd = to_device(random_tensor({2, 7}, DType::kF32, rng_, 0.0f, 1.0f));
  Tensor out4 = to_device(random_tensor({2, 4}, DType::kF32, rng_, 0.0f, 1.0f));
  Tensor x16 = to_device(random_tensor({2, 8}, DType::kF16, rng_, 0.0f, 1.0f));

  Status s = cuda::add_inplace(x32, xbf, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("src"), std::string::npos) << s.message();
  s = cuda::add_inplace(x16, x16, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  s = cuda::silu_and_mul(odd, out4, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  Tensor q = to_device(fill_nan({2, 2}, DType::kF32));
  Tensor g = to_device(fill_nan({2, 2}, DType::kF32));
  s = cuda::split_q_gate(x32, 3, q, g, nullptr);  // 8 columns do not split into 2 * 3
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  Tensor rows32 = to_device(Tensor::zeros({2}, DType::kI32));
  s = cuda::gather_rows(x32, rows32, x32, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("rows"), std::string::npos) << s.message();
  Tensor small = to_device(Tensor::zeros({2}, DType::kF32));
  s = cuda::convert(x32, small, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  s = cuda::fill_uniform(x32, 1.0f, 0.0f, 0, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  Tensor gate = to_device(Tensor::zeros({3, 1}, DType::kF32));
  s = cuda::add_sigmoid_gated(x32, x32, gate, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
}

// Needs no GPU: CPU tensors are refused before anything touches CUDA.
TEST(ElementwiseCudaArgs, RefusesCpuTensors) {
  Tensor x = Tensor::zeros({2, 8}, DType::kF32);
  Tensor y = Tensor::zeros({2, 8}, DType::kF32);
  Tensor out = Tensor::zeros({2, 4}, DType::kF32);
  Tensor ids = Tensor::zeros({2}, DType::kI64);
  for (Status s : {cuda::add_inplace(x, y, nullptr), cuda::silu_and_mul(x, out, nullptr),
                   cuda::embedding(ids, x, y, nullptr), cuda::gather_rows(x, ids, y, nullptr),
                   cuda::sigmoid_gate_mul(x, y, nullptr), cuda::zero_slots(x, ids, nullptr),
                   cuda::convert(x, y, nullptr), cuda::fill_uniform(x, 0.0f, 1.0f, 1, nullptr)}) {
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find("expected a CUDA tensor"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace vllm
