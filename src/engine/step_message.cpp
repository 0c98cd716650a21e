#include "engine/step_message.h"

#include <cstring>
#include <type_traits>
#include <vector>

namespace vllm::engine {
namespace {

constexpr uint32_t kMagic = 0x53544550;  // "STEP"
constexpr uint32_t kVersion = 1;

class Writer {
 public:
  template <typename T>
  void put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const char*>(&value);
    out_.append(p, sizeof(T));
  }
  template <typename T>
  void put_array(const T* data, size_t count) {
    put<uint64_t>(count);
    out_.append(reinterpret_cast<const char*>(data), count * sizeof(T));
  }
  template <typename T>
  void put_vector(const std::vector<T>& v) {
    put_array(v.data(), v.size());
  }
  // A CPU tensor's shape and elements (undefined: rank 0).
  void put_tensor(const Tensor& t) {
    if (!t.defined()) {
      put<uint8_t>(0);
      return;
    }
    VLLM_CHECK_MSG(t.device().is_cpu() && t.is_contiguous(), "step message of {}", t.to_string());
    put<uint8_t>(static_cast<uint8_t>(t.ndim()));
    put<uint8_t>(static_cast<uint8_t>(t.dtype()));
    for (int64_t d : t.shape()) put<int64_t>(d);
    out_.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}

