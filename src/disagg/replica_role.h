#pragma once
// What a `strata serve` replica does in a prefill/decode-disaggregated deployment (docs/disaggregation.md).
#include <string>
#include <string_view>

namespace strata::disagg {

enum class Role {
  Both,     // answers completions; prefills them itself, or on a prefill replica when one is named
  Prefill,  // answers /strata/v1/prefill only: computes prompts and ships their state
  Decode,   // answers completions; their prompts are prefilled by a prefill replica when one is named
};

const char* to_string(Role role);        // "both", "prefill", "decode"
Role parse_role(std::string_view text);  // throws strata::Error naming the accepted values (callers say where)

}  // namespace strata::disagg
