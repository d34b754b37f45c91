// The engine's half of prefill/decode disaggregation: an engine that exports a prompt's state samples nothing and
// streams out Model::snapshot bytes piece by piece; another engine that imports them continues with exactly the
// tokens and logprobs of computing the whole prompt itself — for a batch, for n > 1, after preemption, and when the
// bytes trickle in while it runs other sequences (the slot and blocks taken at admission, layers restored as they
// come); bytes it cannot use, and streams that fail, are counted and the prompt is computed instead.
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

void collect(const std::vector<TokenEvent>& events, std::map<std::string, Answer>& got) {
  for (const TokenEvent& ev : events) {
    const std::string key = ev.request_id + "/" + std::to_string(ev.index);
    if (!ev.token) continue;
    if (got[key].tokens.empty()) got[key].cached_tokens = ev.cached_tokens;
    got[key].tokens.push_back(*ev.token);
    got[key].logprobs.push_back(ev.logprob);
  }
}

std::map<std::string, Answer> run_all(Engine& e) {
  std::map<std::string, Answer> got;
  for (int guard = 0; e.has_unfinished() && guard < 10000; ++guard) collect(e.step(), got);
  return got;
}

// A stream that already holds all of `bytes`, in pieces of `piece` bytes (0: one).
std::shared_ptr<StateStream> arrived(const std::string& bytes, size_t piece = 0) {
  auto s = std::make_shared<StateStream>();
  for (size_t at = 0; at < bytes.size(); at += piece ? piece : bytes.size()) s->append(bytes.substr(at, piece ? piece : bytes.size()));
  s->finish();
  return s;
}

std::string all_bytes(const StateStream& s) {
  std::string out;
  for (const auto& chunk : s.read_from(0).chunks) out += *chunk;
  return out;
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
  static std::map<std::string, std::string> prefill(const std::map<std::string, std::vector<int32_t>>& prompts) {
    Engine e(*prefill_model_, config());
    SamplingParams p;
    p.max_tokens = 1;
    std::map<std::string, std::shared_ptr<StateStream>> streams;
    for (const auto& [id, prompt] : prompts) {
      StateHandoff out;
      out.export_to = streams[id] = std::make_shared<StateStream>();
      e.add_request(id, std::vector<int32_t>(prompt.begin(), prompt.end() - 1), p, {}, out);
    }
    const auto tokens = run_all(e);
    EXPECT_TRUE(tokens.empty()) << "an exporting engine samples nothing";
    EXPECT_EQ(e.stats().exported_states, static_cast<int64_t>(prompts.size()));
    EXPECT_EQ(e.stats().used_blocks, 0);
    std::map<std::string, std::string> states;
    for (const auto& [id, stream] : streams) {
      const StateStream::Read r = stream->read_from(0);
      EXPECT_TRUE(r.finished && !r.failed) << id;
      // A header, then a piece per layer: each goes out on its own.
      EXPECT_EQ(r.chunks.size(), 1 + static_cast<size_t>(prefill_model_->config().num_hidden_layers)) << id;
      states[id] = all_bytes(*stream);
      model::SequenceState direct = prefill_model_->new_sequence();
      prefill_model_->forward(std::vector<int32_t>(prompts.at(id).begin(), prompts.at(id).end() - 1), direct, false);
      EXPECT_EQ(states[id], prefill_model_->snapshot(direct)) << "the pieces are Model::snapshot's bytes";
    }
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
    in.incoming = arrived(states.at(id), 1000);
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
  in.incoming = arrived(states.at("x"));
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
  junk.incoming = arrived("not a state");
  e.add_request("junk", prompt, p, {}, junk);
  const std::vector<int32_t> shorter(prompt.begin(), prompt.end() - 1);
  StateHandoff whole;
  whole.incoming = arrived(states.at("x"));  // 99 tokens: all of `shorter`
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
  both.export_to = std::make_shared<StateStream>();
  both.incoming = arrived("x");
  EXPECT_THROW(e.add_request("r", test::token_ids(5, 1), p, {}, both), Error);
  StateHandoff out;
  out.export_to = std::make_shared<StateStream>();
  p.n = 2;
  EXPECT_THROW(e.add_request("r", test::token_ids(5, 1), p, {}, out), Error);
}

TEST_F(StateHandoffTest, AStateArrivingWhileOthersRunIsRestoredLayerByLayerIntoItsReservedSlot) {
  const std::vector<int32_t> prompt = test::token_ids(300, 8), other = test::token_ids(40, 9);
  const std::string bytes = prefill({{"x", prompt}}).at("x");
  SamplingParams p;
  p.max_tokens = 20;
  p.ignore_eos = true;
  p.seed = 4;
  Engine colocated(*decode_model_, config());
  colocated.add_request("x", prompt, p);
  colocated.add_request("o", other, p);
  const auto want = run_all(colocated);

  Engine e(*decode_model_, config());
  auto stream = std::make_shared<StateStream>();
  stream->set_cached_tokens(128);
  StateHandoff in;
  in.incoming = stream;
  e.add_request("x", prompt, p, {}, in);
  e.add_request("o", other, p);
  std::map<std::string, Answer> got;
  collect(e.step(), got);
  // Admitted at once, with every block its prompt needs, and waiting: the other sequence runs meanwhile.
  EXPECT_EQ(e.stats().used_blocks, decode_model_->blocks_for_tokens(300) + decode_model_->blocks_for_tokens(41));
  EXPECT_EQ(e.stats().running, 2);
  EXPECT_EQ(e.stats().prompt_tokens, 40);
  // The bytes trickle in, in pieces that split sections anywhere, between steps; the other sequence decodes.
  const size_t piece = bytes.size() / 7 + 3;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    EXPECT_EQ(got.count("x/0"), 0u) << "nothing is sampled before the whole state is in";
    stream->append(bytes.substr(at, piece));
    collect(e.step(), got);
  }
  stream->finish();
  for (int guard = 0; e.has_unfinished() && guard < 1000; ++guard) collect(e.step(), got);
  EXPECT_TRUE(got.at("x/0") == want.at("x/0"));
  EXPECT_TRUE(got.at("o/0") == want.at("o/0"));
  EXPECT_EQ(got.at("x/0").cached_tokens, 128);  // what the prefill replica's cache held, as the stream says
  EXPECT_EQ(e.stats().imported_states, 1);
  EXPECT_EQ(e.stats().prompt_tokens, 41);  // the last prompt token of x, computed here, and o's prompt
  EXPECT_EQ(e.stats().used_blocks, 0);
}

