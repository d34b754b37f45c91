// Prefill/decode disaggregation through the HTTP servers: a decode replica whose prompts a prefill replica computes
// answers exactly what a colocated server answers (tokens and logprobs, a concurrent batch, n > 1, streaming); a
// transfer that fails in any way (nothing listening, a wedged replica past the deadline, a replica dying in the
// middle of the state, damaged state bytes, a refusal) leaves the prompt to be computed on the decode replica with
// the same answer and no error; a same-host transfer moves the floats through shared memory; the roles refuse
// what is not theirs.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "model/deepseek_v4/model.h"
#include "server/http_test_client.h"
#include "server/served_model.h"
#include "server/server.h"

namespace strata::server {
namespace {

using json = nlohmann::json;
using test::HttpReply;
using test::HttpTestClient;
using test::http_request;

// A server on its own model instance (the CPU model keeps per-forward scratch; two engines never share one).
struct Replica {
  std::unique_ptr<model::v4::Model> model;
  std::unique_ptr<Server> server;
  Replica(const text::Tokenizer& tokenizer, disagg::Role role, const std::string& prefill_peer, bool cache,
          std::chrono::milliseconds transfer_timeout = std::chrono::seconds(60), bool shared_transfer = false) {
    model = std::make_unique<model::v4::Model>(model::v4::load_model(test::served_model_dir()));
    engine::EngineConfig ec;
    ec.max_model_len = 2048;
    ec.pool = {8, 64};
    if (cache) {
      cache::CacheConfig cc;
      cc.store.writer_thread = false;
      ec.cache = std::make_shared<cache::PrefixCache>(*model, cc);
    }
    ServerConfig sc;
    sc.port = 0;
    sc.role = role;
    sc.prefill_peer = prefill_peer;
    sc.transfer_timeout = transfer_timeout;
    sc.shared_transfer = shared_transfer;
    server = std::make_unique<Server>(*model, tokenizer, ec, sc);
    server->start();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server->port()); }
  uint16_t port() const { return server->port(); }
};

// A socket that plays a broken prefill replica: each connection's request is read, then `answer` decides what is
// written back (possibly nothing) before the connection closes.
class FakePeer {
 public:
  explicit FakePeer(std::function<std::string(const std::string& request)> answer, bool wedge = false)
      : answer_(std::move(answer)), wedge_(wedge) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(fd_, 16);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakePeer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int connections() const { return connections_; }

 private:
  void serve() {
    while (!stop_) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      ++connections_;
      std::string request;
      char buf[4096];
      // The head, then the body by its Content-Length.
      for (;;) {
        const size_t head_end = request.find("\r\n\r\n");
        if (head_end != std::string::npos) {
          const size_t cl = request.find("Content-Length: ");
          const size_t body = cl == std::string::npos ? 0 : std::stoul(request.substr(cl + 16));
          if (request.size() >= head_end + 4 + body) break;
        }
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        request.append(buf, static_cast<size_t>(n));
      }
      if (wedge_) {  // holds the connection open, answering nothing, until the caller gives up
        while (!stop_ && ::recv(c, buf, sizeof buf, 0) > 0) {
        }
      } else {
        const std::string out = answer_(request);
        ::send(c, out.data(), out.size(), MSG_NOSIGNAL);
      }
      ::close(c);
    }
  }
  std::function<std::string(const std::string&)> answer_;
  bool wedge_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

// A loopback port that was bound once and is closed now: a connection there is refused.
std::string closed_port_url() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
}

