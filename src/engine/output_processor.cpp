#include "engine/output_processor.h"

#include <algorithm>
#include <utility>

namespace vllm::engine {

struct OutputProcessor::Child {
  std::string engine_id;
  SamplingParams params;
  std::unique_ptr<IncrementalDetokenizer> detokenizer;
  std::string text;      // all decoded text (before any stop-string cut)
  size_t emitted = 0;    // bytes of text handed out
  size_t hold_back = 0;  // bytes kept back while a stop string could still match
  CompletionOutput output;
};

struct OutputProcessor::Parent {
  std::string request_id;
  std::vector<int32_t> prompt;
  std::vector<TokenLogprobs> prompt_logprobs;
  int64_t num_cached_tokens = 0;
  std::vector<Child> children;
  size_t num_finished = 0;
};

Expected<std::vector<OutputProcessor::EngineRequest>> OutputProcessor::add_request(
    const std::string& request_id, std::span<const int32_t> prompt, const SamplingParams& params) {
  if (parents_.count(request_id) != 0) {
    return make_error(ErrorCode::kInvalidArgument, "request id {} is already in use", request_id);
  }
  if (!params.stop.empty() && tokenizer_ == nullptr) {
    return make_error(ErrorCode::kInvalidArgument,
                      "stop strings need a tokenizer (the model folder has no tokenizer.json)");
  }
  auto parent = std::make_shared<Parent>();
  parent->request_id = request_id;
  parent->prompt.assign(prompt.begin(), prompt.end());
  std::vector<EngineRequest> requests;
  const int n = std::max(params.n, 1);
  size_t longest_stop = 0;
  for (const std::string& s : params.stop) longest_stop = std::max(longest_stop, s.size());
  for (int i = 0; i < n; ++i) {
    Child child;
    child.engine_id = n == 1 ? request_id : std::to_string(i) + "_" + request_id;
    child.params = params;
    child.params.n = 1;
    if (n > 1 && params.seed.has_value()) child.params.seed = *params.seed + i;
    if (tokenizer_ != nullptr) {
      DecodeOptions options;
      options.skip_special_tokens = params.skip_special_tokens;
      options.spaces_between_special_tokens = params.spaces_between_special_tokens;
      child.detokenizer = std::make_unique<IncrementalDetokenizer>(*tokenizer_, options, prompt);
    }
    child.hold_back = params.include_stop_str_in_output || longest_stop == 0 ? 0 : longest_stop - 1;
    child.output.index = i;
    if (children_.count(child.engine_id) != 0) {
      return make_error(ErrorCode::kInvalidArgument, "request id {} is already in use",
                        child.engine_id);
    }
    requests.push_back({child.engine_id, child.params});
    parent->children.push_back(std::move(child));
  }
  for (int i = 0; i < n; ++i) children_[parent->children[static_cast<size_t>(i)].engine_id] = {parent, i};
  parents_[request_id] = parent;
  return requests;
}

bool OutputProcessor::update_child(Child& child, const EngineCoreOutput& out) {
  CompletionOutput& o = child.output;
  const size_t searched_from = child.text.size();
  for (size_t k = 0; k < out.new_token_ids.size(); ++k) {
    o.token_ids.push_back(out.new_token_ids[k]);
    if (k < out.new_logprobs.size()) o.logprobs.push_back(out.new_logprobs[k]);
    if (child.detokenizer) {
      auto piece = child.detokenizer->step(out.new_token_ids[k]);
      if (piece.has_value()) child.text += *piece;
    }
  }
  bool stopped_by_string = false;
  if (!child.params.stop.empty()) {
    // Search only where a new match can start: the new text and the longest stop's overlap.
    size_t best = std::string::npos;
    const std::string* which = nullptr;
    for (const std::string& stop : child.params.stop) {
      if (stop.empty()) continue;
      const size_t from = searched_from >= stop.size() ? searched_from - stop.size() + 1 : 0;
      const size_t at = child.text.find(stop, from);
      if (at != std::string::npos && at < best) {
        best = at;
        which = &stop;
      }
    }
    if (which != nullptr) {
      child.text.resize(child.params.include_stop_str_in_output ? best + which->size() : best);
      o.finish_reason = "stop";
      o.stop_string = *which;
      stopped_by_string = true;
    }
  }
  if (!stopped_by_string && out.finished()) {
    o.finish_reason = std::string(finish_reason(out.status));
    o.stop_token = out.stop_token;
    if (child.detokenizer && out.status != RequestStatus::kFinishedAborted) {
      auto tail = child.detokenizer->flush();
      (void)tail;  // vLLM drops an incomplete trailing character rather than emitting U+FFFD
    }
  }
  // Emit what is decided: all of it once finished, else all but the held-back tail.
  size_t limit = child.text.size();
  if (!o.finished()) limit = limit > child.hold_back ? limit - child.hold_back : 0;
  limit = std::max(limit, child.emitted);
  // Appended: several engine outputs of one request may be processed in one call (a caller
  // that drained a few steps at once); process() clears the delta once it has handed it out.
  o.delta += child.text.substr(child.emitted, limit - child.emitted);
  o.text = child.text.substr(0, limit);
  child.emitted = limit;
  return stopped_by_string;
}

std::vector<RequestOutput> OutputProcessor::process(const std::vector<EngineCoreOutput>& outputs,
                                                    std::vector<std::string>* to_abort) {
  std::vector<std::shared_ptr<Parent>> touched;
  for (const EngineCoreOutput& out : outputs) {
    auto it = children_.find(out.request_id);
    if (it == children_.end()) continue;  // e.g. the abort echo of a stop-string finish
    auto [parent, index] = it->second;
    Child& child = parent->children[static_cast<size_t>(index)];
    if (!out.prompt_logprobs.empty()) {
      parent->prompt_logprobs.insert(parent->prompt_logprobs.end(), out.prompt_logprobs.begin(),
                                     out.prompt_logprobs.end());
    }
    parent->num_cached_tokens = out.num_cached_tokens;
    const bool was_finished = child.output.finished();
    if (!was_finished) {
      if (update_child(child, out) && !out.finished()) to_abort->push_back(child.engine_id);
      if (child.output.finished()) ++parent->num_finished;
    }
    if (child.output.finished()) children_.erase(it);
    if (std::find(touched.begin(), touched.end(), parent) == touched.end()) touched.push_back(parent);
  }
  std::vector<RequestOutput> results;
  for (const auto& parent : touched) {
    RequestOutput r;
    r.request_id = parent->request_id;
    r.prompt_token_ids = parent->prompt;
    r.prompt_logprobs = parent->prompt_logprobs;
    r.num_cached_tokens = parent->num_cached_tokens;
    for (Child& child : parent->children) {
      r.outputs.push_back(child.output);
      child.output.delta.clear();
    }
    r.finished = parent->num_finished == parent->children.size();
    if (r.finished) parents_.erase(parent->request_id);
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace vllm::engine
