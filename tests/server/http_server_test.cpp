// The HTTP layer alone, with a toy handler: keep-alive and pipelining, chunked streams written from other threads,
// a client leaving mid-response, the body limit, idle timeouts, and thousands of idle connections on one thread.
#include "server/http_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "server/http_test_client.h"

namespace strata::server {
namespace {

using test::HttpTestClient;
using test::http_request;

size_t thread_count() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

struct Toy {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::shared_ptr<HttpExchange>> held;  // /hold: answered later by the test
  bool gone = false;

  HttpServer::Handler handler() {
    return [this](std::shared_ptr<HttpExchange> ex) {
      const std::string path = ex->request().path();
      if (path == "/echo") return ex->respond({200, "text/plain", ex->request().method + " " + ex->request().body, {}});
      if (path == "/stream") {
        ex->begin_stream(200, "text/event-stream");
        std::thread([ex] {
          for (int i = 0; i < 5; ++i) {
            ex->write("piece " + std::to_string(i) + "\n");
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
          }
          ex->end_stream();
        }).detach();
        return;
      }
      if (path == "/big") {  // pieces larger than a socket's send buffer: written in parts as the client reads
        ex->begin_stream(200, "text/plain");
        for (int i = 0; i < 4; ++i) ex->write(std::string(3 << 20, static_cast<char>('a' + i)));
        ex->write("end\n");
        ex->end_stream();
        return;
      }
      if (path == "/hold") {
        ex->begin_stream(200, "text/plain");
        ex->write("started\n");
        ex->on_peer_gone([this] {
          std::lock_guard lock(mu);
          gone = true;
          cv.notify_all();
        });
        std::lock_guard lock(mu);
        held.push_back(ex);
        return;
      }
      ex->respond({404, "text/plain", "no", {}});
    };
  }
};

HttpServerConfig config() {
  HttpServerConfig c;
  c.port = 0;
  c.max_body_bytes = 1024;
  return c;
}

TEST(HttpServer, KeepAliveAndPipelining) {
  Toy toy;
  HttpServer server(config(), toy.handler());
  server.start();
  HttpTestClient c(server.port());
  c.send(http_request("POST", "/echo", "one"));
  EXPECT_EQ(c.read_reply().body, "POST one");
  c.send(http_request("POST", "/echo", "two") + http_request("GET", "/echo") + http_request("POST", "/echo", "three"));
  EXPECT_EQ(c.read_reply().body, "POST two");
  EXPECT_EQ(c.read_reply().body, "GET ");
  const test::HttpReply last = c.read_reply();
  EXPECT_EQ(last.body, "POST three");
  EXPECT_EQ(last.headers.at("content-type"), "text/plain");
  EXPECT_EQ(server.open_connections(), 1u);
}

// `strata serve --host localhost`: a name is resolved (to its IPv4 address, where the test client connects); a
// name that does not resolve is an error that says so.
TEST(HttpServer, HostNamesAreResolved) {
  Toy toy;
  HttpServerConfig named = config();
  named.host = "localhost";
  HttpServer server(named, toy.handler());
  server.start();
  HttpTestClient c(server.port());
  c.send(http_request("POST", "/echo", "named"));
  EXPECT_EQ(c.read_reply().body, "POST named");
  named.host = "no-such-host.invalid";
  try {
    HttpServer unresolved(named, toy.handler());
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'no-such-host.invalid' is neither an IP address nor a name that resolves"),
              std::string::npos)
        << e.what();
  }
}

TEST(HttpServer, ConnectionCloseIsHonoured) {
  Toy toy;
  HttpServer server(config(), toy.handler());
  server.start();
  HttpTestClient c(server.port());
  c.send(http_request("GET", "/echo", "", {"Connection: close"}));
  const test::HttpReply reply = c.read_reply();
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.headers.at("connection"), "close");
  EXPECT_TRUE(c.closed_by_server());
}

TEST(HttpServer, StreamsAreChunkedAndKeepTheConnection) {
  Toy toy;
  HttpServer server(config(), toy.handler());
  server.start();
  HttpTestClient c(server.port());
  for (int round = 0; round < 2; ++round) {
    c.send(http_request("GET", "/stream"));
    const test::HttpReply reply = c.read_reply();
    EXPECT_EQ(reply.status, 200);
    EXPECT_EQ(reply.headers.at("transfer-encoding"), "chunked");
    EXPECT_EQ(reply.headers.at("content-type"), "text/event-stream");
    EXPECT_EQ(reply.body, "piece 0\npiece 1\npiece 2\npiece 3\npiece 4\n");
  }
}

