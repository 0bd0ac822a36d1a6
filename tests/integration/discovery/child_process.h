// ChildProcess: a real process started by an integration test (fork + execv),
// with its stdout and stderr appended to a log file.
//
//   ChildProcess p({"/usr/bin/etcd", "--data-dir", dir}, dir + "/etcd.log");
//   ASSERT_TRUE(p.Start().ok());
//   p.Signal(SIGTERM);
//   int status = p.Wait(/*timeout_ms=*/10000);  // exit status, or -1 on timeout
//
// The destructor SIGKILLs a still running child and reaps it, so a failing test
// leaves no process behind. Thread-safety: one thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace infera::testing {

class ChildProcess {
 public:
  ChildProcess(std::vector<std::string> argv, std::string log_path);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  absl::Status Start();
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  void Signal(int signal_number);
  // Waits for the child to exit: its exit code, 128 + signal if it was killed, or
  // -1 when it is still running after timeout_ms (it is left running then).
  int Wait(int64_t timeout_ms);
  // SIGTERM, wait up to timeout_ms, then SIGKILL; returns what Wait returned.
  int Stop(int64_t timeout_ms = 10000);

 private:
  std::vector<std::string> argv_;
  std::string log_path_;
  pid_t pid_ = -1;
};

// A TCP port on 127.0.0.1 that was free a moment ago (bind port 0, read, close).
int PickFreePort();

}  // namespace infera::testing
