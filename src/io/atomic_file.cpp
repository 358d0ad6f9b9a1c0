// Crash-safe file replacement: write a temp file beside the target, fsync it, rename it over the
// target, fsync the folder. POSIX only. The temp file never outlives a failed write. A test hook
// (src/io/write_fault.h) kills the writer or fills the disk at an exact byte; off unless set.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <streambuf>
#include <vector>

#include "hpcnet/io.h"
#include "src/io/write_fault.h"

namespace hpcnet {
namespace {

std::string errno_str(int err) { return std::strerror(err); }

// The reason a write failed, with what to do when the disk is full.
std::string write_error(int err) {
  std::string s = errno_str(err);
  if (err == ENOSPC || err == EDQUOT) s += " (free some space; any previous version is kept)";
  return s;
}

// ---- the test hook (write_fault.h) ----

struct FaultState {
  WriteFault fault;
  std::string error;  // a malformed HPCNET_TEST_WRITE_FAULT: every write refuses, naming it
  int64_t seen = 0;   // writes that matched fault.name so far
};

// HPCNET_TEST_WRITE_FAULT, read once.
FaultState& fault_state() {
  static FaultState s = [] {
    FaultState f;
    if (const char* v = std::getenv("HPCNET_TEST_WRITE_FAULT"); v && *v) {
      try {
        f.fault = parse_write_fault(v);
      } catch (const InputError& e) {
        f.error = e.what();
      }
    }
    return f;
  }();
  return s;
}

// The fault that applies to this write of path, or nullptr (always, when none is armed).
const WriteFault* arm_fault(const std::string& path) {
  FaultState& s = fault_state();
  if (!s.error.empty()) throw InputError(s.error);
  if (s.fault.action == WriteFault::Action::kNone) return nullptr;
  const size_t slash = path.rfind('/');
  const std::string file = slash == std::string::npos ? path : path.substr(slash + 1);
  if (file.find(s.fault.name) == std::string::npos) return nullptr;
  return ++s.seen == s.fault.nth ? &s.fault : nullptr;
}

// A kill fault: SIGKILL to this process, as `kill -9` or the OOM killer would.
[[noreturn]] void die_now() {
  ::kill(::getpid(), SIGKILL);
  for (;;) ::pause();
}

void fire_at(const WriteFault* f, WriteFault::At at) {
  if (f && f->at == at) die_now();
}

// Writes all of [p, p+n) to fd, retrying on EINTR and short writes. Returns 0 or an errno.
int write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
}

// An output streambuf over a file descriptor with a 1 MiB buffer; large writes bypass the buffer.
// The first failure is kept in err() and makes every later operation fail. With an At::kByte
// fault, the write that crosses its byte is cut there: the process is killed after exactly that
// many bytes, or the write fails with ENOSPC once they are written.
class FdStreambuf : public std::streambuf {
 public:
  FdStreambuf(int fd, const WriteFault* fault)
      : fd_(fd),
        fault_(fault && fault->at == WriteFault::At::kByte ? fault : nullptr),
        buf_(1 << 20) {
    setp(buf_.data(), buf_.data() + buf_.size());
  }
  int err() const { return err_; }

 protected:
  int_type overflow(int_type ch) override {
    if (flush_buffer() != 0) return traits_type::eof();
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(ch);
      pbump(1);
    }
    return traits_type::not_eof(ch);
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    if (err_) return 0;
    if (n <= epptr() - pptr()) {
      std::memcpy(pptr(), s, static_cast<size_t>(n));
      pbump(static_cast<int>(n));
      return n;
    }
    if (flush_buffer() != 0) return 0;
    if (static_cast<size_t>(n) < buf_.size()) {
      std::memcpy(pptr(), s, static_cast<size_t>(n));
      pbump(static_cast<int>(n));
      return n;
    }
    err_ = write_out(s, static_cast<size_t>(n));
    return err_ ? 0 : n;
  }
  int sync() override { return flush_buffer() == 0 ? 0 : -1; }

 private:
  int flush_buffer() {
    if (err_) return err_;
    err_ = write_out(pbase(), static_cast<size_t>(pptr() - pbase()));
    setp(buf_.data(), buf_.data() + buf_.size());
    return err_;
  }

