// A progress bar on stderr for long benchmark runs, in tqdm's layout when stderr is a
// terminal ("desc: 45%|████▌     | 45/100 [00:12<00:15, 3.61it/s]", redrawn in place at most
// ten times a second), and a plain line every `interval` otherwise (logs, CI), so a long run
// shows it is alive without flooding a log. Thread-safe: workers call update() directly.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace vllm::bench {

class ProgressBar {
 public:
  // disabled: prints nothing (vLLM's --disable-tqdm).
  ProgressBar(int64_t total, std::string desc, bool disabled = false,
              std::FILE* out = stderr, std::chrono::seconds interval = std::chrono::seconds(10));
  ~ProgressBar();  // close()

  void update(int64_t n = 1);
  // Draws the final state and ends the line; later updates are ignored.
  void close();

  // The bar text for `done` of `total` after `elapsed_s` seconds, `width` cells wide.
  static std::string render(const std::string& desc, int64_t done, int64_t total, double elapsed_s,
                            int width = 30);

 private:
  void draw(bool force);

  std::mutex mutex_;
  int64_t total_;
  int64_t done_ = 0;
  std::string desc_;
  bool disabled_;
  bool tty_;
  bool closed_ = false;
  std::FILE* out_;
  std::chrono::seconds interval_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace vllm::bench