TEST(HttpServer, StreamPiecesLargerThanTheSendBufferArriveWhole) {
  Toy toy;
  HttpServer server(config(), toy.handler());
  server.start();
  HttpTestClient c(server.port());
  for (int round = 0; round < 2; ++round) {
    c.send(http_request("GET", "/big"));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the server fill the socket first
    const test::HttpReply reply = c.read_reply();
    EXPECT_EQ(reply.status, 200);
    std::string want;
    for (int i = 0; i < 4; ++i) want += std::string(3 << 20, static_cast<char>('a' + i));
    EXPECT_TRUE(reply.body == want + "end\n") << "body of " << reply.body.size() << " bytes";
  }
}

TEST(HttpServer, ClientLeavingMidResponseIsReported) {
  Toy toy;
  HttpServer server(config(), toy.handler());
  server.start();
  {
    HttpTestClient c(server.port());
    c.send(http_request("GET", "/hold"));
    EXPECT_TRUE(c.wait_for("started"));
  }  // closes the socket
  std::unique_lock lock(toy.mu);
  EXPECT_TRUE(toy.cv.wait_for(lock, std::chrono::seconds(10), [&] { return toy.gone; }));
  EXPECT_TRUE(toy.held.at(0)->peer_gone());
  toy.held[0]->write("dropped");  // no effect, no crash
  toy.held[0]->end_stream();
}

TEST(HttpServer, BodyLimitGives413) {
  Toy toy;
  HttpServerConfig cfg = config();
  cfg.error_response = [](int status, const std::string& message) {
    return HttpResponse{status, "application/json", "{\"error\":\"" + message + "\"}", {}};
  };
  HttpServer server(cfg, toy.handler());
  server.start();
  HttpTestClient c(server.port());
  c.send(http_request("POST", "/echo", std::string(4096, 'x')));
  const test::HttpReply reply = c.read_reply();
  EXPECT_EQ(reply.status, 413);
  EXPECT_NE(reply.body.find("exceeds the limit of 1024 bytes"), std::string::npos);
  EXPECT_TRUE(c.closed_by_server());
}

TEST(HttpServer, MalformedRequestGives400) {
  Toy toy;
  HttpServer server(config(), toy.handler());
  server.start();
  HttpTestClient c(server.port());
  c.send("THIS IS NOT HTTP\r\n\r\n");
  EXPECT_EQ(c.read_reply().status, 400);
}

TEST(HttpServer, IdleConnectionsTimeOut) {
  Toy toy;
  HttpServerConfig cfg = config();
  cfg.idle_timeout = std::chrono::milliseconds(200);
  HttpServer server(cfg, toy.handler());
  server.start();
  HttpTestClient c(server.port());
  c.send(http_request("GET", "/echo"));
  EXPECT_EQ(c.read_reply().status, 200);
  EXPECT_TRUE(c.closed_by_server(10));
}

TEST(HttpServer, ThousandsOfIdleConnectionsWithoutThreads) {
  Toy toy;
  HttpServer server(config(), toy.handler());
  server.start();
  const size_t threads_before = thread_count();
  std::vector<std::unique_ptr<HttpTestClient>> idle;
  for (int i = 0; i < 2000; ++i) idle.push_back(std::make_unique<HttpTestClient>(server.port()));
  // Half of them send a request first, then stay open.
  for (size_t i = 0; i < idle.size(); i += 2) idle[i]->send(http_request("GET", "/echo"));
  for (size_t i = 0; i < idle.size(); i += 2) EXPECT_EQ(idle[i]->read_reply().status, 200);
  for (int i = 0; i < 200 && server.open_connections() < 2000; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(server.open_connections(), 2000u);
  EXPECT_EQ(thread_count(), threads_before);
  HttpTestClient fresh(server.port());
  fresh.send(http_request("POST", "/echo", "still here"));
  EXPECT_EQ(fresh.read_reply().body, "POST still here");
  idle.back()->send(http_request("POST", "/echo", "me too"));
  EXPECT_EQ(idle.back()->read_reply().body, "POST me too");
}

TEST(HttpServer, StopAcceptingClosesIdleAndFinishesBusy) {
  Toy toy;
  HttpServer server(config(), toy.handler());
  server.start();
  HttpTestClient idle(server.port()), busy(server.port());
  busy.send(http_request("GET", "/hold"));
  EXPECT_TRUE(busy.wait_for("started"));
  server.stop_accepting();
  EXPECT_TRUE(idle.closed_by_server());
  {
    std::lock_guard lock(toy.mu);
    toy.held.at(0)->write("last\n");
    toy.held[0]->end_stream();
  }
  std::string rest;
  for (std::string part; !(part = busy.read_some(5)).empty();) rest += part;
  EXPECT_NE(rest.find("last"), std::string::npos);
  EXPECT_NE(rest.find("0\r\n\r\n"), std::string::npos);  // the last chunk
  EXPECT_TRUE(busy.closed_by_server());
  server.stop();
}

}  // namespace
}  // namespace strata::server
