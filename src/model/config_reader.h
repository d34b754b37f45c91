#pragma once
// Reading config.json values with type checks: the building blocks every part of parse_config uses
// (src/model/config*.cpp only; everyone else includes model/config.h).
//
// Every error names the file and the field, dotted for nested ones ("config.json: field
// 'rope_parameters.compress.factor': ..."), and says what was expected and what was found.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace strata::model::config_json {

using nlohmann::json;

// "integer", "string", ...: the JSON kind of a value, as error messages name it.
std::string kind(const json& v);
// "integer 7", "string 'foo'", "array [1,2,...": enough of the value to recognise it in a big file.
std::string describe(const json& v);

std::string child(const std::string& parent, std::string_view key);  // "parent.key"
std::string element(const std::string& parent, size_t i);            // "parent[i]"

// Where errors are attributed ("config.json" or the file path), and the typed reads that raise them.
struct ConfigReader {
  std::string source;

  template <typename... Parts>
  [[noreturn]] void bad(const std::string& field, const Parts&... parts) const {
    fail(source, ": field '", field, "': ", parts...);
  }

  int64_t as_int(const json& v, const std::string& field) const;  // 4096.0 is not an integer (Python's check)
  double as_number(const json& v, const std::string& field) const;
  bool as_bool(const json& v, const std::string& field) const;
  std::string as_string(const json& v, const std::string& field) const;
  const json& as_array(const json& v, const std::string& field) const;
  const json& as_object(const json& v, const std::string& field) const;
};

// Lookup: a missing key is nullptr. find_nonnull also treats an explicit null as missing (the dataclass field is
// Optional, or transformers reads it with `or`).
const json* find(const json& obj, std::string_view key);
const json* find_nonnull(const json& obj, std::string_view key);

// Field names in errors: top-level keys appear bare, nested ones dotted ("rope_parameters.compress.factor").
std::string name(const std::string& parent, std::string_view key);

// Reads obj[key] with its type checked, or `def` when the key is absent. `parent` names the enclosing object.
int64_t int_or(const ConfigReader& r, const json& obj, std::string_view key, int64_t def, const std::string& parent = "");
double number_or(const ConfigReader& r, const json& obj, std::string_view key, double def,
                 const std::string& parent = "");
bool bool_or(const ConfigReader& r, const json& obj, std::string_view key, bool def, const std::string& parent = "");
std::string string_or(const ConfigReader& r, const json& obj, std::string_view key, std::string def,
                      const std::string& parent = "");
// `int | None` fields: null and absent differ only in that absent keeps the default.
std::optional<int64_t> nullable_int_or(const ConfigReader& r, const json& obj, std::string_view key,
                                       std::optional<int64_t> def);
// Absent and null are both nullopt.
std::optional<double> nullable_number(const ConfigReader& r, const json& obj, std::string_view key,
                                      const std::string& parent);
std::optional<std::string> nullable_string(const ConfigReader& r, const json& obj, std::string_view key,
                                           const std::string& parent = "");

template <size_t N>
bool contains(const std::string_view (&list)[N], std::string_view key) {
  for (std::string_view k : list)
    if (k == key) return true;
  return false;
}

}  // namespace strata::model::config_json
