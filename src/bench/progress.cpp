// Progress bar on stderr; see progress.h.
#include "bench/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace vllm::bench {
namespace {

std::string clock_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(seconds);
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{:02}:{:02}", s / 60, s % 60);
}

}  // namespace

ProgressBar::ProgressBar(int64_t total, std::string desc, bool disabled, std::FILE* out,
                         std::chrono::seconds interval)
    : total_(total),
      desc_(std::move(desc)),
      disabled_(disabled),
      tty_(::isatty(::fileno(out)) != 0),
      out_(out),
      interval_(interval),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {
  std::lock_guard<std::mutex> lock(mutex_);
  draw(/*force=*/true);
}

ProgressBar::~ProgressBar() { close(); }

std::string ProgressBar::render(const std::string& desc, int64_t done, int64_t total,
                                double elapsed_s, int width) {
  const double frac = total > 0 ? std::clamp(static_cast<double>(done) / total, 0.0, 1.0) : 1.0;
  // Eighth-cell blocks, as tqdm draws them.
  static const char* kPartial[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
  const int eighths = static_cast<int>(frac * width * 8);
  std::string bar;
  for (int i = 0; i < eighths / 8; ++i) bar += "█";
  int cells = eighths / 8;
  if (cells < width && eighths % 8 != 0) {
    bar += kPartial[eighths % 8];
    ++cells;
  }
  bar += std::string(width - cells, ' ');
  const double rate = elapsed_s > 0 ? done / elapsed_s : 0.0;
  const double remaining = rate > 0 ? (total - done) / rate : NAN;
  const std::string prefix = desc.empty() ? "" : desc + ": ";
  return fmt::format("{}{:3.0f}%|{}| {}/{} [{}<{}, {:.2f}it/s]", prefix, std::floor(frac * 100), bar,
                     done, total, clock_text(elapsed_s), clock_text(remaining), rate);
}

void ProgressBar::draw(bool force) {
  if (disabled_ || closed_) return;
  const auto now = std::chrono::steady_clock::now();
  const auto min_gap = tty_ ? std::chrono::milliseconds(100)
                            : std::chrono::duration_cast<std::chrono::milliseconds>(interval_);
  if (!force && now - last_draw_ < min_gap) return;
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const std::string text = render(desc_, done_, total_, elapsed);
  if (tty_) {
    std::fprintf(out_, "\r%s", text.c_str());
  } else {
    std::fprintf(out_, "%s\n", text.c_str());
  }
  std::fflush(out_);
}

void ProgressBar::update(int64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  done_ += n;
  draw(/*force=*/false);
}

void ProgressBar::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_) return;
  // A terminal sees the final state; a log only gets a last line if the run was long enough
  // to have printed progress lines at all.
  const bool long_run = std::chrono::steady_clock::now() - start_ >= interval_;
  if (tty_ || long_run) draw(/*force=*/true);
  if (tty_ && !disabled_) std::fputc('\n', out_);
  closed_ = true;
}

}  // namespace vllm::bench
