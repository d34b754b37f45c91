// Structured outputs in the engine (engine/output_constraint.h): a sequence's ConstrainedOutput builds the masks its
// grammar allows, starts after its `starts_after` token, never allows a banned token, allows eos only where the
// grammar can end; and the engine with a random tiny model at temperature 1 produces only grammatical outputs that
// stop when the grammar ends, each of n sequences in its own place in the grammar.
#include "engine/output_constraint.h"

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "text/grammar/ebnf_parser.h"
#include "tiny_model.h"

namespace strata::engine {
namespace {

using text::grammar::CompiledGrammar;
using text::grammar::TokenVocabulary;

// The tiny preset's 512 ids as a grammar vocabulary: id 1 is eos, ids 2-27 the letters a-z, 28 a space, 29 the
// "think end" marker, the rest two-letter pairs of a-c and never-matchable filler.
std::shared_ptr<const TokenVocabulary> tiny_vocab() {
  std::vector<std::string> bytes(512);
  std::vector<bool> excluded(512, false);
  bytes[0] = "<bos>";
  excluded[0] = true;
  bytes[1] = "<eos>";
  for (int i = 0; i < 26; ++i) bytes[2 + i] = std::string(1, static_cast<char>('a' + i));
  bytes[28] = " ";
  bytes[29] = "</think>";
  excluded[29] = true;
  int id = 30;
  for (char x : {'a', 'b', 'c'})
    for (char y : {'a', 'b', 'c'}) bytes[id++] = std::string{x, y};
  for (; id < 512; ++id) bytes[id] = "#" + std::to_string(id);
  return std::make_shared<const TokenVocabulary>(std::move(bytes), std::move(excluded), 1);
}

bool allows(const model::TokenMask& m, int32_t id) { return (m[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u; }

std::shared_ptr<const OutputConstraint> constraint(const std::string& ebnf, std::optional<int32_t> starts_after = {},
                                                   std::vector<int32_t> banned = {}) {
  auto c = std::make_shared<OutputConstraint>();
  c->grammar = CompiledGrammar::from_ebnf(ebnf, tiny_vocab());
  c->starts_after = starts_after;
  c->banned = std::move(banned);
  return c;
}

TEST(ConstrainedOutput, MasksFollowTheGrammarAndEosOnlyAtTheEnd) {
  ConstrainedOutput out(constraint("root ::= \"ab\" | \"abc\""), 512, 1);
  auto m = out.next_mask();
  ASSERT_TRUE(m);
  EXPECT_TRUE(allows(*m, 2));    // a
  EXPECT_TRUE(allows(*m, 31));   // "ab"
  EXPECT_FALSE(allows(*m, 3));   // b
  EXPECT_FALSE(allows(*m, 1));   // eos: nothing yet
  EXPECT_FALSE(allows(*m, 40));  // filler
  EXPECT_TRUE(out.accept(31));
  m = out.next_mask();
  EXPECT_TRUE(allows(*m, 1));  // "ab" is complete
  EXPECT_TRUE(allows(*m, 4));  // c
  EXPECT_FALSE(out.accept(3)) << "b is not in the grammar here";
  EXPECT_TRUE(out.accept(4));
  m = out.next_mask();
  EXPECT_TRUE(allows(*m, 1));
  EXPECT_EQ(std::count_if(m->begin(), m->end(), [](uint32_t w) { return w != 0; }), 1) << "only eos is left";
  EXPECT_TRUE(out.accept(1));
  EXPECT_TRUE(out.terminated());
}

// Speculative decoding's questions (docs/mtp.md): how far a draft chain is allowed, and the masks of the rows after
// each draft; neither moves the sequence's own position.
TEST(ConstrainedOutput, DraftPrefixesAndTheirMasksLeaveThePositionAlone) {
  ConstrainedOutput out(constraint("root ::= \"ab\" \"c\"+", 29), 512, 1);
  const std::vector<int32_t> chain = {5, 29, 31, 4, 3, 4};  // free "d", </think>, "ab", "c", then "b": refused
  EXPECT_EQ(out.allowed_prefix(chain), 4u);
  EXPECT_FALSE(out.active());
  const auto masks = out.masks_after(chain, 4);
  ASSERT_EQ(masks.size(), 4u);
  EXPECT_EQ(masks[0], out.next_mask()) << "before </think>: the free mask";
  EXPECT_TRUE(allows(*masks[1], 31) && allows(*masks[1], 2) && !allows(*masks[1], 4)) << "after </think>: ab";
  EXPECT_TRUE(allows(*masks[2], 4) && !allows(*masks[2], 1)) << "after ab: c, not yet eos";
  EXPECT_TRUE(allows(*masks[3], 4) && allows(*masks[3], 1)) << "after abc: c or the end";
  EXPECT_THROW(out.masks_after(chain, 5), Error) << "the fifth is refused";
  EXPECT_FALSE(out.active()) << "the throw left the position alone";
  // The same again from here: nothing moved.
  EXPECT_EQ(out.allowed_prefix(chain), 4u);
  EXPECT_TRUE(out.accept(5));
  EXPECT_TRUE(out.accept(29));
  EXPECT_TRUE(out.accept(31));
  // The grammar's end: nothing after the eos that ends it.
  const std::vector<int32_t> tail = {4, 1, 4};
  EXPECT_EQ(out.allowed_prefix(tail), 2u);
  EXPECT_FALSE(out.terminated());
}

TEST(ConstrainedOutput, StartsAfterItsTokenAndBansTokensThroughout) {
  ConstrainedOutput out(constraint("root ::= \"c\"+", 29, {3}), 512, 1);
  auto free = out.next_mask();
  ASSERT_TRUE(free) << "a banned token makes even the free part masked";
  EXPECT_TRUE(allows(*free, 2));
  EXPECT_TRUE(allows(*free, 511));
  EXPECT_FALSE(allows(*free, 3));
  EXPECT_FALSE(out.active());
  EXPECT_TRUE(out.accept(5));
  EXPECT_FALSE(out.accept(3)) << "banned";
  EXPECT_TRUE(out.accept(29));
  EXPECT_TRUE(out.active());
  const auto m = out.next_mask();
  EXPECT_TRUE(allows(*m, 4));
  EXPECT_FALSE(allows(*m, 2));
  EXPECT_FALSE(allows(*m, 1));
  const auto held = m;  // a step in flight still holds the last mask: the next one gets a buffer of its own
  EXPECT_TRUE(out.accept(4));
  const auto next = out.next_mask();
  EXPECT_NE(next.get(), held.get());
  EXPECT_TRUE(allows(*next, 1));
  EXPECT_FALSE(allows(*held, 1));
}

TEST(ConstrainedOutput, AGrammarThatCannotGoOnAllowsOnlyEos) {
  // The digit 7 is in no token of the vocabulary, so after "a" nothing can follow.
  ConstrainedOutput out(constraint("root ::= \"a\" \"7\""), 512, 1);
  EXPECT_TRUE(out.accept(2));
  const auto m = out.next_mask();
  EXPECT_TRUE(allows(*m, 1));
  EXPECT_EQ(std::count_if(m->begin(), m->end(), [](uint32_t w) { return w != 0; }), 1);
  EXPECT_TRUE(out.accept(1)) << "the forced end is accepted";
}

TEST(ConstrainedOutput, EngineOutputsAreSentencesOfTheGrammar) {
  const auto model = test::tiny_model("engine_constraint", 5);
  EngineConfig cfg;
  cfg.scheduler.max_num_batched_tokens = 64;
  cfg.scheduler.max_num_seqs = 4;
  cfg.pool.max_sequences = 4;
  cfg.pool.blocks = 16;
  Engine e(*model, cfg);
  SamplingParams p;
  p.temperature = 1.0;
  p.seed = 3;
  p.max_tokens = 40;
  p.n = 3;
  p.constraint = constraint("root ::= ( \"a\" | \"b\" | \"ab\" ) \" \" ( \"c\" | \"ca\" )");
  e.add_request("g", {5, 6, 7, 8}, p);
  std::map<int64_t, std::vector<int32_t>> outputs;
  std::map<int64_t, FinishReason> reasons;
  while (e.has_unfinished())
    for (const TokenEvent& ev : e.step()) {
      if (ev.token) outputs[ev.index].push_back(*ev.token);
      if (ev.finished) reasons[ev.index] = ev.reason;
    }
  ASSERT_EQ(outputs.size(), 3u);
  const auto vocab = tiny_vocab();
  for (const auto& [index, tokens] : outputs) {
    std::string text;
    for (int32_t t : tokens)
      if (t != 1) text += vocab->bytes(t);
    EXPECT_TRUE(text == "a c" || text == "b c" || text == "ab c" || text == "a ca" || text == "b ca" || text == "ab ca")
        << "sequence " << index << ": " << text;
    EXPECT_EQ(reasons[index], FinishReason::Stop);
  }
  EXPECT_GT(e.stats().grammar_masks, 0);
  // A constraint naming a token outside the vocabulary is refused at admission.
  SamplingParams bad = p;
  auto c = std::make_shared<OutputConstraint>(*p.constraint);
  c->banned = {9999};
  bad.constraint = c;
  EXPECT_THROW(e.add_request("bad", {5}, bad), Error);
}

}  // namespace
}  // namespace strata::engine
