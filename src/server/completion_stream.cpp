#include "server/completion_stream.h"

#include <algorithm>
#include <cmath>

#include "text/tokenizer.h"

namespace strata::server {

namespace {

using ojson = nlohmann::ordered_json;

std::string dump(const ojson& value) { return value.dump(-1, ' ', false, ojson::error_handler_t::replace); }

int64_t count_code_points(std::string_view text) {
  int64_t n = 0;
  for (const char ch : text) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
  return n;
}

// JSON has no -inf: a logprob that underflows is reported as -9999 (vLLM does the same).
double json_logprob(float lp) { return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0; }

void merge(text::OutputDelta& into, text::OutputDelta more) {
  into.reasoning_content += more.reasoning_content;
  into.content += more.content;
  for (text::ToolCallDelta& d : more.tool_calls) {
    auto it = std::find_if(into.tool_calls.begin(), into.tool_calls.end(),
                           [&](const text::ToolCallDelta& t) { return t.index == d.index; });
    if (it == into.tool_calls.end()) {
      into.tool_calls.push_back(std::move(d));
      continue;
    }
    if (d.id) it->id = d.id;
    if (d.name) it->name = d.name;
    it->arguments_delta += d.arguments_delta;
  }
}

const char* reason_name(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::Stop: return "stop";
    case engine::FinishReason::Length: return "length";
    case engine::FinishReason::Abort: return "abort";
    case engine::FinishReason::None: break;
  }
  return "stop";
}

}  // namespace

std::string sse_event(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 8);
  out.append("data: ").append(payload).append("\n\n");
  return out;
}

CompletionStream::Choice::Choice(const text::Tokenizer& tokenizer, bool skip_special, std::vector<std::string> stops,
                                 bool include_stop)
    : detokenizer(tokenizer, skip_special), stop(std::move(stops), include_stop) {}

CompletionStream::CompletionStream(const CompletionRequest& request, const text::Tokenizer& tokenizer, std::string id,
                                   int64_t created, std::string model, std::vector<int64_t> prompt_tokens,
                                   std::vector<std::string> echo)
    : tokenizer_(tokenizer),
      endpoint_(request.endpoint),
      id_(std::move(id)),
      model_(std::move(model)),
      created_(created),
      stream_(request.stream),
      include_usage_(request.stream && request.include_usage),
      logprobs_(request.logprobs),
      first_tool_call_only_(!request.parallel_tool_calls),
      n_(request.sampling.n),
      prompt_tokens_(std::move(prompt_tokens)),
      echo_(std::move(echo)) {
  const bool chat = endpoint_ == Endpoint::kChatCompletions;
  const std::string call_prefix = "call_" + id_.substr(id_.find('-') + 1, 12) + "_";
  for (size_t p = 0; p < prompt_tokens_.size(); ++p) {
    for (int64_t i = 0; i < n_; ++i) {
      Choice& c = choices_.emplace_back(tokenizer_, request.skip_special_tokens, request.sampling.stop,
                                        request.include_stop_str_in_output);
      c.prompt = p;
      if (chat) {
        const text::ChatRequestOptions& o = request.chat_options;
        text::ParserOptions po;
        po.thinking = o.thinking;
        po.tools_enabled = !o.tool_names.empty() && o.tool_choice != text::ToolChoice::kNone;
        po.tool_call_id_prefix = call_prefix + std::to_string(choices_.size() - 1) + "_";
        c.parser.emplace(po);
        if (logprobs_) c.logprobs = ojson::array();
      } else if (logprobs_) {
        c.logprobs = ojson{{"tokens", ojson::array()},
                           {"token_logprobs", ojson::array()},
                           {"top_logprobs", ojson::array()},
                           {"text_offset", ojson::array()}};
      }
      if (!chat && p < echo_.size()) {
        c.text = echo_[p];
        c.chars = count_code_points(echo_[p]);
      }
    }
  }
  unfinished_ = choices_.size();
  // {"id":…,"model":…} → data: {"id":…,"model":…,"choices":[   …   ],"usage":null}\n\n
  std::string envelope_json = dump(envelope(true));
  envelope_json.pop_back();
  chunk_head_ = "data: " + envelope_json + ",\"choices\":[";
  chunk_tail_ = std::string("]") + (include_usage_ ? ",\"usage\":null" : "") + "}\n\n";
}

