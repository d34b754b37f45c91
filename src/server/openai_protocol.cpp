#include "server/openai_protocol.h"

#include "cache/duration.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>

namespace strata::server {

namespace {

using ojson = nlohmann::ordered_json;

const char* kind(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null: return "null";
    case ojson::value_t::boolean: return "a boolean";
    case ojson::value_t::string: return "a string";
    case ojson::value_t::array: return "an array";
    case ojson::value_t::object: return "an object";
    case ojson::value_t::number_float:
    case ojson::value_t::number_integer:
    case ojson::value_t::number_unsigned: return "a number";
    default: return "an unsupported value";
  }
}

template <typename... Parts>
[[noreturn]] void bad(const std::string& param, const Parts&... parts) {
  throw RequestError(400, param, cat(param, ": ", parts...));
}

bool need_bool(const ojson& v, const std::string& name) {
  if (!v.is_boolean()) bad(name, "expected true or false, found ", kind(v));
  return v.get<bool>();
}

double need_number(const ojson& v, const std::string& name) {
  if (!v.is_number()) bad(name, "expected a number, found ", kind(v));
  return v.get<double>();
}

// An integer; a float with an integral value (16.0) is accepted, as JSON does not tell them apart.
int64_t need_integer(const ojson& v, const std::string& name) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) bad(name, "integer ", u, " is too large");
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) return static_cast<int64_t>(d);
    bad(name, "expected an integer, found ", d);
  }
  bad(name, "expected an integer, found ", kind(v));
}

const std::string& need_string(const ojson& v, const std::string& name) {
  if (!v.is_string()) bad(name, "expected a string, found ", kind(v));
  return v.get_ref<const std::string&>();
}

int32_t need_token_id(const ojson& v, const std::string& name) {
  const int64_t id = need_integer(v, name);
  if (id < 0 || id > std::numeric_limits<int32_t>::max()) bad(name, "expected a token id ≥ 0, found ", id);
  return static_cast<int32_t>(id);
}

std::vector<int32_t> token_ids(const ojson& v, const std::string& name) {
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    // The common case checked first, so that an id's name ("prompt[17]") is formatted only for an error: formatting
    // it for every id was most of the cost of parsing a prompt of token ids.
    if (v[i].is_number_unsigned() && v[i].get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      ids.push_back(static_cast<int32_t>(v[i].get<uint64_t>()));
      continue;
    }
    ids.push_back(need_token_id(v[i], cat(name, "[", i, "]")));
  }
  return ids;
}

void parse_stop(const ojson& v, CompletionRequest& r, const ProtocolLimits& limits) {
  std::vector<std::string> stops;
  if (v.is_string()) {
    stops.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) stops.push_back(need_string(v[i], cat("stop[", i, "]")));
  } else {
    bad("stop", "expected a string or an array of strings, found ", kind(v));
  }
  if (static_cast<int64_t>(stops.size()) > limits.max_stop_strings)
    bad("stop", "at most ", limits.max_stop_strings, " stop strings are allowed, found ", stops.size());
  for (const std::string& s : stops) {
    if (s.empty()) bad("stop", "stop strings must not be empty");
    if (static_cast<int64_t>(s.size()) > limits.max_stop_bytes)
      bad("stop", "a stop string may have at most ", limits.max_stop_bytes, " bytes, found ", s.size());
  }
  r.sampling.stop = std::move(stops);
}

void parse_prompt(const ojson& v, CompletionRequest& r, const ProtocolLimits& limits) {
  if (v.is_string()) {
    r.prompts.emplace_back(v.get<std::string>());
    return;
  }
  if (!v.is_array()) bad("prompt", "expected a string, an array of strings, or token ids, found ", kind(v));
  if (v.empty()) bad("prompt", "empty array");
  if (v[0].is_number()) {
    r.prompts.emplace_back(token_ids(v, "prompt"));
    return;
  }
  if (static_cast<int64_t>(v.size()) > limits.max_prompts)
    bad("prompt", "at most ", limits.max_prompts, " prompts per request, found ", v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string name = cat("prompt[", i, "]");
    if (v[i].is_string()) r.prompts.emplace_back(v[i].get<std::string>());
    else if (v[i].is_array() && !v[i].empty()) r.prompts.emplace_back(token_ids(v[i], name));
    else bad(name, "expected a string or a non-empty array of token ids, found ", v[i].is_array() ? "an empty array" : kind(v[i]));
  }
}

