#pragma once
// The pre-tokenizer of a tokenizer.json: cuts text into the pieces BPE sees, as HF tokenizers does.
//
// Supported steps (what the DeepSeek tokenizers use): Split (regex or literal pattern, every delimiter behaviour,
// invert) and ByteLevel (add_prefix_space, use_regex), nested in Sequence. HF compiles Split regexes with
// Oniguruma; we compile them with PCRE2 (JIT, UTF + UCP) after rewriting the few constructs whose meaning differs
// between the two engines (see onig_to_pcre2).
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::text {

// Rewrites an Oniguruma (Ruby syntax) pattern so that PCRE2 with PCRE2_UTF | PCRE2_UCP matches the same strings:
// \s \S \d \D \w \W \h \H get Oniguruma's Unicode definitions (PCRE2's \s also matches U+180E, its \w lacks marks,
// its \h is horizontal space), and \p{L} \p{M} \p{N} \p{P} \p{S} (and \pL ...) gain the code points Unicode
// 15.0–16.0 assigned to them: HF tokenizers' Oniguruma knows Unicode 16.0, Debian 12's PCRE2 10.42 knows 14.0.
std::string onig_to_pcre2(std::string_view pattern);

// How a Split step treats the delimiters it finds (HF's SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// One compiled Split pattern. Matching is thread-safe.
class SplitRegex {
 public:
  SplitRegex(const std::string& onig_pattern, const std::string& where);  // throws naming `where` on bad patterns
  // Appends [start, end) of every match in `text`, non-overlapping, left to right, the way Oniguruma's find_iter
  // reports them (an empty match right after the previous match is skipped).
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const;

 private:
  std::shared_ptr<void> code_;  // pcre2_code_8, JIT-compiled
};

class PreTokenizer {
 public:
  // `spec` is tokenizer.json's "pre_tokenizer" (null: the whole text is one piece). `where` names it in errors.
  static PreTokenizer from_json(const nlohmann::json& spec, const std::string& where);

  // Appends the pieces of `text` to `pieces`. A piece points into `text` or into a string kept in `arena`.
  // When byte_level() is true, pieces are raw bytes still to be spelled in the byte-level alphabet.
  void split(std::string_view text, std::vector<std::string_view>& pieces, std::deque<std::string>& arena) const;
  bool byte_level() const { return final_byte_level_; }

 private:
  struct Step {
    enum class Kind { kSplit, kByteLevel } kind = Kind::kSplit;
    std::shared_ptr<const SplitRegex> regex;  // kSplit, and kByteLevel with use_regex
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // kByteLevel
    bool map_bytes = true;          // kByteLevel: false for the last step (BPE maps bytes itself)
  };
  static void add_steps(const nlohmann::json& spec, const std::string& where, std::vector<Step>& steps);
  static void apply_split(const Step& step, std::string_view piece, std::vector<std::string_view>& out,
                          std::vector<std::pair<size_t, size_t>>& scratch);

  std::vector<Step> steps_;
  bool final_byte_level_ = false;
};

}  // namespace strata::text