ojson CompletionStream::envelope(bool chunk) const {
  const bool chat = endpoint_ == Endpoint::kChatCompletions;
  ojson out = ojson::object();
  out["id"] = id_;
  out["object"] = chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  out["created"] = created_;
  out["model"] = model_;
  return out;
}

std::string CompletionStream::chunk_sse(ojson choice) const {
  const std::string body = dump(choice);
  std::string out;
  out.reserve(chunk_head_.size() + body.size() + chunk_tail_.size());
  return out.append(chunk_head_).append(body).append(chunk_tail_);
}

std::string CompletionStream::text_chunk_sse(size_t index, const std::string& text, const Choice& c, bool ending) const {
  const std::string escaped = text.empty() ? std::string() : dump(ojson(text));  // nlohmann's own escaping
  const std::string reason = ending ? dump(ojson(c.finish_reason)) : std::string("null");
  std::string out;
  out.reserve(chunk_head_.size() + escaped.size() + reason.size() + chunk_tail_.size() + 80);
  out.append(chunk_head_).append("{\"index\":").append(std::to_string(index));
  if (endpoint_ == Endpoint::kChatCompletions) {
    out.append(",\"delta\":{");
    if (!text.empty()) out.append("\"content\":").append(escaped);
    out.append("}");
  } else {
    out.append(",\"text\":").append(text.empty() ? std::string("\"\"") : escaped);
  }
  out.append(",\"logprobs\":null,\"finish_reason\":").append(reason).append("}").append(chunk_tail_);
  return out;
}

std::string CompletionStream::begin_sse() {
  std::string out;
  const bool chat = endpoint_ == Endpoint::kChatCompletions;
  for (size_t i = 0; i < choices_.size(); ++i) {
    ojson choice = ojson::object();
    choice["index"] = i;
    if (chat) {
      choice["delta"] = ojson{{"role", "assistant"}, {"content", ""}};
    } else {
      if (choices_[i].text.empty()) continue;  // nothing echoed
      choice["text"] = choices_[i].text;
    }
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = nullptr;
    out += chunk_sse(std::move(choice));
  }
  return out;
}

