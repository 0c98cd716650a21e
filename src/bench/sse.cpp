// Server-sent events parser; see sse.h.
#include "bench/sse.h"

namespace vllm::bench {

void SseParser::end_event(std::vector<std::string>& out) {
  if (has_data_) out.push_back(std::move(data_));
  data_.clear();
  has_data_ = false;
}

void SseParser::take_line(std::string_view line, std::vector<std::string>& out) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.empty()) return end_event(out);
  if (line.front() == ':') return;  // a comment
  const size_t colon = line.find(':');
  const std::string_view field = line.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field != "data") return;  // event, id, retry: not used by OpenAI streams
  if (has_data_) data_ += '\n';
  data_ += value;
  has_data_ = true;
}

std::vector<std::string> SseParser::add_chunk(std::string_view bytes) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t nl = bytes.find('\n', start);
    if (nl == std::string_view::npos) {
      line_.append(bytes.substr(start));
      return out;
    }
    if (line_.empty()) {
      take_line(bytes.substr(start, nl - start), out);
    } else {
      line_.append(bytes.substr(start, nl - start));
      take_line(line_, out);
      line_.clear();
    }
    start = nl + 1;
  }
}

std::vector<std::string> SseParser::finish() {
  std::vector<std::string> out;
  if (!line_.empty()) {
    take_line(line_, out);
    line_.clear();
  }
  end_event(out);
  return out;
}

}  // namespace vllm::bench
