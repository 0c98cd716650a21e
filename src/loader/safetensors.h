// Reader for the safetensors format, the way Hugging Face checkpoints store weights.
//
// Layout: an 8-byte little-endian u64 N, N bytes of JSON header, then the data section.
// The header maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the data section) plus an optional "__metadata__" object of strings. Files are
// untrusted input: parse_header() validates everything the way the reference Rust crate does
// (entries sorted by offset must tile the data section exactly, sizes must match shapes) and
// returns a typed error naming the file, the tensor and what is wrong. open() mmaps the file
// read-only; tensor() returns zero-copy views that keep the mapping alive, so the views are
// read-only memory and must not be written through.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace vllm {

// Header larger than this is refused, as in the Hugging Face crate (100 MB).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t data_begin = 0;  // byte offsets relative to the start of the data section
  uint64_t data_end = 0;
};

struct SafetensorsHeader {
  uint64_t header_bytes = 0;              // N, the JSON length (including any padding)
  uint64_t data_start = 0;                // 8 + N: file offset of the data section
  uint64_t data_bytes = 0;                // size of the data section
  std::vector<SafetensorsEntry> entries;  // sorted by data_begin (file order)
  std::map<std::string, std::string> metadata;
};

class SafetensorsFile {
 public:
  // Maps `path` read-only and validates it. kNotFound if it does not exist, kIoError if the
  // OS refuses, kInvalidFormat / kUnsupported if its contents are malformed.
  static Expected<SafetensorsFile> open(const std::filesystem::path& path);

  // Parses and validates a whole file held in memory; `source_name` names it in errors.
  static Expected<SafetensorsHeader> parse_header(std::span<const uint8_t> file_bytes,
                                                  std::string_view source_name);

  const std::filesystem::path& path() const { return path_; }
  size_t size() const { return header_.entries.size(); }
  // Tensor names in file (offset) order.
  std::vector<std::string> names() const;
  const std::vector<SafetensorsEntry>& entries() const { return header_.entries; }
  // The entry for `name`, or nullptr.
  const SafetensorsEntry* find(std::string_view name) const;
  bool contains(std::string_view name) const { return find(name) != nullptr; }
  // A CPU view into the mapping (zero-copy). A tensor whose data is not aligned to its
  // element size in the file (legal, but not what writers produce) is returned as a copy.
  Expected<Tensor> tensor(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }

  // The whole mapped file.
  std::span<const uint8_t> bytes() const;

 private:
  struct Mapping;

  std::filesystem::path path_;
  std::shared_ptr<Mapping> mapping_;
  SafetensorsHeader header_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in entries
};

// A tensor view of `entry` inside `file_bytes` (the same bytes parse_header validated).
// `keepalive` owns those bytes. Unaligned data is copied (see SafetensorsFile::tensor).
Tensor safetensors_entry_tensor(const SafetensorsEntry& entry, const SafetensorsHeader& header,
                                std::span<const uint8_t> file_bytes,
                                std::shared_ptr<void> keepalive);

}  // namespace vllm
