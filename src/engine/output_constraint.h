#pragma once
// Structured outputs in the engine: what a request's output must follow (a compiled grammar, where it starts,
// tokens never allowed), and one sequence's state under it. The engine asks a sequence's ConstrainedOutput for the
// allowed-token mask of its next pick (model::TokenMask, applied where the logits are) and hands it every token
// picked; the grammar engine itself is text/grammar/.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "model/logits_stage.h"
#include "text/grammar/compiled_grammar.h"
#include "text/grammar/grammar_matcher.h"

namespace strata::engine {

// Shared by every sequence of a request (and, through the grammar, by requests with the same grammar).
struct OutputConstraint {
  // The grammar the output follows, from the first token or from `starts_after`; null: none (only `banned`).
  std::shared_ptr<const text::grammar::CompiledGrammar> grammar;
  // Thinking mode: the grammar applies after this token ("</think>"); the reasoning before it is free.
  std::optional<int32_t> starts_after;
  // Never allowed, before the grammar starts too (tool_choice "none": the DSML markup token).
  std::vector<int32_t> banned;

  // The checks SamplingParams::validate runs: ids inside the vocabulary, something to constrain.
  void validate(int64_t vocab_size) const;
};

// One sequence's position under its constraint (owns its GrammarMatcher). Not thread-safe: the engine thread's.
class ConstrainedOutput {
 public:
  // `eos` is allowed when nothing else is (a grammar that cannot go on ends the output).
  ConstrainedOutput(std::shared_ptr<const OutputConstraint> constraint, int64_t vocab_size, int32_t eos);

  // The tokens the next pick may choose; null when nothing is constrained at this point. The mask is rebuilt in a
  // buffer of its own whenever the previous one is still held (by a step in flight).
  std::shared_ptr<const model::TokenMask> next_mask();
  // The picked token. False when the grammar refuses it (a pick outside the mask: never, short of a bug).
  bool accept(int32_t token);

  // Speculative decoding (docs/mtp.md): how many of `drafts`, in order, the constraint allows from here (the first
  // it refuses, and everything after, would be rejected by the masked verification anyway), and the masks of the
  // rows after each of the first `count` drafts — row j + 1 of the verify span picks with drafts 0..j accepted.
  // Both leave this position as it was.
  size_t allowed_prefix(std::span<const int32_t> drafts);
  // The tokens a draft after `drafts` may be (the MTP layer drafts under the grammar, so that chains go on through
  // forced structure); nullopt when the constraint refuses one of `drafts`, a null mask when nothing constrains that
  // position. Leaves this position as it was.
  std::optional<std::shared_ptr<const model::TokenMask>> mask_after(std::span<const int32_t> drafts);
  std::vector<std::shared_ptr<const model::TokenMask>> masks_after(std::span<const int32_t> drafts, size_t count);
  // The grammar accepted its end (eos): nothing may follow.
  bool terminated() const { return matcher_ && matcher_->is_terminated(); }
  // Whether the grammar is in force (after `starts_after`, or from the start).
  bool active() const { return active_; }

  // Grammar masks built so far (engine statistics: the cost per constrained token).
  int64_t masks_built() const { return masks_built_; }

 private:
  std::shared_ptr<model::TokenMask> writable_buffer();
  // Fills `mask` with what the next pick may choose at this position (the grammar active).
  void fill(model::TokenMask& mask);
  // One accepted token, undoable: whether it started the grammar and whether the matcher took a step.
  struct Advance {
    bool started = false, stepped = false;
  };
  std::optional<Advance> advance(int32_t token);
  void undo(const Advance& a);
  // Takes `drafts` in order up to the first the constraint refuses (or the grammar's end); the advances made, for
  // undo_all to take back.
  std::vector<Advance> take(std::span<const int32_t> drafts);
  void undo_all(const std::vector<Advance>& done);

  std::shared_ptr<const OutputConstraint> constraint_;
  int64_t vocab_size_;
  size_t words_;
  int32_t eos_;
  std::optional<text::grammar::GrammarMatcher> matcher_;
  bool active_;
  std::shared_ptr<model::TokenMask> buffer_;         // the last grammar mask (reused when no step holds it)
  std::shared_ptr<const model::TokenMask> free_mask_;  // before the grammar starts: all but `banned` (null: all)
  int64_t masks_built_ = 0;
};

}  // namespace strata::engine
