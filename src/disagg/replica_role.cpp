#include "disagg/replica_role.h"

#include "core/error.h"

namespace strata::disagg {

const char* to_string(Role role) {
  switch (role) {
    case Role::Both: return "both";
    case Role::Prefill: return "prefill";
    case Role::Decode: return "decode";
  }
  return "both";
}

Role parse_role(std::string_view text) {
  if (text == "both") return Role::Both;
  if (text == "prefill") return Role::Prefill;
  if (text == "decode") return Role::Decode;
  fail("expected both, prefill or decode, found '", text, "'");
}

}  // namespace strata::disagg