void parse_stream_options(const ojson& v, CompletionRequest& r) {
  if (!v.is_object()) bad("stream_options", "expected an object, found ", kind(v));
  for (const auto& [key, value] : v.items()) {
    const std::string name = "stream_options." + key;
    if (value.is_null()) continue;
    if (key == "include_usage") r.include_usage = need_bool(value, name);
    else bad(name, "unknown parameter (stream_options takes include_usage)");
  }
}

// Fields that exist in the OpenAI API but that this server does not implement: a clear 400 rather than a silent
// guess. Returns true when the value asks for nothing (e.g. an empty logit_bias), so the field can be ignored.
bool unsupported_is_harmless(const std::string& key, const ojson& v, const CompletionRequest& r) {
  if (key == "suffix") {
    if (v.is_string() && v.get<std::string>().empty()) return true;
    bad(key, "not supported (the model has no fill-in-the-middle format here)");
  }
  if (key == "best_of") {
    const int64_t b = need_integer(v, key);
    if (b == r.sampling.n || b == 1) return true;  // checked again against n once every field is read
    bad(key, "only best_of equal to n is supported, found ", b);
  }
  if (key == "min_tokens") {
    if (need_integer(v, key) == 0) return true;
    bad(key, "not supported yet");
  }
  if (key == "functions" || key == "function_call") bad(key, "not supported; use tools and tool_choice");
  if (key == "modalities") {
    if (v == ojson::array({"text"})) return true;
    bad(key, "only [\"text\"] is supported");
  }
  if (key == "audio" || key == "prediction" || key == "web_search_options") bad(key, "not supported");
  return false;
}

// logit_bias: {"token id": bias, ...}, the ids as decimal strings (JSON keys), each bias in [-100, 100]. Ids are
// checked against the vocabulary with the other sampling parameters (SamplingParams::validate).
void parse_logit_bias(const ojson& v, CompletionRequest& r) {
  if (!v.is_object()) bad("logit_bias", "expected an object mapping token ids (as strings, e.g. \"15339\") to biases, found ", kind(v));
  std::map<int32_t, float> bias;  // a repeated key: the last one wins, as in Python's json
  for (const auto& [key, value] : v.items()) {
    int64_t id = -1;
    const bool digits = !key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string::npos;
    if (digits) id = std::stoll(key);
    if (!digits || id > std::numeric_limits<int32_t>::max())
      bad("logit_bias", "key '", key, "' is not a token id (expected a non-negative integer as a string, e.g. \"15339\")");
    if (!value.is_number()) bad("logit_bias", "the bias of token ", key, " must be a number in [-100, 100], found ", kind(value));
    const double amount = value.get<double>();
    if (!(amount >= -100 && amount <= 100))
      bad("logit_bias", "the bias of token ", key, " must be a number in [-100, 100], found ", amount);
    bias[static_cast<int32_t>(id)] = static_cast<float>(amount);
  }
  r.sampling.logit_bias.assign(bias.begin(), bias.end());
}

// metadata: OpenAI's limits (at most 16 pairs, keys up to 64 characters, string values up to 512), checked so a
// request that OpenAI would refuse is refused here too; the pairs themselves are not kept (nothing is stored).
void check_metadata(const ojson& v) {
  if (!v.is_object()) bad("metadata", "expected an object of string values, found ", kind(v));
  if (v.size() > 16) bad("metadata", "at most 16 key-value pairs, found ", v.size());
  for (const auto& [key, value] : v.items()) {
    if (key.size() > 64) bad("metadata", "key '", key.substr(0, 64), "...' is longer than 64 characters");
    if (!value.is_string()) bad("metadata", "the value of '", key, "' must be a string, found ", kind(value));
    if (value.get_ref<const std::string&>().size() > 512)
      bad("metadata", "the value of '", key, "' is longer than 512 characters");
  }
}

