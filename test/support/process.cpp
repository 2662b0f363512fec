// fork/exec based child processes for end-to-end tests.
#include "test/support/process.hpp"

#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace outboxd::test {

child_process::child_process(std::vector<std::string> argv, std::map<std::string, std::string> env,
                             std::string log_path)
    : log_path_(std::move(log_path)) {
  std::vector<char*> args;
  for (auto& a : argv)
    args.push_back(a.data());
  args.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ < 0)
    throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    // Child: dies with the test process (even when the test aborts), own signal mask, output
    // to the log file.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    int fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
    for (const auto& [k, v] : env)
      ::setenv(k.c_str(), v.c_str(), 1);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
}

child_process::~child_process() {
  if (running()) {
    ::kill(pid_, SIGKILL);
    wait_exit(std::chrono::seconds(5));
  }
}

void child_process::signal(int sig) {
  if (!exit_code_)
    ::kill(pid_, sig);
}

std::optional<int> child_process::wait_exit(std::chrono::milliseconds timeout) {
  wait_until(
      [&] {
        if (exit_code_)
          return true;
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_)
          exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return exit_code_.has_value();
      },
      timeout);
  return exit_code_;
}

bool child_process::running() {
  return !wait_exit(std::chrono::milliseconds(0)).has_value();
}

std::string child_process::output() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string scratch_file(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("outboxd-e2e-" + std::to_string(::getpid()) + "-" + name))
      .string();
}

std::pair<int, std::string> run_command(std::vector<std::string> argv,
                                        std::map<std::string, std::string> env) {
  auto path = scratch_file("command-XXXXXX");
  int fd = ::mkstemp(path.data());
  if (fd >= 0)
    ::close(fd);
  int code = 0;
  std::string out;
  {
    child_process p(std::move(argv), std::move(env), path);
    code = p.wait_exit(std::chrono::seconds(60)).value_or(-1);
    out = p.output();
  }
  ::unlink(path.c_str());
  return {code, out};
}

} // namespace outboxd::test
