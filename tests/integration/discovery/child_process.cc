#include "child_process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "testing/wait_for.h"

namespace infera::testing {

ChildProcess::ChildProcess(std::vector<std::string> argv, std::string log_path)
    : argv_(std::move(argv)), log_path_(std::move(log_path)) {}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

absl::Status ChildProcess::Start() {
  if (pid_ > 0) return absl::FailedPreconditionError("already running");
  if (argv_.empty()) return absl::InvalidArgumentError("empty argv");
  int log_fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return absl::InternalError("cannot open log " + log_path_);
  std::vector<char*> args;
  for (std::string& a : argv_) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log_fd);
    return absl::InternalError(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    // Child: fresh signal state (the test may block signals), output to the log.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(log_fd);
  pid_ = pid;
  return absl::OkStatus();
}

void ChildProcess::Signal(int signal_number) {
  if (pid_ > 0) ::kill(pid_, signal_number);
}

int ChildProcess::Wait(int64_t timeout_ms) {
  if (pid_ <= 0) return -1;
  int status = 0;
  bool exited = WaitFor(
      [&] {
        pid_t r = ::waitpid(pid_, &status, WNOHANG);
        return r == pid_ || (r < 0 && errno == ECHILD);
      },
      timeout_ms, 20);
  if (!exited) return -1;
  pid_ = -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

int ChildProcess::Stop(int64_t timeout_ms) {
  if (pid_ <= 0) return -1;
  Signal(SIGTERM);
  int code = Wait(timeout_ms);
  if (code == -1) {
    Signal(SIGKILL);
    code = Wait(10000);
  }
  return code;
}

int PickFreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace infera::testing