// vLLM's structured_outputs: exactly one of regex, json (a schema, as an object or its JSON text), grammar (EBNF),
// choice (strings), or json_object: true.
void parse_structured_outputs(const ojson& v, CompletionRequest& r) {
  const std::string name = "structured_outputs";
  if (!v.is_object()) bad(name, "expected an object with one of regex, json, grammar, choice, json_object, found ", kind(v));
  std::vector<std::string> given;
  for (const auto& [key, value] : v.items()) {
    if (value.is_null()) continue;
    const std::string field = name + "." + key;
    OutputGrammar g;
    g.param = field;
    if (key == "regex") {
      g.kind = text::grammar::SourceKind::kRegex;
      g.source = need_string(value, field);
    } else if (key == "grammar") {
      g.kind = text::grammar::SourceKind::kEbnf;
      g.source = need_string(value, field);
    } else if (key == "json") {
      g.kind = text::grammar::SourceKind::kJsonSchema;
      if (value.is_object() || value.is_boolean()) g.source = value.dump();
      else if (value.is_string()) g.source = value.get<std::string>();
      else bad(field, "expected a JSON Schema (an object, or its JSON text as a string), found ", kind(value));
    } else if (key == "choice") {
      g.kind = text::grammar::SourceKind::kChoice;
      if (!value.is_array() || value.empty()) bad(field, "expected a non-empty array of strings, found ", value.is_array() ? "an empty array" : kind(value));
      for (size_t i = 0; i < value.size(); ++i) need_string(value[i], cat(field, "[", i, "]"));
      g.source = value.dump();
    } else if (key == "json_object") {
      if (!need_bool(value, field)) continue;
      g.kind = text::grammar::SourceKind::kJsonObject;
    } else {
      bad(field, "unknown parameter (structured_outputs takes regex, json, grammar, choice or json_object)");
    }
    given.push_back(key);
    r.grammar = std::move(g);
  }
  if (given.empty()) bad(name, "expected one of regex, json, grammar, choice, json_object");
  if (given.size() > 1) bad(name, "give one of regex, json, grammar, choice, json_object; found ", given[0], " and ", given[1]);
}

// response_format (already checked by the chat encoder, which also shows the schema in the prompt): json_object
// and json_schema become the output's grammar; json_schema.strict must be a boolean (the schema is enforced either
// way, as vLLM does).
void response_format_grammar(const ojson& request, CompletionRequest& r) {
  const auto it = request.find("response_format");
  if (it == request.end() || it->is_null()) return;
  const std::string type = it->value("type", "");
  if (type == "text") return;
  if (r.grammar) bad("response_format", "give response_format or structured_outputs, not both");
  OutputGrammar g;
  g.param = "response_format";
  if (type == "json_object") {
    g.kind = text::grammar::SourceKind::kJsonObject;
  } else {
    const ojson& json_schema = it->at("json_schema");
    if (const auto strict = json_schema.find("strict"); strict != json_schema.end() && !strict->is_null())
      need_bool(*strict, "response_format.json_schema.strict");
    g.kind = text::grammar::SourceKind::kJsonSchema;
    g.source = json_schema.at("schema").dump();
    g.param = "response_format.json_schema.schema";
  }
  r.grammar = std::move(g);
}

bool is_unsupported_field(const std::string& key) {
  static const char* const kFields[] = {"suffix",   "best_of",    "min_tokens", "functions",  "function_call",
                                        "modalities", "audio", "prediction", "web_search_options"};
  for (const char* f : kFields)
    if (key == f) return true;
  return false;
}

