// Server-sent events, as an OpenAI-compatible server streams them: bytes arrive in arbitrary
// pieces; each event ends at a blank line and its `data:` lines are its payload. Comments
// (lines starting with ':', often pings) and other fields are skipped. vLLM's client splits
// on "\n\n" the same way; we also accept "\r\n" line ends, which the SSE spec allows.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace vllm::bench {

class SseParser {
 public:
  // Feeds bytes; returns the data of every event completed by them, in order.
  std::vector<std::string> add_chunk(std::string_view bytes);
  // The data of a last event the stream ended without a blank line after (or nothing).
  std::vector<std::string> finish();

 private:
  void end_event(std::vector<std::string>& out);
  void take_line(std::string_view line, std::vector<std::string>& out);

  std::string line_;   // the current, unfinished line
  std::string data_;   // the current event's data so far
  bool has_data_ = false;
};

}  // namespace vllm::bench