class Disaggregation : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!test::have_tokenizer()) return;
    tokenizer_ = new text::Tokenizer(text::Tokenizer::load(test::served_model_dir()));
    prefill_ = new Replica(*tokenizer_, disagg::Role::Prefill, "", true);
    decode_ = new Replica(*tokenizer_, disagg::Role::Decode, prefill_->url(), false, std::chrono::milliseconds(1500));
    colocated_ = new Replica(*tokenizer_, disagg::Role::Both, "", false);
  }
  static void TearDownTestSuite() {
    delete colocated_;
    delete decode_;
    delete prefill_;
    delete tokenizer_;
    decode_ = nullptr;
  }
  void SetUp() override {
    if (!decode_) GTEST_SKIP() << "needs the DeepSeek tokenizer in " << test::tokenizer_v3_dir() << " (scripts/setup.sh)";
  }

  static HttpReply post(uint16_t port, const std::string& path, const json& body,
                        const std::vector<std::string>& headers = {}) {
    HttpTestClient c(port);
    c.send(http_request("POST", path, body.dump(), headers));
    return c.read_reply(120);
  }
  static json complete(uint16_t port, const json& body, const std::vector<std::string>& headers = {}) {
    const HttpReply r = post(port, "/v1/completions", body, headers);
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body);
  }
  static std::string metrics(uint16_t port) {
    HttpTestClient c(port);
    c.send(http_request("GET", "/metrics"));
    return c.read_reply().body;
  }
  static double metric(uint16_t port, const std::string& line_start) {
    const std::string m = metrics(port);
    const size_t at = m.find(line_start);
    if (at == std::string::npos) return 0;
    return std::stod(m.substr(at + line_start.size()));
  }
  static json prompt_body(int64_t len, int64_t salt, int64_t max_tokens = 6) {
    std::vector<int32_t> ids = test::token_ids(len, salt);
    for (int32_t& t : ids) t += 1000;  // ordinary tokens of the DeepSeek vocabulary
    return {{"prompt", ids}, {"max_tokens", max_tokens}, {"temperature", 0}, {"logprobs", 3}};
  }
  // What a client compares: each choice's text, logprobs and finish reason.
  static json answer(const json& response) {
    json out = json::array();
    for (const json& c : response["choices"]) out.push_back({c["text"], c["logprobs"], c["finish_reason"]});
    return out;
  }

  static text::Tokenizer* tokenizer_;
  static Replica *prefill_, *decode_, *colocated_;
};
text::Tokenizer* Disaggregation::tokenizer_ = nullptr;
Replica* Disaggregation::prefill_ = nullptr;
Replica* Disaggregation::decode_ = nullptr;
Replica* Disaggregation::colocated_ = nullptr;

TEST_F(Disaggregation, ABatchPrefilledElsewhereIsAnsweredAsColocated) {
  // Prompts of one token (nothing to ship), around a block boundary, several blocks; n = 2; a seeded sample at
  // temperature 1; all in flight at once on the decode replica, so they decode in one batch.
  std::vector<json> bodies = {prompt_body(1, 1), prompt_body(2, 2), prompt_body(127, 3), prompt_body(129, 4),
                              prompt_body(300, 5)};
  json n2 = prompt_body(60, 6);
  n2["n"] = 2;
  n2["temperature"] = 1.0;
  n2["seed"] = 17;
  bodies.push_back(n2);
  const double transfers_before = metric(decode_->port(), "strata_pd_transfers_total{model_name=\"model\",result=\"ok\"} ");

  std::vector<std::future<json>> pd;
  for (const json& b : bodies) pd.push_back(std::async(std::launch::async, [&b] { return complete(decode_->port(), b); }));
  for (size_t i = 0; i < bodies.size(); ++i) {
    const json got = pd[i].get(), want = complete(colocated_->port(), bodies[i]);
    EXPECT_EQ(answer(got), answer(want)) << "request " << i;
    EXPECT_EQ(got["usage"]["prompt_tokens"], want["usage"]["prompt_tokens"]);
  }
  // Every prompt but the one-token one went through the prefill replica.
  EXPECT_EQ(metric(decode_->port(), "strata_pd_transfers_total{model_name=\"model\",result=\"ok\"} ") - transfers_before,
            5);
  EXPECT_GE(metric(decode_->port(), "strata_pd_imported_states_total{model_name=\"model\"} "), 6);  // n = 2: twice
  EXPECT_GE(metric(prefill_->port(), "strata_pd_exported_states_total{model_name=\"model\"} "), 5);
  EXPECT_GT(metric(decode_->port(), "strata_pd_transfer_bytes_total{model_name=\"model\"} "), 0);
  // The engine threads' time on the states (restoring here, writing there) is counted.
  EXPECT_GT(metric(decode_->port(), "strata_pd_restore_seconds_total{model_name=\"model\"} "), 0);
  EXPECT_GT(metric(prefill_->port(), "strata_pd_export_seconds_total{model_name=\"model\"} "), 0);
}

TEST_F(Disaggregation, StreamingAndChatGoThroughTheTransferToo) {
  json body = prompt_body(90, 7, 5);
  body["stream"] = true;
  const HttpReply pd = post(decode_->port(), "/v1/completions", body);
  const HttpReply co = post(colocated_->port(), "/v1/completions", body);
  ASSERT_EQ(pd.status, 200);
  std::string pd_text, co_text;
  for (const std::string& p : test::sse_payloads(pd.body))
    if (p != "[DONE]") pd_text += json::parse(p)["choices"][0].value("text", "");
  for (const std::string& p : test::sse_payloads(co.body))
    if (p != "[DONE]") co_text += json::parse(p)["choices"][0].value("text", "");
  EXPECT_EQ(pd_text, co_text);
  EXPECT_FALSE(pd_text.empty());

  const json chat = {{"messages", {{{"role", "user"}, {"content", "Tell me about the sea, in a few words."}}}},
                     {"max_tokens", 6}, {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 2}};
  const HttpReply a = post(decode_->port(), "/v1/chat/completions", chat);
  const HttpReply b = post(colocated_->port(), "/v1/chat/completions", chat);
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.json()["choices"][0]["message"], b.json()["choices"][0]["message"]);
  EXPECT_EQ(a.json()["choices"][0]["logprobs"], b.json()["choices"][0]["logprobs"]);
}