// The deepest array/object nesting of a JSON text (strings skipped). Checked before parsing: code that walks a
// request recursively (the chat encoder renders tool schemas) must never meet a body nested a million deep.
size_t nesting_depth(std::string_view text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char ch : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (ch == '\\') escaped = true;
      else if (ch == '"') in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((ch == ']' || ch == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

std::string error_body(std::string_view message, std::string_view type, std::string_view param, std::string_view code) {
  ojson error = ojson::object();
  error["message"] = message;
  error["type"] = type;
  error["param"] = param.empty() ? ojson(nullptr) : ojson(param);
  error["code"] = code.empty() ? ojson(nullptr) : ojson(code);
  return ojson{{"error", error}}.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::string error_body(const RequestError& e) { return error_body(e.what(), e.type(), e.param(), e.code()); }

RequestError as_request_error(const Error& e, std::string_view rename_prompt_to) {
  const std::string message = e.what();
  std::string param;
  const size_t colon = message.find(": ");
  if (colon != std::string::npos && colon > 0 && message.find(' ') > colon) param = message.substr(0, colon);
  if (!rename_prompt_to.empty() && param == "prompt") param = rename_prompt_to;
  return RequestError(400, param, message);
}

CompletionRequest parse_completion_request(Endpoint endpoint, std::string_view body, const ProtocolLimits& limits) {
  CompletionRequest r;
  r.endpoint = endpoint;
  const bool chat = endpoint == Endpoint::kChatCompletions;
  constexpr size_t kMaxDepth = 64;
  if (nesting_depth(body) > kMaxDepth)
    throw RequestError(400, "", cat("the request body nests JSON deeper than ", kMaxDepth, " levels"));
  ojson request;
  try {
    request = ojson::parse(body);
  } catch (const ojson::exception& e) {
    throw RequestError(400, "", cat("the request body is not valid JSON (", e.what(), ")"));
  }
  if (!request.is_object()) throw RequestError(400, "", cat("the request body must be a JSON object, found ", kind(request)));

  // Defaults that differ from SamplingParams': OpenAI's completions default to 16 tokens (set later when absent).
  bool have_logprobs_flag = false, have_top_logprobs = false, have_stream_options = false;
  std::optional<int64_t> max_tokens, max_completion_tokens;
  std::vector<std::pair<std::string, const ojson*>> deferred;  // checked after n is known

  using Handler = std::function<void(const ojson&, const std::string&)>;
  const std::map<std::string, Handler> common = {
      {"model", [&](const ojson& v, const std::string& k) { r.model = need_string(v, k); }},
      {"stream", [&](const ojson& v, const std::string& k) { r.stream = need_bool(v, k); }},
      {"stream_options",
       [&](const ojson& v, const std::string&) {
         parse_stream_options(v, r);
         have_stream_options = true;
       }},
      {"temperature", [&](const ojson& v, const std::string& k) { r.sampling.temperature = need_number(v, k); }},
      {"top_p", [&](const ojson& v, const std::string& k) { r.sampling.top_p = need_number(v, k); }},
      {"top_k",
       [&](const ojson& v, const std::string& k) {
         const int64_t top_k = need_integer(v, k);
         r.sampling.top_k = top_k == -1 ? 0 : top_k;  // vLLM spells "off" as -1
       }},
      {"min_p", [&](const ojson& v, const std::string& k) { r.sampling.min_p = need_number(v, k); }},
      {"presence_penalty", [&](const ojson& v, const std::string& k) { r.sampling.presence_penalty = need_number(v, k); }},
      {"frequency_penalty", [&](const ojson& v, const std::string& k) { r.sampling.frequency_penalty = need_number(v, k); }},
      {"repetition_penalty",
       [&](const ojson& v, const std::string& k) { r.sampling.repetition_penalty = need_number(v, k); }},
      {"seed",
       [&](const ojson& v, const std::string& k) {
         if (v.is_number_unsigned()) r.sampling.seed = v.get<uint64_t>();
         else r.sampling.seed = static_cast<uint64_t>(need_integer(v, k));
       }},
      {"stop", [&](const ojson& v, const std::string&) { parse_stop(v, r, limits); }},
      {"stop_token_ids",
       [&](const ojson& v, const std::string& k) {
         if (!v.is_array()) bad(k, "expected an array of token ids, found ", kind(v));
         r.sampling.stop_token_ids = token_ids(v, k);
       }},
      {"max_tokens", [&](const ojson& v, const std::string& k) { max_tokens = need_integer(v, k); }},
      {"n", [&](const ojson& v, const std::string& k) { r.sampling.n = need_integer(v, k); }},
      {"ignore_eos", [&](const ojson& v, const std::string& k) { r.sampling.ignore_eos = need_bool(v, k); }},
      {"logit_bias", [&](const ojson& v, const std::string&) { parse_logit_bias(v, r); }},
      // The prefix cache's isolation key, traffic class and retention (CompletionRequest says what they do).
      {"prompt_cache_key", [&](const ojson& v, const std::string& k) { r.prompt_cache_key = need_string(v, k); }},
      {"cache_class",
       [&](const ojson& v, const std::string& k) {
         r.cache_class = need_string(v, k);
         if (r.cache_class != "chat" && r.cache_class != "agent") bad(k, "expected chat or agent, found '", r.cache_class, "'");
       }},
      {"prompt_cache_retention",
       [&](const ojson& v, const std::string& k) {
         const std::string& text = need_string(v, k);
         if (text == "in-memory") {
           r.cache_retention_seconds = 3600;
           return;
         }
         try {
           r.cache_retention_seconds = cache::parse_duration_seconds(text);
         } catch (const Error& e) {
           bad(k, e.what(), " (or in-memory)");
         }
       }},
      // Accepted and ignored (README.md, "Serving", says why): an end-user id, the metadata and store of OpenAI's
      // stored completions (nothing is stored), and a service tier (there is one).
      {"user", [&](const ojson& v, const std::string& k) { need_string(v, k); }},
      {"metadata", [&](const ojson& v, const std::string&) { check_metadata(v); }},
      {"store", [&](const ojson& v, const std::string& k) { need_bool(v, k); }},
      {"service_tier",
       [&](const ojson& v, const std::string& k) {
         const std::string& tier = need_string(v, k);
         if (tier != "auto" && tier != "default" && tier != "flex" && tier != "scale" && tier != "priority")
           bad(k, "expected one of auto, default, flex, scale, priority, found '", tier, "'");
       }},
      {"skip_special_tokens", [&](const ojson& v, const std::string& k) { r.skip_special_tokens = need_bool(v, k); }},
      {"structured_outputs", [&](const ojson& v, const std::string&) { parse_structured_outputs(v, r); }},
      {"include_stop_str_in_output",
       [&](const ojson& v, const std::string& k) { r.include_stop_str_in_output = need_bool(v, k); }},
  };
  // Read by the V4 chat encoder (text::chat_request_options checks them and names the field).
  static const char* const kChatEncoderFields[] = {"messages", "tools", "tool_choice", "response_format",
                                                    "reasoning_effort", "chat_template_kwargs"};
  const std::map<std::string, Handler> chat_only = {
      {"parallel_tool_calls", [&](const ojson& v, const std::string& k) { r.parallel_tool_calls = need_bool(v, k); }},
      {"max_completion_tokens", [&](const ojson& v, const std::string& k) { max_completion_tokens = need_integer(v, k); }},
      {"logprobs",
       [&](const ojson& v, const std::string& k) {
         r.logprobs = need_bool(v, k);
         have_logprobs_flag = true;
       }},
      {"top_logprobs",
       [&](const ojson& v, const std::string& k) {
         r.top_logprobs = need_integer(v, k);
         have_top_logprobs = true;
         if (r.top_logprobs < 0 || r.top_logprobs > 20) bad(k, "expected a count in [0, 20], found ", r.top_logprobs);
       }},
  };
  const std::map<std::string, Handler> completions_only = {
      {"prompt", [&](const ojson& v, const std::string&) { parse_prompt(v, r, limits); }},
      {"echo", [&](const ojson& v, const std::string& k) { r.echo = need_bool(v, k); }},
      {"add_special_tokens", [&](const ojson& v, const std::string& k) { r.add_special_tokens = need_bool(v, k); }},
      {"logprobs",
       [&](const ojson& v, const std::string& k) {
         r.top_logprobs = need_integer(v, k);
         if (r.top_logprobs < 0 || r.top_logprobs > 20) bad(k, "expected a count in [0, 20], found ", r.top_logprobs);
         r.logprobs = true;
       }},
  };

  for (const auto& [key, value] : request.items()) {
    const bool encoder_field =
        chat && std::find(std::begin(kChatEncoderFields), std::end(kChatEncoderFields), key) != std::end(kChatEncoderFields);
    if (encoder_field) continue;
    if (value.is_null()) continue;
    const auto& own = chat ? chat_only : completions_only;
    if (const auto it = common.find(key); it != common.end()) it->second(value, key);
    else if (const auto it2 = own.find(key); it2 != own.end()) it2->second(value, key);
    else if (is_unsupported_field(key)) deferred.emplace_back(key, &value);
    else if (key == "prompt" && chat) bad(key, "unknown parameter for /v1/chat/completions (use messages)");
    else if (key == "messages" && !chat) bad(key, "unknown parameter for /v1/completions (use prompt, or /v1/chat/completions)");
    else bad(key, "unknown parameter");
  }
  for (const auto& [key, value] : deferred) unsupported_is_harmless(key, *value, r);

  if (have_stream_options && !r.stream) bad("stream_options", "only allowed when stream is true");
  if (r.sampling.n < 1) bad("n", "expected a count ≥ 1, found ", r.sampling.n);
  if (r.sampling.n > limits.max_n) bad("n", "at most ", limits.max_n, " completions per request, found ", r.sampling.n);
  if (chat) {
    if (have_top_logprobs && !r.logprobs) bad("top_logprobs", "requires logprobs to be true");
    (void)have_logprobs_flag;
    if (max_completion_tokens) max_tokens = max_completion_tokens;  // the newer name wins, as in OpenAI's API
    try {
      r.chat_options = text::chat_request_options(request);
    } catch (const RequestError&) {
      throw;
    } catch (const Error& e) {
      throw as_request_error(e);
    }
    response_format_grammar(request, r);
    r.chat = std::move(request);
  } else {
    if (r.prompts.empty()) bad("prompt", "missing");
    if (r.echo && r.logprobs) bad("echo", "echo together with logprobs is not supported (prompt logprobs are not computed)");
  }
  if (max_tokens) {
    const std::string name = chat && max_completion_tokens ? "max_completion_tokens" : "max_tokens";
    if (*max_tokens < 0) bad(name, "expected a count ≥ 0, found ", *max_tokens);
    r.sampling.max_tokens = *max_tokens;
    r.max_tokens_given = true;
    r.max_tokens_param = name;
  }
  if (r.logprobs) r.sampling.logprobs = r.top_logprobs;
  try {
    r.sampling.validate(limits.vocab_size);
  } catch (const Error& e) {
    throw as_request_error(e);
  }
  return r;
}

nlohmann::ordered_json Usage::to_json() const {
  return ojson{{"prompt_tokens", prompt_tokens},
               {"completion_tokens", completion_tokens},
               {"total_tokens", prompt_tokens + completion_tokens},
               {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}},
               {"prompt_cache_hit_tokens", cached_tokens},
               {"prompt_cache_miss_tokens", prompt_tokens - cached_tokens}};
}

std::string new_response_id(Endpoint endpoint) {
  thread_local std::mt19937_64 rng{std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32)};
  static const char* const kHex = "0123456789abcdef";
  std::string id = endpoint == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-";
  for (int part = 0; part < 2; ++part) {
    uint64_t bits = rng();
    for (int i = 0; i < 12; ++i, bits >>= 4) id += kHex[bits & 15];
  }
  return id;
}

}  // namespace strata::server
