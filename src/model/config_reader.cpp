#include "model/config_reader.h"

#include <limits>

namespace strata::model::config_json {

std::string kind(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer";
    case json::value_t::number_float: return "number";
    case json::value_t::string: return "string";
    case json::value_t::array: return "array";
    case json::value_t::object: return "object";
    default: return "invalid value";
  }
}

std::string describe(const json& v) {
  std::string text = v.is_string() ? "'" + v.get<std::string>() + "'" : v.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return kind(v) + " " + text;
}

std::string child(const std::string& parent, std::string_view key) { return parent + "." + std::string(key); }
std::string element(const std::string& parent, size_t i) { return cat(parent, "[", i, "]"); }

int64_t ConfigReader::as_int(const json& v, const std::string& field) const {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) bad(field, "integer out of range: ", u);
    return static_cast<int64_t>(u);
  }
  // Python's strict dataclass check rejects 4096.0 for an int field; so do we.
  if (!v.is_number_integer()) bad(field, "expected an integer, found ", describe(v));
  return v.get<int64_t>();
}

double ConfigReader::as_number(const json& v, const std::string& field) const {
  if (!v.is_number()) bad(field, "expected a number, found ", describe(v));
  return v.get<double>();
}

bool ConfigReader::as_bool(const json& v, const std::string& field) const {
  if (!v.is_boolean()) bad(field, "expected a boolean, found ", describe(v));
  return v.get<bool>();
}

std::string ConfigReader::as_string(const json& v, const std::string& field) const {
  if (!v.is_string()) bad(field, "expected a string, found ", describe(v));
  return v.get<std::string>();
}

const json& ConfigReader::as_array(const json& v, const std::string& field) const {
  if (!v.is_array()) bad(field, "expected an array, found ", describe(v));
  return v;
}

const json& ConfigReader::as_object(const json& v, const std::string& field) const {
  if (!v.is_object()) bad(field, "expected an object, found ", describe(v));
  return v;
}

const json* find(const json& obj, std::string_view key) {
  auto it = obj.find(std::string(key));
  return it == obj.end() ? nullptr : &*it;
}

const json* find_nonnull(const json& obj, std::string_view key) {
  const json* v = find(obj, key);
  return v == nullptr || v->is_null() ? nullptr : v;
}

std::string name(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : child(parent, key);
}

int64_t int_or(const ConfigReader& r, const json& obj, std::string_view key, int64_t def, const std::string& parent) {
  const json* v = find(obj, key);
  return v ? r.as_int(*v, name(parent, key)) : def;
}

double number_or(const ConfigReader& r, const json& obj, std::string_view key, double def, const std::string& parent) {
  const json* v = find(obj, key);
  return v ? r.as_number(*v, name(parent, key)) : def;
}

bool bool_or(const ConfigReader& r, const json& obj, std::string_view key, bool def, const std::string& parent) {
  const json* v = find(obj, key);
  return v ? r.as_bool(*v, name(parent, key)) : def;
}

std::string string_or(const ConfigReader& r, const json& obj, std::string_view key, std::string def,
                      const std::string& parent) {
  const json* v = find(obj, key);
  return v ? r.as_string(*v, name(parent, key)) : def;
}

std::optional<int64_t> nullable_int_or(const ConfigReader& r, const json& obj, std::string_view key,
                                       std::optional<int64_t> def) {
  const json* v = find(obj, key);
  if (!v) return def;
  if (v->is_null()) return std::nullopt;
  return r.as_int(*v, std::string(key));
}

std::optional<double> nullable_number(const ConfigReader& r, const json& obj, std::string_view key,
                                      const std::string& parent) {
  const json* v = find_nonnull(obj, key);
  if (!v) return std::nullopt;
  return r.as_number(*v, name(parent, key));
}

std::optional<std::string> nullable_string(const ConfigReader& r, const json& obj, std::string_view key,
                                           const std::string& parent) {
  const json* v = find_nonnull(obj, key);
  if (!v) return std::nullopt;
  return r.as_string(*v, name(parent, key));
}

}  // namespace strata::model::config_json
