#include "parallel/step_channel.h"

#include <algorithm>
#include <cstring>

namespace vllm::parallel {

uint64_t ShmStepChannel::min_consumed() const {
  uint64_t lowest = UINT64_MAX;
  for (int r = 1; r < group_->world_size(); ++r) {
    lowest = std::min(lowest, group_->ring_consumed(r).load(std::memory_order_acquire));
  }
  return lowest;
}

Status ShmStepChannel::write(const char* data, size_t bytes) {
  const uint64_t capacity = group_->ring_bytes();
  std::atomic<uint64_t>& written = group_->ring_written();
  while (bytes > 0) {
    const uint64_t w = written.load(std::memory_order_relaxed);  // only rank 0 writes it
    VLLM_RETURN_IF_ERROR(
        group_->wait(group_->ring_read_event(), [&] { return w - min_consumed() < capacity; }));
    const uint64_t space = capacity - (w - min_consumed());
    const uint64_t to_end = capacity - w % capacity;
    const size_t n = static_cast<size_t>(std::min<uint64_t>({bytes, space, to_end}));
    std::memcpy(group_->ring() + w % capacity, data, n);
    written.store(w + n, std::memory_order_release);
    group_->notify(group_->ring_write_event());
    data += n;
    bytes -= n;
  }
  return Status::ok();
}

Status ShmStepChannel::read(char* data, size_t bytes) {
  const uint64_t capacity = group_->ring_bytes();
  std::atomic<uint64_t>& written = group_->ring_written();
  std::atomic<uint64_t>& consumed = group_->ring_consumed(group_->rank());
  while (bytes > 0) {
    const uint64_t c = consumed.load(std::memory_order_relaxed);  // only this rank writes it
    VLLM_RETURN_IF_ERROR(group_->wait(group_->ring_write_event(),
                                      [&] { return written.load(std::memory_order_acquire) > c; }));
    const uint64_t available = written.load(std::memory_order_acquire) - c;
    const uint64_t to_end = capacity - c % capacity;
    const size_t n = static_cast<size_t>(std::min<uint64_t>({bytes, available, to_end}));
    std::memcpy(data, group_->ring() + c % capacity, n);
    consumed.store(c + n, std::memory_order_release);
    group_->notify(group_->ring_read_event());
    data += n;
    bytes -= n;
  }
  return Status::ok();
}

Status ShmStepChannel::publish(std::string_view message) {
  if (group_->rank() != 0) {
    return make_error(ErrorCode::kInternal, "rank {} cannot publish step inputs", group_->rank());
  }
  const uint64_t size = message.size();
  VLLM_RETURN_IF_ERROR(write(reinterpret_cast<const char*>(&size), sizeof(size)));
  return write(message.data(), message.size());
}

Expected<std::string> ShmStepChannel::receive() {
  uint64_t size = 0;
  VLLM_RETURN_IF_ERROR(read(reinterpret_cast<char*>(&size), sizeof(size)));
  if (size > kMaxStepMessageBytes) {
    return make_error(ErrorCode::kInvalidFormat, "a step message of {} bytes is over the limit",
                      size);
  }
  std::string message(static_cast<size_t>(size), '\0');
  VLLM_RETURN_IF_ERROR(read(message.data(), message.size()));
  return message;
}

Status TcpStepChannel::publish(std::string_view message) {
  for (Socket* peer : peers_) {
    Status sent = peer->send_frame(message);
    if (!sent.is_ok()) return sent.with_context("sending the step inputs to a worker");
  }
  return Status::ok();
}

Expected<std::string> TcpStepChannel::receive() {
  if (peers_.size() != 1) {
    return make_error(ErrorCode::kInternal, "a worker's step channel has one peer, not {}",
                      peers_.size());
  }
  auto message = peers_[0]->recv_frame(kMaxStepMessageBytes, no_deadline(), check_);
  if (!message) return message.status().with_context("receiving the step inputs from rank 0");
  return message;
}

}  // namespace vllm::parallel