TEST_F(StateHandoffTest, AWaitingSequenceHasNoWorkUntilBytesArriveAndAnAbortFreesItsBlocks) {
  const std::vector<int32_t> prompt = test::token_ids(200, 2);
  Engine e(*decode_model_, config());
  auto stream = std::make_shared<StateStream>();
  StateHandoff in;
  in.incoming = stream;
  SamplingParams p;
  p.max_tokens = 4;
  e.add_request("x", prompt, p, {}, in);
  EXPECT_TRUE(e.has_work());
  EXPECT_TRUE(e.step().empty());
  EXPECT_FALSE(e.has_work()) << "only a state on its way: nothing to step until it arrives";
  EXPECT_TRUE(e.has_unfinished());
  EXPECT_EQ(e.stats().used_blocks, decode_model_->blocks_for_tokens(200));
  EXPECT_TRUE(e.abort("x"));
  const auto events = e.step();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].reason, FinishReason::Abort);
  EXPECT_EQ(e.stats().used_blocks, 0);
  EXPECT_FALSE(e.has_unfinished());
}

TEST_F(StateHandoffTest, AStreamThatFailsOrEndsShortIsComputedHere) {
  const std::vector<int32_t> prompt = test::token_ids(150, 3);
  const std::string bytes = prefill({{"x", prompt}}).at("x");
  SamplingParams p;
  p.max_tokens = 8;
  p.ignore_eos = true;
  p.seed = 6;
  Engine plain(*decode_model_, config());
  plain.add_request("x", prompt, p);
  const Answer want = run_all(plain).at("x/0");

  for (const bool fails : {true, false}) {
    Engine e(*decode_model_, config());
    auto stream = std::make_shared<StateStream>();
    StateHandoff in;
    in.incoming = stream;
    e.add_request("x", prompt, p, {}, in);
    std::map<std::string, Answer> got;
    collect(e.step(), got);
    stream->append(bytes.substr(0, bytes.size() / 2));  // the header and some layers
    collect(e.step(), got);
    if (fails) stream->fail("the prefill replica died");
    else stream->finish();
    for (int guard = 0; e.has_unfinished() && guard < 1000; ++guard) collect(e.step(), got);
    EXPECT_TRUE(got.at("x/0") == want) << (fails ? "failed" : "ended short");
    EXPECT_EQ(got.at("x/0").cached_tokens, 0);
    EXPECT_EQ(e.stats().import_failures, 1);
    EXPECT_EQ(e.stats().imported_states, 0);
    EXPECT_EQ(e.stats().prompt_tokens, 150);
  }
}

TEST_F(StateHandoffTest, AStateWithoutRoomWaitsInLineInsteadOfComputing) {
  const std::vector<int32_t> prompt = test::token_ids(200, 5), big = test::token_ids(300, 6);
  const std::string bytes = prefill({{"x", prompt}}).at("x");
  SamplingParams p;
  p.max_tokens = 3;
  p.ignore_eos = true;
  // Three blocks of 128 tokens: `big` holds all three while it runs, and x's prompt needs two.
  Engine e(*decode_model_, config(3));
  e.add_request("big", big, p);
  StateHandoff in;
  in.incoming = arrived(bytes);
  e.add_request("x", prompt, p, {}, in);
  run_all(e);
  EXPECT_EQ(e.stats().imported_states, 1);
  EXPECT_EQ(e.stats().import_failures, 0);
  EXPECT_EQ(e.stats().prompt_tokens, 301);
}

TEST_F(StateHandoffTest, AnExportThatEndsWithoutItsStateFailsItsStream) {
  Engine e(*prefill_model_, config());
  SamplingParams p;
  p.max_tokens = 1;
  StateHandoff out;
  out.export_to = std::make_shared<StateStream>();
  e.add_request("x", test::token_ids(50, 1), p, {}, out);
  EXPECT_TRUE(e.abort("x"));
  e.step();
  const StateStream::Read r = out.export_to->read_from(0);
  EXPECT_TRUE(r.chunks.empty());
  ASSERT_TRUE(r.failed.has_value());
  EXPECT_NE(r.failed->find("abort"), std::string::npos) << *r.failed;
}

}  // namespace
}  // namespace strata::engine
