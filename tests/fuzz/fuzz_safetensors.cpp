// libFuzzer target for the safetensors header parser: the first code that touches a
// downloaded checkpoint. Any input must either be rejected with a Status or yield entries
// that tile the data section exactly; every tensor view must then be readable end to end
// (ASan checks the bounds) and survive a write/re-parse round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"

namespace {

void require(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "fuzz_safetensors invariant broken: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  auto header = vllm::SafetensorsFile::parse_header(bytes, "fuzz-input");
  if (!header.has_value()) {
    require(!header.status().message().empty(), "error without a message");
    return 0;
  }
  require(header->data_start + header->data_bytes == size, "data section does not end the file");
  uint64_t covered = 0;
  vllm::NamedTensors tensors;
  volatile uint8_t sink = 0;
  for (const vllm::SafetensorsEntry& entry : header->entries) {
    require(entry.data_begin == covered, "entries do not tile the data section");
    covered = entry.data_end;
    vllm::Tensor t = vllm::safetensors_entry_tensor(entry, *header, bytes, nullptr);
    require(t.nbytes() == entry.data_end - entry.data_begin, "tensor size differs from offsets");
    const auto* p = static_cast<const uint8_t*>(t.data_ptr());
    uint8_t acc = 0;
    for (size_t i = 0; i < t.nbytes(); ++i) acc ^= p[i];
    sink = sink ^ acc;
    tensors.emplace_back(entry.name, t);
  }
  require(covered == header->data_bytes, "entries do not cover the data section");

  auto rewritten = vllm::serialize_safetensors(tensors, header->metadata);
  require(rewritten.has_value(), "a parsed file cannot be written back");
  auto again = vllm::SafetensorsFile::parse_header(*rewritten, "fuzz-rewritten");
  require(again.has_value(), "a written file does not parse");
  require(again->entries.size() == header->entries.size(), "round trip changed the tensors");
  require(again->metadata == header->metadata, "round trip changed the metadata");
  require(again->data_bytes == header->data_bytes, "round trip changed the data size");
  return 0;
}