void CompletionStream::add_logprobs(Choice& c, const engine::TokenEvent& event, ojson& chunk_logprobs) const {
  const auto token_text = [&](int32_t id, std::string& bytes) {
    bytes = std::string(tokenizer_.token_bytes(id, false));
    std::string text;
    text::append_utf8_lossy(bytes, true, text);
    return text;
  };
  const auto byte_list = [](const std::string& bytes) {
    ojson list = ojson::array();
    for (const char ch : bytes) list.push_back(static_cast<unsigned char>(ch));
    return list;
  };
  std::string bytes;
  const std::string text = token_text(*event.token, bytes);
  if (endpoint_ == Endpoint::kChatCompletions) {
    ojson entry = ojson::object();
    entry["token"] = text;
    entry["logprob"] = json_logprob(event.logprob);
    entry["bytes"] = byte_list(bytes);
    ojson top = ojson::array();
    for (const auto& [id, lp] : event.top_logprobs) {
      std::string top_bytes;
      const std::string top_text = token_text(id, top_bytes);
      top.push_back(ojson{{"token", top_text}, {"logprob", json_logprob(lp)}, {"bytes", byte_list(top_bytes)}});
    }
    entry["top_logprobs"] = std::move(top);
    c.logprobs.push_back(entry);
    if (!chunk_logprobs.is_array()) chunk_logprobs = ojson::array();
    chunk_logprobs.push_back(std::move(entry));
    return;
  }
  // The legacy API always lists the sampled token among the alternatives, so there may be logprobs + 1 of them
  // (OpenAI's documented behaviour, and vLLM's); logprobs 0 gives just the sampled token.
  ojson top = ojson::object();
  bool sampled_listed = false;
  for (const auto& [id, lp] : event.top_logprobs) {
    std::string top_bytes;
    top[token_text(id, top_bytes)] = json_logprob(lp);
    sampled_listed = sampled_listed || id == *event.token;
  }
  if (!sampled_listed && !top.contains(text)) top[text] = json_logprob(event.logprob);
  if (!chunk_logprobs.is_object())
    chunk_logprobs = ojson{{"tokens", ojson::array()},
                           {"token_logprobs", ojson::array()},
                           {"top_logprobs", ojson::array()},
                           {"text_offset", ojson::array()}};
  for (ojson* columns : {&c.logprobs, &chunk_logprobs}) {
    (*columns)["tokens"].push_back(text);
    (*columns)["token_logprobs"].push_back(json_logprob(event.logprob));
    (*columns)["top_logprobs"].push_back(top);
    (*columns)["text_offset"].push_back(c.chars);
  }
}

StreamUpdate CompletionStream::on_event(size_t index, const engine::TokenEvent& event) {
  StreamUpdate update;
  if (index >= choices_.size()) return update;
  Choice& c = choices_[index];
  if (c.finished) return update;  // e.g. the abort that follows a stop string

  std::string text;
  ojson chunk_logprobs;  // null unless this event adds logprobs
  if (event.token) {
    if (c.tokens == 0) c.cached_tokens = event.cached_tokens;
    ++c.tokens;
    const bool stop_token = event.finished && event.reason == engine::FinishReason::Stop;
    if (!stop_token) {
      if (logprobs_) add_logprobs(c, event, chunk_logprobs);
      text = c.detokenizer.push(*event.token);
    }
  }
  if (event.finished) text += c.detokenizer.flush();
  c.chars += count_code_points(text);
  std::string released = c.stop.push(text);
  const bool stop_hit = c.stop.stopped();
  if (event.finished && !stop_hit) released += c.stop.flush();
  const bool ending = event.finished || stop_hit;

  text::OutputDelta delta;
  if (c.parser) {
    if (!released.empty()) delta = c.parser->push(released);
    if (ending) merge(delta, c.parser->finish());
  } else {
    delta.content = released;
  }
  // parallel_tool_calls false: the calls after the first are dropped (the V4 model may write several in one turn).
  if (first_tool_call_only_)
    std::erase_if(delta.tool_calls, [](const text::ToolCallDelta& d) { return d.index > 0; });
  c.text += delta.content;
  c.reasoning += delta.reasoning_content;
  for (const text::ToolCallDelta& d : delta.tool_calls) {
    if (static_cast<size_t>(d.index) >= c.tool_calls.size()) c.tool_calls.resize(static_cast<size_t>(d.index) + 1);
    ToolCall& call = c.tool_calls[static_cast<size_t>(d.index)];
    if (d.id) call.id = *d.id;
    if (d.name) call.name = *d.name;
    call.arguments += d.arguments_delta;
  }

  if (ending) {
    c.finished = true;
    --unfinished_;
    c.finish_reason = stop_hit ? "stop" : reason_name(event.reason);
    if (c.finish_reason == "stop" && !c.tool_calls.empty()) c.finish_reason = "tool_calls";
    update.choice_finished = true;
    update.abort_sequence = stop_hit && !event.finished;
  }
  if (!stream_) return update;

  const bool has_delta = !delta.content.empty() || !delta.reasoning_content.empty() || !delta.tool_calls.empty();
  if (!has_delta && chunk_logprobs.is_null() && !ending) return update;
  if (chunk_logprobs.is_null() && delta.reasoning_content.empty() && delta.tool_calls.empty()) {
    update.sse = text_chunk_sse(index, delta.content, c, ending);
    return update;
  }
  ojson choice = ojson::object();
  choice["index"] = index;
  if (endpoint_ == Endpoint::kChatCompletions) {
    ojson d = ojson::object();
    if (!delta.reasoning_content.empty()) d["reasoning_content"] = delta.reasoning_content;
    if (!delta.content.empty()) d["content"] = delta.content;
    if (!delta.tool_calls.empty()) {
      ojson calls = ojson::array();
      for (const text::ToolCallDelta& t : delta.tool_calls) {
        ojson call = ojson::object();
        call["index"] = t.index;
        if (t.id) call["id"] = *t.id;
        if (t.id || t.name) call["type"] = "function";
        ojson function = ojson::object();
        if (t.name) function["name"] = *t.name;
        function["arguments"] = t.arguments_delta;
        call["function"] = std::move(function);
        calls.push_back(std::move(call));
      }
      d["tool_calls"] = std::move(calls);
    }
    choice["delta"] = std::move(d);
    choice["logprobs"] = chunk_logprobs.is_null() ? ojson(nullptr) : ojson{{"content", std::move(chunk_logprobs)}};
  } else {
    choice["text"] = delta.content;
    choice["logprobs"] = std::move(chunk_logprobs);
  }
  choice["finish_reason"] = ending ? ojson(c.finish_reason) : ojson(nullptr);
  update.sse = chunk_sse(std::move(choice));
  return update;
}

