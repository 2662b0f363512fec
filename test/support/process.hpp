// A child process for end-to-end tests: started with arguments and extra environment, output
// captured to a file, stopped (SIGKILL) when the handle goes away.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace outboxd::test {

class child_process {
public:
  /// Starts `argv[0]` with the current environment plus `env`; stdout and stderr go to
  /// `log_path`.
  child_process(std::vector<std::string> argv, std::map<std::string, std::string> env,
                std::string log_path);
  ~child_process();
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  void signal(int sig);
  /// The exit code (128+signal when killed) once the process ends within `timeout`.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);
  bool running();
  /// Everything the process printed so far.
  std::string output() const;
  pid_t pid() const { return pid_; }

private:
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
  std::string log_path_;
};

/// Polls `ready` every 20 ms until it returns true or `timeout` passes; returns the last result.
template <class F> bool wait_until(F&& ready, std::chrono::milliseconds timeout);

/// `outboxd-e2e-<pid>-<name>` in the temporary folder (TMPDIR, which scripts/test.sh points at a
/// folder of its own for each run, removed when every test passed): the logs and files of the
/// processes a test starts.
std::string scratch_file(const std::string& name);

/// Runs a command to completion and returns {exit code, combined output}.
std::pair<int, std::string> run_command(std::vector<std::string> argv,
                                        std::map<std::string, std::string> env = {});

} // namespace outboxd::test

#include <thread>

template <class F> bool outboxd::test::wait_until(F&& ready, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (ready())
      return true;
    if (std::chrono::steady_clock::now() >= deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}
