#include "disagg/prefill_order.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace strata::disagg {

std::string to_json(const PrefillOrder& order) {
  nlohmann::json j = {{"request_id", order.request_id},
                      {"tokens", order.tokens},
                      {"cache", order.cache},
                      {"cache_scope", order.cache_scope},
                      {"cache_ttl_seconds", order.cache_ttl_seconds}};
  if (order.shared_floats) {
    j["shared_floats"] = true;
    j["lease_ms"] = order.lease_ms;
  }
  return j.dump();
}

PrefillOrder parse_prefill_order(std::string_view body) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail("prefill order: the body is not a JSON object");
  PrefillOrder o;
  const auto tokens = j.find("tokens");
  if (tokens == j.end() || !tokens->is_array() || tokens->empty())
    fail("prefill order: 'tokens' must be a non-empty array of token ids");
  o.tokens.reserve(tokens->size());
  for (size_t i = 0; i < tokens->size(); ++i) {
    const nlohmann::json& t = (*tokens)[i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
      fail("prefill order: tokens[", i, "] is not a token id");
    o.tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  if (const auto id = j.find("request_id"); id != j.end()) {
    if (!id->is_string()) fail("prefill order: 'request_id' must be a string");
    o.request_id = id->get<std::string>();
  }
  if (const auto c = j.find("cache"); c != j.end()) {
    if (!c->is_boolean()) fail("prefill order: 'cache' must be true or false");
    o.cache = c->get<bool>();
  }
  if (const auto s = j.find("cache_scope"); s != j.end()) {
    if (!s->is_string()) fail("prefill order: 'cache_scope' must be a string");
    o.cache_scope = s->get<std::string>();
  }
  if (const auto t = j.find("cache_ttl_seconds"); t != j.end()) {
    if (!t->is_number_integer() || t->get<int64_t>() < 0)
      fail("prefill order: 'cache_ttl_seconds' must be a whole number ≥ 0");
    o.cache_ttl_seconds = t->get<int64_t>();
  }
  if (const auto f = j.find("shared_floats"); f != j.end()) {
    if (!f->is_boolean()) fail("prefill order: 'shared_floats' must be true or false");
    o.shared_floats = f->get<bool>();
  }
  if (const auto l = j.find("lease_ms"); l != j.end()) {
    if (!l->is_number_integer() || l->get<int64_t>() < 1 || l->get<int64_t>() > int64_t{24} * 3600 * 1000)
      fail("prefill order: 'lease_ms' must be a whole number of milliseconds in [1, 86400000]");
    o.lease_ms = l->get<int64_t>();
  }
  return o;
}

std::string release_json(const std::string& handle) { return nlohmann::json{{"handle", handle}}.dump(); }

std::string parse_release(std::string_view body) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail("release: the body is not a JSON object");
  const auto h = j.find("handle");
  if (h == j.end() || !h->is_string() || h->get<std::string>().empty())
    fail("release: 'handle' must be the shared region's handle (the X-Strata-Shared-Floats header of the prefill)");
  return h->get<std::string>();
}

}  // namespace strata::disagg
