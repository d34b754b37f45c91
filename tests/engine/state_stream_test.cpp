// StateStream (engine/state_stream.h): chunks in order to any number of readers, each from its own position; the
// first end counts; a reader's wake-up is called for every change, at once when set on a stream with something in
// it, and never after it is cleared; a producer on another thread delivers every byte.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "core/error.h"
#include "engine/state_stream.h"

namespace strata::engine {
namespace {

std::string joined(const StateStream::Read& r) {
  std::string out;
  for (const auto& c : r.chunks) out += *c;
  return out;
}

TEST(StateStream, ReadersTakeChunksFromTheirOwnPosition) {
  StateStream s;
  s.set_cached_tokens(7);
  s.append("ab");
  s.append("");  // nothing: no chunk
  s.append("cde");
  EXPECT_EQ(joined(s.read_from(0)), "abcde");
  EXPECT_EQ(s.read_from(0).chunks.size(), 2u);
  EXPECT_EQ(joined(s.read_from(1)), "cde");
  EXPECT_TRUE(s.read_from(5).chunks.empty());
  EXPECT_FALSE(s.ended());
  s.finish();
  s.fail("too late");  // the first end counts
  const StateStream::Read r = s.read_from(2);
  EXPECT_TRUE(r.finished);
  EXPECT_FALSE(r.failed);
  EXPECT_EQ(s.bytes(), 5);
  EXPECT_EQ(s.cached_tokens(), 7);
  EXPECT_THROW(s.append("f"), Error);

  StateStream f;
  f.append("x");
  f.fail("the peer died");
  f.finish();
  EXPECT_EQ(f.read_from(0).failed.value_or(""), "the peer died");
  EXPECT_FALSE(f.read_from(0).finished);
}

TEST(StateStream, TheWakeUpSeesEveryChangeUntilCleared) {
  StateStream s;
  int calls = 0;
  s.on_change([&] { ++calls; });
  EXPECT_EQ(calls, 0);  // nothing there yet
  s.append("a");
  s.append("b");
  EXPECT_EQ(calls, 2);
  s.on_change([&] { calls += 10; });  // replaces, and is called at once: there is something to read
  EXPECT_EQ(calls, 12);
  s.on_change({});
  s.finish();
  EXPECT_EQ(calls, 12);
}

TEST(StateStream, AProducerThreadDeliversEveryByteInOrder) {
  StateStream s;
  std::atomic<int> wakes{0};
  s.on_change([&] { ++wakes; });
  std::thread producer([&] {
    for (int i = 0; i < 1000; ++i) s.append(std::string(1, static_cast<char>('a' + i % 26)));
    s.finish();
  });
  std::string got;
  size_t next = 0;
  for (;;) {
    const StateStream::Read r = s.read_from(next);
    for (const auto& c : r.chunks) got += *c;
    next += r.chunks.size();
    if (r.finished && next == 1000) break;
    std::this_thread::yield();
  }
  producer.join();
  ASSERT_EQ(got.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], static_cast<char>('a' + i % 26));
  EXPECT_EQ(wakes.load(), 1001);
}

}  // namespace
}  // namespace strata::engine
