#pragma once
// The strata binary under test (STRATA_BINARY) as a child process whose stdout and stderr the test reads: servers
// and routers started by the multi-process tests. The destructor kills it (SIGKILL) if it is still running, so a
// failing test never leaves a process behind.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace strata::test {

// A child process whose stderr we read.
struct Child {
  pid_t pid = -1;
  int err = -1;
  std::string output;

  explicit Child(const std::vector<std::string>& args) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe");
    pid = ::fork();
    if (pid == 0) {
      ::dup2(fds[1], 2);
      ::dup2(fds[1], 1);
      ::close(fds[0]);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(STRATA_BINARY));
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(STRATA_BINARY, argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    err = fds[0];
  }
  ~Child() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (err >= 0) ::close(err);
  }
  // Reads output until `needle` appears (true) or the timeout passes / the pipe closes (false).
  bool wait_for(const std::string& needle, double timeout_s) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (output.find(needle) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{err, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char buf[4096];
      const ssize_t n = ::read(err, buf, sizeof buf);
      if (n <= 0) return false;
      output.append(buf, static_cast<size_t>(n));
    }
    return true;
  }
  int wait_exit(double timeout_s) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < until) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -2;
  }
};

}  // namespace strata::test
