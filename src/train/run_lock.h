// The lock a training run holds on its run folder: RUN/.lock, flock'ed for as long as the run
// writes there and holding "PID HOST" of the holder. The kernel releases a flock when its process
// ends, however it ends, so a killed run never leaves a stale lock (the file stays, unlocked).
#pragma once

#include <string>

namespace hpcnet::train {

// The lock file's name inside a run folder (a folder holding only it counts as empty).
inline constexpr const char* kRunLockFile = ".lock";

class RunLock {
 public:
  RunLock() = default;
  ~RunLock();  // releases the lock (the file stays)
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  // Takes the lock on the existing folder dir, without waiting, and writes "PID HOST" into it;
  // does nothing when this object already holds it. `flag` is how the user named the folder
  // ("--out runs/x", "--resume runs/x"), for the message. InputError naming the holder's PID and
  // host when another process holds it, or when the lock file cannot be created. On a file
  // system without locks (flock fails with ENOLCK or EOPNOTSUPP) it says so on stderr and goes
  // on unlocked.
  void acquire(const std::string& dir, const std::string& flag);

  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace hpcnet::train