  int write_out(const char* p, size_t n) {
    if (fault_) {
      const int64_t room = fault_->byte - written_;
      const bool kill = fault_->action == WriteFault::Action::kKill;
      if (room >= 0 && (kill ? static_cast<int64_t>(n) >= room : static_cast<int64_t>(n) > room)) {
        if (int err = write_all(fd_, p, static_cast<size_t>(room))) return err;
        written_ += room;
        if (kill) die_now();
        return ENOSPC;
      }
    }
    const int err = write_all(fd_, p, n);
    if (err == 0) written_ += static_cast<int64_t>(n);
    return err;
  }

  int fd_;
  const WriteFault* fault_;
  int64_t written_ = 0;
  std::vector<char> buf_;
  int err_ = 0;
};

// fsyncs the folder holding path, so the rename itself survives a crash. Filesystems that cannot
// sync a folder (EINVAL) are accepted.
void fsync_parent_dir(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;  // the file itself is already durable; nothing more we can do here
  int rc = ::fsync(dfd);
  int err = errno;
  ::close(dfd);
  if (rc != 0 && err != EINVAL && err != EROFS)
    throw Error(path + ": cannot sync its folder after writing: " + errno_str(err));
}

}  // namespace

void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& writer) {
  HPCNET_REQUIRE(!path.empty(), "write_file_atomic: empty path");
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const WriteFault* fault = arm_fault(path);

  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    int err = errno;
    throw InputError(path + ": cannot create '" + tmp + "' to write it: " + errno_str(err) +
                     " (does the folder exist and is it writable?)");
  }
  try {
    // Keep the permission bits of the file being replaced.
    struct stat st;
    if (::stat(path.c_str(), &st) == 0) ::fchmod(fd, st.st_mode & 07777);

    {
      FdStreambuf sb(fd, fault);
      std::ostream os(&sb);
      writer(os);
      os.flush();
      if (sb.err() != 0) throw Error(path + ": write failed: " + write_error(sb.err()));
      if (!os) throw Error(path + ": write failed (the output stream is in a failed state)");
    }
    if (::fsync(fd) != 0) throw Error(path + ": fsync failed: " + write_error(errno));
    int rc = ::close(fd);
    fd = -1;
    if (rc != 0) throw Error(path + ": close failed: " + write_error(errno));
    fire_at(fault, WriteFault::At::kBeforeRename);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      int err = errno;
      if (err == EISDIR) throw InputError(path + ": is a folder; cannot replace it with a file");
      throw Error(path + ": cannot rename '" + tmp + "' over it: " + errno_str(err));
    }
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  fire_at(fault, WriteFault::At::kAfterRename);
  fsync_parent_dir(path);
  fire_at(fault, WriteFault::At::kDone);
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  write_file_atomic(path, [bytes](std::ostream& os) {
    os.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  });
}

WriteFault parse_write_fault(const std::string& spec) {
  const std::string usage = "HPCNET_TEST_WRITE_FAULT=" + spec +
                            ": expected ACTION:AT[:NAME[:NTH]] with ACTION kill or enospc, AT a "
                            "byte count or (kill) before-rename, after-rename or done, NTH >= 1";
  std::vector<std::string> parts;
  for (size_t a = 0;;) {
    const size_t b = spec.find(':', a);
    parts.push_back(spec.substr(a, b == std::string::npos ? std::string::npos : b - a));
    if (b == std::string::npos) break;
    a = b + 1;
  }
  if (parts.size() < 2 || parts.size() > 4) throw InputError(usage);
  auto number = [&](const std::string& t) {
    if (t.empty() || t.size() > 15 || t.find_first_not_of("0123456789") != std::string::npos)
      throw InputError(usage);
    return static_cast<int64_t>(std::stoll(t));
  };
  WriteFault f;
  if (parts[0] == "kill")
    f.action = WriteFault::Action::kKill;
  else if (parts[0] == "enospc")
    f.action = WriteFault::Action::kEnospc;
  else
    throw InputError(usage);
  if (parts[1] == "before-rename")
    f.at = WriteFault::At::kBeforeRename;
  else if (parts[1] == "after-rename")
    f.at = WriteFault::At::kAfterRename;
  else if (parts[1] == "done")
    f.at = WriteFault::At::kDone;
  else
    f.byte = number(parts[1]);
  if (f.action == WriteFault::Action::kEnospc && f.at != WriteFault::At::kByte)
    throw InputError(usage);
  if (parts.size() > 2) f.name = parts[2];
  if (parts.size() > 3) f.nth = number(parts[3]);
  if (f.nth < 1) throw InputError(usage);
  return f;
}

void set_write_fault(const WriteFault& f) {
  FaultState& s = fault_state();
  s.fault = f;
  s.error.clear();
  s.seen = 0;
}

}  // namespace hpcnet