std::string CompletionStream::end_sse() const {
  std::string out;
  if (include_usage_) {
    ojson chunk = envelope(true);
    chunk["choices"] = ojson::array();
    chunk["usage"] = usage().to_json();
    out += sse_event(dump(chunk));
  }
  out += kSseDone;
  return out;
}

Usage CompletionStream::usage() const {
  Usage u;
  for (int64_t t : prompt_tokens_) u.prompt_tokens += t;
  for (const Choice& c : choices_) u.completion_tokens += c.tokens;
  // A prompt's n choices are n sequences that each may have hit: the prompt counts once, with its first choice's.
  const size_t per_prompt = prompt_tokens_.empty() ? 1 : std::max<size_t>(1, choices_.size() / prompt_tokens_.size());
  for (size_t i = 0; i < choices_.size(); i += per_prompt) u.cached_tokens += choices_[i].cached_tokens;
  return u;
}

std::string CompletionStream::response_body() const {
  ojson body = envelope(false);
  ojson choices = ojson::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    ojson choice = ojson::object();
    choice["index"] = i;
    if (endpoint_ == Endpoint::kChatCompletions) {
      ojson message = ojson::object();
      message["role"] = "assistant";
      message["content"] = c.text.empty() && !c.tool_calls.empty() ? ojson(nullptr) : ojson(c.text);
      if (!c.reasoning.empty()) message["reasoning_content"] = c.reasoning;
      if (!c.tool_calls.empty()) {
        ojson calls = ojson::array();
        for (const ToolCall& t : c.tool_calls)
          calls.push_back(ojson{{"id", t.id}, {"type", "function"}, {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
        message["tool_calls"] = std::move(calls);
      }
      choice["message"] = std::move(message);
      choice["logprobs"] = logprobs_ ? ojson{{"content", c.logprobs}} : ojson(nullptr);
    } else {
      choice["text"] = c.text;
      choice["logprobs"] = logprobs_ ? c.logprobs : ojson(nullptr);
    }
    choice["finish_reason"] = c.finished ? ojson(c.finish_reason) : ojson(nullptr);
    choices.push_back(std::move(choice));
  }
  body["choices"] = std::move(choices);
  body["usage"] = usage().to_json();
  return dump(body);
}

}  // namespace strata::server
