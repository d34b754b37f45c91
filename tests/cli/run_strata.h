#pragma once
// Runs the strata binary under test (STRATA_BINARY) with arguments, stdin from `stdin_file` (when given, else the
// test's own); returns its exit code, stdout and stderr.
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace strata::test {

struct Outcome {
  int code = -1;
  std::string out, err;
};

inline Outcome run_strata(const std::vector<std::string>& args, const std::string& stdin_file = "") {
  const std::string dir = temp_dir("strata_run");
  std::string cmd = std::string("'") + STRATA_BINARY + "'";
  for (const std::string& a : args) cmd += " '" + a + "'";
  cmd += " 2>'" + dir + "/err'";
  if (!stdin_file.empty()) cmd += " <'" + stdin_file + "'";
  FILE* p = ::popen(cmd.c_str(), "r");
  Outcome r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(dir + "/err");
  r.err.assign(std::istreambuf_iterator<char>(err), std::istreambuf_iterator<char>());
  return r;
}

}  // namespace strata::test