TEST_F(Disaggregation, ThePrefillReplicasCacheHitsReachTheUsage) {
  const json body = prompt_body(400, 8);
  const json cold = complete(decode_->port(), body), warm = complete(decode_->port(), body);
  EXPECT_EQ(answer(cold), answer(warm));
  EXPECT_EQ(cold["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  // The prefill replica computed 399 tokens and checkpointed at its last block boundary short of their end.
  EXPECT_EQ(warm["usage"]["prompt_tokens_details"]["cached_tokens"], 384);
}

TEST_F(Disaggregation, EveryFailedTransferIsComputedHereWithTheSameAnswer) {
  const json body = prompt_body(200, 9);
  const json want = answer(complete(colocated_->port(), body));
  const auto via = [&](const std::string& peer) {
    return answer(complete(decode_->port(), body, {"X-Strata-Prefill: " + peer}));
  };
  const auto failed = [&](const char* kind) {
    return metric(decode_->port(), std::string("strata_pd_transfers_total{model_name=\"model\",result=\"") + kind + "\"} ");
  };

  {  // nothing listens there
    const double before = failed("connect");
    EXPECT_EQ(via(closed_port_url()), want);
    EXPECT_EQ(failed("connect") - before, 1);
  }
  {  // a wedged replica: accepts and answers nothing, so the deadline (1.5 s here) ends the wait
    FakePeer wedged([](const std::string&) { return std::string(); }, true);
    const double before = failed("timeout");
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(via(wedged.url()), want);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
    EXPECT_EQ(failed("timeout") - before, 1);
  }
  {  // a replica that dies in the middle of the state: the head promises more bytes than come
    FakePeer dying([](const std::string&) {
      return std::string("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 100000\r\n"
                         "X-Strata-State-Tokens: 199\r\nX-Strata-Cached-Tokens: 0\r\n\r\nSTRATA4S") +
             std::string(5000, '\0');
    });
    const double before = failed("protocol");
    EXPECT_EQ(via(dying.url()), want);
    EXPECT_EQ(failed("protocol") - before, 1);
  }
  {  // damaged state bytes, complete and well framed: the restore refuses them at admission
    FakePeer damaged([](const std::string&) {
      const std::string junk(4096, 'x');
      return "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(junk.size()) +
             "\r\nX-Strata-State-Tokens: 199\r\nX-Strata-Cached-Tokens: 0\r\n\r\n" + junk;
    });
    const double before = metric(decode_->port(), "strata_pd_import_failures_total{model_name=\"model\"} ");
    EXPECT_EQ(via(damaged.url()), want);
    EXPECT_EQ(metric(decode_->port(), "strata_pd_import_failures_total{model_name=\"model\"} ") - before, 1);
  }
  {  // a refusal (an error status) and a state of the wrong length
    FakePeer refusing([](const std::string&) {
      const std::string e = R"({"error":{"message":"no"}})";
      return "HTTP/1.1 503 Service Unavailable\r\nContent-Length: " + std::to_string(e.size()) + "\r\n\r\n" + e;
    });
    const double before = failed("refused");
    EXPECT_EQ(via(refusing.url()), want);
    EXPECT_EQ(failed("refused") - before, 1);
    FakePeer short_state([](const std::string&) {
      return std::string("HTTP/1.1 200 OK\r\nContent-Length: 4\r\nX-Strata-State-Tokens: 12\r\n\r\nabcd");
    });
    const double protocol = failed("protocol");
    EXPECT_EQ(via(short_state.url()), want);
    EXPECT_EQ(failed("protocol") - protocol, 1);
  }
  // A peer that is not a URL at all.
  EXPECT_EQ(via("ftp://nowhere"), want);
}

// Same host (--transfer shared): the state's floats go through POSIX shared memory (CUDA IPC memory on GPUs), only
// the skeleton over the socket; the answers are the colocated ones, and every region is released and unlinked.
TEST_F(Disaggregation, ASharedTransferMovesTheFloatsThroughMemoryAndReleasesThem) {
  Replica shared(*tokenizer_, disagg::Role::Decode, prefill_->url(), false, std::chrono::seconds(60), true);
  const auto regions_of_this_process = [] {
    int n = 0;
    const std::string mine = "strata-" + std::to_string(::getpid()) + "-";
    for (const auto& f : std::filesystem::directory_iterator("/dev/shm"))
      if (f.path().filename().string().rfind(mine, 0) == 0) ++n;
    return n;
  };
  const std::string bytes_metric = "strata_pd_transfer_bytes_total{model_name=\"model\"} ";
  const json body = prompt_body(300, 11);
  const json want = answer(complete(colocated_->port(), body));

  const double tcp_before = metric(decode_->port(), bytes_metric);
  EXPECT_EQ(answer(complete(decode_->port(), body)), want);
  const double tcp_bytes = metric(decode_->port(), bytes_metric) - tcp_before;

  std::vector<json> bodies = {body, prompt_body(2, 12), prompt_body(129, 13), prompt_body(500, 14)};
  std::vector<std::future<json>> got;
  for (const json& b : bodies) got.push_back(std::async(std::launch::async, [&] { return complete(shared.port(), b); }));
  for (size_t i = 0; i < bodies.size(); ++i) EXPECT_EQ(answer(got[i].get()), answer(complete(colocated_->port(), bodies[i]))) << i;
  const double shared_bytes = metric(shared.port(), bytes_metric);
  EXPECT_EQ(metric(shared.port(), "strata_pd_transfers_total{model_name=\"model\",result=\"ok\"} "), 4);
  EXPECT_EQ(metric(shared.port(), "strata_pd_import_failures_total{model_name=\"model\"} "), 0);
  // The skeletons of four states against the whole bytes of one of them.
  EXPECT_GT(shared_bytes, 0);
  EXPECT_LT(shared_bytes, tcp_bytes / 10) << "the floats did not go through the shared region";
  // Each region is released once its state is restored: none is left behind.
  for (int i = 0; i < 200 && regions_of_this_process() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(regions_of_this_process(), 0);

  // n = 2 reads the state twice, at two admissions: it gets every byte instead.
  json n2 = prompt_body(100, 15);
  n2["n"] = 2;
  EXPECT_EQ(answer(complete(shared.port(), n2)), answer(complete(colocated_->port(), n2)));
  EXPECT_GT(metric(shared.port(), bytes_metric) - shared_bytes, tcp_bytes / 10);

  // A release naming no region is answered, and a malformed one is a 400.
  HttpReply r = post(prefill_->port(), "/strata/v1/prefill/release", {{"handle", "shm:/strata-none:4"}});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.json()["released"], false);
  r = post(prefill_->port(), "/strata/v1/prefill/release", {{"region", 1}});
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.json()["error"]["message"].get<std::string>().find("'handle'"), std::string::npos) << r.body;
}

TEST_F(Disaggregation, RolesRefuseWhatIsNotTheirs) {
  HttpReply r = post(prefill_->port(), "/v1/completions", prompt_body(5, 1));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["error"]["code"], "wrong_role");
  r = post(decode_->port(), "/strata/v1/prefill", {{"tokens", {1, 2, 3}}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["error"]["code"], "wrong_role");
  // Bad orders name the field.
  r = post(prefill_->port(), "/strata/v1/prefill", {{"tokens", json::array()}});
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.json()["error"]["message"].get<std::string>().find("'tokens'"), std::string::npos) << r.body;
  r = post(prefill_->port(), "/strata/v1/prefill", {{"tokens", {1, -2}}});
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.json()["error"]["message"].get<std::string>().find("tokens[1]"), std::string::npos) << r.body;
  r = post(prefill_->port(), "/strata/v1/prefill", {{"tokens", {1, 2}}, {"cache_ttl_seconds", -1}});
  EXPECT_EQ(r.status, 400);
  r = post(prefill_->port(), "/strata/v1/prefill", {{"tokens", {1, 99999999}}});
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.json()["error"]["message"].get<std::string>().find("vocabulary"), std::string::npos) << r.body;
  // A good order: the state's bytes and its token count.
  r = post(prefill_->port(), "/strata/v1/prefill", {{"tokens", {1001, 1002, 1003}}, {"cache", false}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["x-strata-state-tokens"], "3");
  EXPECT_EQ(r.headers["transfer-encoding"], "chunked") << "each layer's section goes out as it is made";
  EXPECT_EQ(r.body.substr(0, 8), "STRATA4S");
}

}  // namespace
}  // namespace strata::server
