#include "engine/output_constraint.h"

#include <algorithm>

#include "core/error.h"

namespace strata::engine {

namespace {

void clear_bit(model::TokenMask& mask, int32_t id) {
  const auto word = static_cast<size_t>(id) / 32;
  if (word < mask.size()) mask[word] &= ~(1u << (id % 32));
}

}  // namespace

void OutputConstraint::validate(int64_t vocab_size) const {
  if (!grammar && banned.empty()) fail("output constraint: neither a grammar nor banned tokens");
  if (starts_after && (*starts_after < 0 || *starts_after >= vocab_size))
    fail("output constraint: the token that starts the grammar, ", *starts_after, ", is outside the vocabulary [0, ",
         vocab_size, ")");
  for (int32_t id : banned)
    if (id < 0 || id >= vocab_size)
      fail("output constraint: banned token ", id, " is outside the vocabulary [0, ", vocab_size, ")");
}

ConstrainedOutput::ConstrainedOutput(std::shared_ptr<const OutputConstraint> constraint, int64_t vocab_size, int32_t eos)
    : constraint_(std::move(constraint)),
      vocab_size_(vocab_size),
      words_(static_cast<size_t>((vocab_size + 31) / 32)),
      eos_(eos),
      active_(!constraint_->starts_after) {
  if (constraint_->grammar) matcher_.emplace(constraint_->grammar);
  if (!constraint_->banned.empty()) {
    auto free = std::make_shared<model::TokenMask>(words_, ~0u);
    if (vocab_size_ % 32) free->back() = (1u << (vocab_size_ % 32)) - 1;
    for (int32_t id : constraint_->banned) clear_bit(*free, id);
    free_mask_ = std::move(free);
  }
}

std::shared_ptr<model::TokenMask> ConstrainedOutput::writable_buffer() {
  // A step that still holds the last mask keeps it; otherwise its words are overwritten in place.
  if (!buffer_ || buffer_.use_count() > 1) buffer_ = std::make_shared<model::TokenMask>();
  return buffer_;
}

void ConstrainedOutput::fill(model::TokenMask& mask) {
  mask.assign(std::max(words_, constraint_->grammar->vocabulary().mask_words()), 0u);
  matcher_->fill_mask(mask.data());
  for (int32_t id : constraint_->banned) clear_bit(mask, id);
  // A grammar that cannot go on (its next bytes are in no token) ends the output rather than picking from nothing.
  if (std::all_of(mask.begin(), mask.end(), [](uint32_t w) { return w == 0; }))
    mask[static_cast<size_t>(eos_) / 32] |= 1u << (eos_ % 32);
  ++masks_built_;
}

std::shared_ptr<const model::TokenMask> ConstrainedOutput::next_mask() {
  if (!active_ || !matcher_) return free_mask_;
  std::shared_ptr<model::TokenMask> mask = writable_buffer();
  fill(*mask);
  return mask;
}

std::optional<ConstrainedOutput::Advance> ConstrainedOutput::advance(int32_t token) {
  if (std::find(constraint_->banned.begin(), constraint_->banned.end(), token) != constraint_->banned.end())
    return std::nullopt;
  if (!active_) {
    if (constraint_->starts_after && token == *constraint_->starts_after) {
      active_ = true;
      return Advance{true, false};
    }
    return Advance{};
  }
  if (!matcher_) return Advance{};
  if (matcher_->accept_token(token)) return Advance{false, true};
  // The forced end of a grammar that could not go on (next_mask) is not a grammar token: it ends the output.
  if (token == eos_) return Advance{};
  return std::nullopt;
}

void ConstrainedOutput::undo(const Advance& a) {
  if (a.stepped) matcher_->rollback(1);
  if (a.started) active_ = false;
}

bool ConstrainedOutput::accept(int32_t token) { return advance(token).has_value(); }

std::vector<ConstrainedOutput::Advance> ConstrainedOutput::take(std::span<const int32_t> drafts) {
  std::vector<Advance> done;
  for (int32_t d : drafts) {
    // Past the grammar's end nothing is allowed (only the eos that ended it was).
    if (terminated()) break;
    const std::optional<Advance> a = advance(d);
    if (!a) break;
    done.push_back(*a);
  }
  return done;
}

void ConstrainedOutput::undo_all(const std::vector<Advance>& done) {
  for (auto it = done.rbegin(); it != done.rend(); ++it) undo(*it);
}

size_t ConstrainedOutput::allowed_prefix(std::span<const int32_t> drafts) {
  const std::vector<Advance> done = take(drafts);
  undo_all(done);
  return done.size();
}

std::optional<std::shared_ptr<const model::TokenMask>> ConstrainedOutput::mask_after(std::span<const int32_t> drafts) {
  const std::vector<Advance> done = take(drafts);
  // A refused draft, or the grammar's end (the sequence stops there): nothing to draft after.
  std::optional<std::shared_ptr<const model::TokenMask>> out;
  if (done.size() == drafts.size() && !terminated()) {
    if (!active_ || !matcher_) {
      out = free_mask_;  // before the grammar starts: all but the banned (null: all)
    } else {
      auto mask = std::make_shared<model::TokenMask>();
      fill(*mask);
      out = std::move(mask);
    }
  }
  undo_all(done);
  return out;
}

std::vector<std::shared_ptr<const model::TokenMask>> ConstrainedOutput::masks_after(std::span<const int32_t> drafts,
                                                                                   size_t count) {
  std::vector<std::shared_ptr<const model::TokenMask>> masks;
  std::vector<Advance> done;
  for (size_t j = 0; j < std::min(count, drafts.size()); ++j) {
    const std::optional<Advance> a = advance(drafts[j]);
    if (!a) {
      undo_all(done);
      fail("constrained output: draft ", j, " (token ", drafts[j], ") is not allowed here; ask allowed_prefix first");
    }
    done.push_back(*a);
    if (!active_ || !matcher_) {
      masks.push_back(free_mask_);
      continue;
    }
    auto mask = std::make_shared<model::TokenMask>();
    fill(*mask);
    masks.push_back(std::move(mask));
  }
  undo_all(done);
  return masks;
}

}  // namespace strata::engine
