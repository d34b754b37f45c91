// The engine's half of prefill/decode disaggregation: an engine that exports a prompt's state samples nothing and
// hands out Model::snapshot bytes; another engine that imports them at admission continues with exactly the tokens
// and logprobs of computing the whole prompt itself — for a batch, for n > 1, and after preemption; bytes it cannot
// use are counted and the prompt is computed instead.
#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "engine/engine.h"
#include "tiny_model.h"

namespace strata::engine {
namespace {

using model::v4::Model;

struct Answer {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  int64_t cached_tokens = 0;
  bool operator==(const Answer& o) const { return tokens == o.tokens && logprobs == o.logprobs; }
};

std::map<std::string, Answer> run_all(Engine& e, std::map<std::string, std::shared_ptr<const std::string>>* states = nullptr) {
  std::map<std::string, Answer> got;
  for (int guard = 0; e.has_unfinished() && guard < 10000; ++guard)
    for (const TokenEvent& ev : e.step()) {
      const std::string key = ev.request_id + "/" + std::to_string(ev.index);
      if (ev.token) {
        if (got[key].tokens.empty()) got[key].cached_tokens = ev.cached_tokens;
        got[key].tokens.push_back(*ev.token);
        got[key].logprobs.push_back(ev.logprob);
      }
      if (ev.state && states) (*states)[ev.request_id] = ev.state;
    }
  return got;
}

class StateHandoffTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    prefill_model_ = test::tiny_model("handoff_p", 11).release();
    decode_model_ = test::tiny_model("handoff_d", 11).release();
  }
  static void TearDownTestSuite() {
    delete prefill_model_;
    delete decode_model_;
  }
  static EngineConfig config(int64_t blocks = 64) {
    EngineConfig c;
    c.max_model_len = 1024;
    c.pool = {8, blocks};
    return c;
  }
  // The state of each prompt but its last token, from an engine that exports them all in one batch.
  static std::map<std::string, std::shared_ptr<const std::string>> prefill(
      const std::map<std::string, std::vector<int32_t>>& prompts) {
    Engine e(*prefill_model_, config());
    SamplingParams p;
    p.max_tokens = 1;
    StateHandoff export_state;
    export_state.export_state = true;
    for (const auto& [id, prompt] : prompts)
      e.add_request(id, std::vector<int32_t>(prompt.begin(), prompt.end() - 1), p, {}, export_state);
    std::map<std::string, std::shared_ptr<const std::string>> states;
    const auto tokens = run_all(e, &states);
    EXPECT_TRUE(tokens.empty()) << "an exporting engine samples nothing";
    EXPECT_EQ(e.stats().exported_states, static_cast<int64_t>(prompts.size()));
    EXPECT_EQ(e.stats().used_blocks, 0);
    return states;
  }
  static inline Model *prefill_model_ = nullptr, *decode_model_ = nullptr;
};

TEST_F(StateHandoffTest, AnImportedBatchContinuesAsIfComputedHere) {
  const std::map<std::string, std::vector<int32_t>> prompts = {
      {"a", test::token_ids(2, 1)}, {"b", test::token_ids(97, 2)}, {"c", test::token_ids(130, 3)},
      {"d", test::token_ids(257, 4)}};
  const auto states = prefill(prompts);
  ASSERT_EQ(states.size(), prompts.size());

  SamplingParams p;
  p.max_tokens = 12;
  p.logprobs = 2;
  p.temperature = 0.8;
  p.seed = 5;
  p.n = 2;
  Engine colocated(*decode_model_, config()), decode(*decode_model_, config());
  for (const auto& [id, prompt] : prompts) {
    colocated.add_request(id, prompt, p);
    StateHandoff in;
    in.imported = states.at(id);
    decode.add_request(id, prompt, p, {}, in);
  }
  const auto want = run_all(colocated), got = run_all(decode);
  ASSERT_EQ(got.size(), 8u);
  for (const auto& [key, answer] : want) EXPECT_TRUE(got.at(key) == answer) << key;
  EXPECT_EQ(decode.stats().imported_states, 8);  // each of n = 2 restores the same bytes
  EXPECT_EQ(decode.stats().import_failures, 0);
  EXPECT_LT(decode.stats().prompt_tokens, colocated.stats().prompt_tokens / 50);  // one token per sequence
}

TEST_F(StateHandoffTest, PreemptionAndUnusableBytesFallBackToComputing) {
  const std::vector<int32_t> prompt = test::token_ids(100, 7);
  const auto states = prefill({{"x", prompt}});
  SamplingParams p;
  p.max_tokens = 60;
  p.ignore_eos = true;
  p.seed = 3;
  Engine colocated(*decode_model_, config());
  colocated.add_request("x", prompt, p);
  const Answer want = run_all(colocated).at("x/0");

  // Too few blocks for two long sequences at once: both are admitted with one block of 128 tokens, both need a
  // second one past 128 tokens, and the newer one is preempted and recomputed from its tokens.
  Engine tight(*decode_model_, config(3));
  StateHandoff in;
  in.imported = states.at("x");
  tight.add_request("x", prompt, p, {}, in);
  tight.add_request("y", prompt, p, {}, in);
  const auto got = run_all(tight);
  EXPECT_TRUE(got.at("x/0") == want);
  EXPECT_TRUE(got.at("y/0") == want);
  EXPECT_GT(tight.stats().preemptions, 0);

  // Bytes that are not a state, and a state of the wrong length (the whole prompt: nothing would be left to
  // sample from), are refused at admission and the prompt is computed here.
  Engine e(*decode_model_, config());
  StateHandoff junk;
  junk.imported = std::make_shared<const std::string>("not a state");
  e.add_request("junk", prompt, p, {}, junk);
  const std::vector<int32_t> shorter(prompt.begin(), prompt.end() - 1);
  StateHandoff whole;
  whole.imported = states.at("x");  // 99 tokens: all of `shorter`
  e.add_request("whole", shorter, p, {}, whole);
  Engine plain(*decode_model_, config());
  plain.add_request("whole", shorter, p);
  const auto results = run_all(e);
  EXPECT_TRUE(results.at("junk/0") == want);
  EXPECT_TRUE(results.at("whole/0") == run_all(plain).at("whole/0"));
  EXPECT_EQ(e.stats().import_failures, 2);
  EXPECT_EQ(e.stats().imported_states, 0);
}

TEST_F(StateHandoffTest, BadHandoffsAreNamed) {
  Engine e(*decode_model_, config());
  SamplingParams p;
  StateHandoff both;
  both.export_state = true;
  both.imported = std::make_shared<const std::string>("x");
  EXPECT_THROW(e.add_request("r", test::token_ids(5, 1), p, {}, both), Error);
  StateHandoff out;
  out.export_state = true;
  p.n = 2;
  EXPECT_THROW(e.add_request("r", test::token_ids(5, 1), p, {}, out), Error);
}

}  // namespace
}  // namespace strata::engine
