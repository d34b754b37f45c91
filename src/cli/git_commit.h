#pragma once
// The commit a results file records when no --commit flag names it (strata bench, strata bench serve): `git rev-parse
// HEAD` of the working directory with "-dirty" appended when tracked files differ from it — a run with uncommitted
// edits must not pass for the commit (issue 23) — else "unknown". Where the tree has no .git (the GPU machine's
// copy), the caller passes --commit; scripts/provenance.sh gives the same string to the shell scripts.
#include <cstdio>
#include <cstdlib>
#include <string>

namespace strata::cli {

// The stdout of `command`; `ok` says whether it ran and exited 0.
inline std::string command_output(const char* command, bool& ok) {
  std::string out;
  FILE* p = ::popen(command, "r");
  if (!p) {
    ok = false;
    return out;
  }
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ok = ::pclose(p) == 0;
  return out;
}

inline std::string git_commit() {
  bool ok = false;
  std::string sha = command_output("git rev-parse HEAD 2>/dev/null", ok);
  while (!sha.empty() && (sha.back() == '\n' || sha.back() == '\r')) sha.pop_back();
  if (!ok || sha.size() != 40) return "unknown";
  bool status_ok = false;
  const std::string changes = command_output("git status --porcelain --untracked-files=no 2>/dev/null", status_ok);
  return status_ok && !changes.empty() ? sha + "-dirty" : sha;
}

}  // namespace strata::cli
