#include "server/server_url.h"

#include "core/error.h"

namespace strata::server {

ServerUrl parse_server_url(const std::string& url) {
  static constexpr std::string_view kScheme = "http://";
  if (url.rfind(kScheme, 0) != 0)
    fail("url: expected http://HOST:PORT (plain HTTP), found '", url, "'");
  std::string rest = url.substr(kScheme.size());
  ServerUrl out;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    out.prefix = rest.substr(slash);
    rest = rest.substr(0, slash);
    while (!out.prefix.empty() && out.prefix.back() == '/') out.prefix.pop_back();
    if (out.prefix.size() >= 3 && out.prefix.compare(out.prefix.size() - 3, 3, "/v1") == 0)
      out.prefix.resize(out.prefix.size() - 3);  // http://host:port/v1 names the same server
  }
  const size_t colon = rest.rfind(':');
  if (colon != std::string::npos && rest.find(']', colon) == std::string::npos) {
    out.port = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
    if (out.port.empty() || out.port.find_first_not_of("0123456789") != std::string::npos)
      fail("url: expected a numeric port in '", url, "'");
  }
  if (rest.size() >= 2 && rest.front() == '[' && rest.back() == ']') rest = rest.substr(1, rest.size() - 2);
  if (rest.empty()) fail("url: no host in '", url, "'");
  out.host = rest;
  return out;
}

}  // namespace strata::server
