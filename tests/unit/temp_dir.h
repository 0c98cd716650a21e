// A fresh, uniquely named folder under the system temp dir, removed with its contents when
// the object goes out of scope. For tests that write files.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace vllm::testing {

class TempDir {
 public:
  explicit TempDir(std::string_view tag = "vllm_test") {
    static std::atomic<uint64_t> counter{0};
    const auto ticks = std::chrono::steady_clock::now().time_since_epoch().count();
    path_ = std::filesystem::temp_directory_path() /
            (std::string(tag) + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) +
             "_" + std::to_string(ticks));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }

  // Writes `bytes` to path()/name and returns the full path.
  std::filesystem::path write(std::string_view name, const std::vector<uint8_t>& bytes) const {
    std::filesystem::path p = path_ / name;
    std::ofstream out(p, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  std::filesystem::path write(std::string_view name, std::string_view text) const {
    return write(name, std::vector<uint8_t>(text.begin(), text.end()));
  }

 private:
  std::filesystem::path path_;
};

}  // namespace vllm::testing
