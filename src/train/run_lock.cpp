// RunLock (see run_lock.h): flock(LOCK_EX | LOCK_NB) on RUN/.lock, opened O_CLOEXEC so that no
// child process inherits the lock; the holder's "PID HOST" is read back for the refusal.
#include "src/train/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "hpcnet/error.h"

namespace hpcnet::train {
namespace {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

// "PID 1234 on host node7" from the lock file of another process; it writes that just after
// taking the lock, so an empty file is read again for a moment before giving up.
std::string describe_holder(const std::string& path) {
  for (int tries = 0; tries < 50; ++tries) {
    std::ifstream in(path);
    std::string pid, host;
    in >> pid >> host;
    if (!pid.empty()) return "PID " + pid + " on host " + (host.empty() ? "?" : host);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return "a process that has not written its PID into " + path;
}

}  // namespace

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

void RunLock::acquire(const std::string& dir, const std::string& flag) {
  if (fd_ >= 0) return;
  const std::string path = (std::filesystem::path(dir) / kRunLockFile).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    throw InputError(flag + ": cannot create the run's lock file " + path + " (" +
                     std::strerror(errno) + "); check the folder's permissions");
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK)
      throw InputError(flag + " is in use by another run (" + describe_holder(path) +
                       "): wait for it to end or stop it, or choose another folder");
    std::fprintf(stderr,
                 "hpcnet: %s: the file system does not lock %s (%s): a second run writing "
                 "into this folder would not be noticed\n",
                 flag.c_str(), path.c_str(), std::strerror(err));
    return;
  }
  const std::string text = std::to_string(::getpid()) + " " + host_name() + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) < 0)
    std::fprintf(stderr, "hpcnet: %s: could not write %s (%s)\n", flag.c_str(), path.c_str(),
                 std::strerror(errno));
  fd_ = fd;
}

}  // namespace hpcnet::train
