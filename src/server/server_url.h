#pragma once
// Where an OpenAI-compatible server lives, as a client names it: http://HOST[:PORT][/PREFIX]. Shared by the
// clients of the tree: the load generator (bench/serve_client.h) and the router's replicas (router/replica.h).
#include <string>

namespace strata::server {

// http://HOST[:PORT][/PREFIX] — the server's base URL (PREFIX is put before /v1/...; a trailing /v1 names the same
// server).
struct ServerUrl {
  std::string host, port = "80", prefix;
};
ServerUrl parse_server_url(const std::string& url);  // throws strata::Error for anything else (e.g. https)

}  // namespace strata::server
