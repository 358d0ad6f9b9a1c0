// Crash-safe file replacement: write a temp file beside the target, fsync it, rename it over the
// target, fsync the folder. POSIX only. The temp file never outlives a failed write.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <streambuf>
#include <vector>

#include "hpcnet/io.h"

namespace hpcnet {
namespace {

std::string errno_str(int err) { return std::strerror(err); }

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
// The first failure is kept in err() and makes every later operation fail.
class FdStreambuf : public std::streambuf {
 public:
  explicit FdStreambuf(int fd) : fd_(fd), buf_(1 << 20) {
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
    err_ = write_all(fd_, s, static_cast<size_t>(n));
    return err_ ? 0 : n;
  }
  int sync() override { return flush_buffer() == 0 ? 0 : -1; }

 private:
  int flush_buffer() {
    if (err_) return err_;
    err_ = write_all(fd_, pbase(), static_cast<size_t>(pptr() - pbase()));
    setp(buf_.data(), buf_.data() + buf_.size());
    return err_;
  }

  int fd_;
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
      FdStreambuf sb(fd);
      std::ostream os(&sb);
      writer(os);
      os.flush();
      if (sb.err() != 0) throw Error(path + ": write failed: " + errno_str(sb.err()));
      if (!os) throw Error(path + ": write failed (the output stream is in a failed state)");
    }
    if (::fsync(fd) != 0) throw Error(path + ": fsync failed: " + errno_str(errno));
    int rc = ::close(fd);
    fd = -1;
    if (rc != 0) throw Error(path + ": close failed: " + errno_str(errno));
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
  fsync_parent_dir(path);
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  write_file_atomic(path, [bytes](std::ostream& os) {
    os.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  });
}

}  // namespace hpcnet