  template <typename T>
  Status get(T& value) {
    VLLM_RETURN_IF_ERROR(need(sizeof(T)));
    std::memcpy(&value, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::ok();
  }
  template <typename T>
  Status get_vector(std::vector<T>& v) {
    uint64_t count = 0;
    VLLM_RETURN_IF_ERROR(get(count));
    if (count > (in_.size() - pos_) / sizeof(T)) return truncated();
    v.resize(static_cast<size_t>(count));
    // An empty vector's data() may be null, which memcpy must not be given even for 0 bytes.
    if (count > 0) std::memcpy(v.data(), in_.data() + pos_, v.size() * sizeof(T));
    pos_ += v.size() * sizeof(T);
    return Status::ok();
  }
  Status get_tensor(Tensor& t, DType expected, int ndim) {
    uint8_t rank = 0, dtype = 0;
    VLLM_RETURN_IF_ERROR(get(rank));
    if (rank == 0) {
      t = Tensor();
      return Status::ok();
    }
    VLLM_RETURN_IF_ERROR(get(dtype));
    if (rank != ndim || dtype != static_cast<uint8_t>(expected)) {
      return make_error(ErrorCode::kInvalidFormat,
                        "step message: a tensor of {} dimensions and dtype {} where {} and {} "
                        "were expected",
                        rank, dtype, ndim, dtype_name(expected));
    }
    Shape shape(rank);
    uint64_t numel = 1;
    for (int64_t& d : shape) {
      VLLM_RETURN_IF_ERROR(get(d));
      if (d < 0 || (d > 0 && numel > (in_.size() - pos_) / static_cast<uint64_t>(d))) {
        return truncated();
      }
      numel *= static_cast<uint64_t>(d);
    }
    const size_t bytes = static_cast<size_t>(numel) * dtype_size(expected);
    VLLM_RETURN_IF_ERROR(need(bytes));
    t = Tensor::empty(shape, expected);
    if (bytes > 0) std::memcpy(t.data_ptr(), in_.data() + pos_, bytes);
    pos_ += bytes;
    return Status::ok();
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  Status need(size_t bytes) const { return bytes > in_.size() - pos_ ? truncated() : Status::ok(); }
  static Status truncated() {
    return make_error(ErrorCode::kInvalidFormat, "step message: truncated or corrupt");
  }

  std::string_view in_;
  size_t pos_ = 0;
};

Status check_batch(const ForwardBatch& b) {
  const int64_t tokens = b.num_tokens(), requests = b.num_requests();
  auto bad = [](const char* what) {
    return make_error(ErrorCode::kInvalidFormat, "step message: {}", what);
  };
  if (b.positions.numel() != tokens || b.slot_mapping.numel() != tokens) {
    return bad("positions and slot_mapping must have one entry per token");
  }
  if (static_cast<int64_t>(b.query_start_loc.size()) != requests + 1 ||
      static_cast<int64_t>(b.state_indices.size()) != requests ||
      (b.block_tables.defined() && b.block_tables.size(0) != requests)) {
    return bad("query_start_loc, state_indices and block_tables must match seq_lens");
  }
  if (b.query_start_loc.front() != 0 || b.query_start_loc.back() != tokens) {
    return bad("query_start_loc must run from 0 to the token count");
  }
  for (size_t r = 0; r + 1 < b.query_start_loc.size(); ++r) {
    if (b.query_start_loc[r + 1] < b.query_start_loc[r]) return bad("query_start_loc decreases");
  }
  for (int64_t row : b.logits_indices) {
    if (row < 0 || row >= tokens) return bad("a logits row is outside the batch");
  }
  return Status::ok();
}

}  // namespace

std::string encode_step_message(const StepMessage& m) {
  Writer w;
  w.put(kMagic);
  w.put(kVersion);
  w.put(static_cast<uint8_t>(m.kind));
  if (m.kind == StepKind::kInitCache) {
    w.put<int64_t>(m.cache.num_blocks);
    w.put<int64_t>(m.cache.block_size);
    w.put<int64_t>(m.cache.num_state_slots);
  } else if (m.kind == StepKind::kForward) {
    const ForwardBatch& b = m.forward.batch;
    w.put_tensor(b.token_ids);
    w.put_tensor(b.positions);
    w.put_tensor(b.slot_mapping);
    w.put_tensor(b.block_tables);
    w.put_vector(b.query_start_loc);
    w.put_vector(b.seq_lens);
    w.put_vector(b.state_indices);
    w.put_vector(b.logits_indices);
    w.put_vector(m.forward.restores.src_slots);
    w.put_vector(m.forward.restores.dst_slots);
    w.put_vector(m.forward.saves.src_slots);
    w.put_vector(m.forward.saves.dst_slots);
  }
  return w.take();
}

Expected<StepMessage> decode_step_message(std::string_view bytes) {
  Reader r(bytes);
  uint32_t magic = 0, version = 0;
  uint8_t kind = 0;
  VLLM_RETURN_IF_ERROR(r.get(magic));
  VLLM_RETURN_IF_ERROR(r.get(version));
  if (magic != kMagic || version != kVersion) {
    return make_error(ErrorCode::kInvalidFormat,
                      "step message: not a step of this build (magic {:#x}, version {})", magic,
                      version);
  }
  VLLM_RETURN_IF_ERROR(r.get(kind));
  StepMessage m;
  m.kind = static_cast<StepKind>(kind);
  switch (m.kind) {
    case StepKind::kInitCache:
      VLLM_RETURN_IF_ERROR(r.get(m.cache.num_blocks));
      VLLM_RETURN_IF_ERROR(r.get(m.cache.block_size));
      VLLM_RETURN_IF_ERROR(r.get(m.cache.num_state_slots));
      break;
    case StepKind::kForward: {
      ForwardBatch& b = m.forward.batch;
      VLLM_RETURN_IF_ERROR(r.get_tensor(b.token_ids, DType::kI64, 1));
      VLLM_RETURN_IF_ERROR(r.get_tensor(b.positions, DType::kI64, 1));
      VLLM_RETURN_IF_ERROR(r.get_tensor(b.slot_mapping, DType::kI64, 1));
      VLLM_RETURN_IF_ERROR(r.get_tensor(b.block_tables, DType::kI32, 2));
      VLLM_RETURN_IF_ERROR(r.get_vector(b.query_start_loc));
      VLLM_RETURN_IF_ERROR(r.get_vector(b.seq_lens));
      VLLM_RETURN_IF_ERROR(r.get_vector(b.state_indices));
      VLLM_RETURN_IF_ERROR(r.get_vector(b.logits_indices));
      VLLM_RETURN_IF_ERROR(r.get_vector(m.forward.restores.src_slots));
      VLLM_RETURN_IF_ERROR(r.get_vector(m.forward.restores.dst_slots));
      VLLM_RETURN_IF_ERROR(r.get_vector(m.forward.saves.src_slots));
      VLLM_RETURN_IF_ERROR(r.get_vector(m.forward.saves.dst_slots));
      VLLM_RETURN_IF_ERROR(check_batch(b));
      break;
    }
    case StepKind::kShutdown:
      break;
    default:
      return make_error(ErrorCode::kInvalidFormat, "step message: unknown kind {}", kind);
  }
  if (!r.done()) {
    return make_error(ErrorCode::kInvalidFormat, "step message: {} trailing bytes", bytes.size());
  }
  return m;
}

}  // namespace vllm::engine
