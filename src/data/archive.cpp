// File and archive reading for the dataset loaders: whole files into memory, and a sequential
// libarchive scan of .tar/.tar.gz that keeps only the entries a loader asks for. Both check the
// size a file or member claims (regular files only, at most kMaxInputFileBytes) before reserving.
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "src/data/internal.h"

namespace hpcnet::data::detail {

// What a stat mode is, for "not a regular file (...)".
const char* file_kind(unsigned mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

std::string limit_str(uint64_t bytes) {
  if (bytes % (uint64_t{1} << 30) == 0) return std::to_string(bytes >> 30) + " GiB";
  if (bytes % (uint64_t{1} << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

bool is_broken_link(const std::string& path, std::string* target) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return false;
  if (::stat(path.c_str(), &st) == 0) return false;  // it leads somewhere
  if (target) {
    char buf[4096];
    const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
    target->assign(buf, n > 0 ? static_cast<size_t>(n) : 0);
  }
  return true;
}

std::vector<uint8_t> read_whole_file(const std::string& path, const std::string& what,
                                     uint64_t max_bytes) {
  std::vector<uint8_t> out;
  read_file_into(path, what, out, max_bytes);
  return out;
}

void read_file_into(const std::string& path, const std::string& what, std::vector<uint8_t>& out,
                    uint64_t max_bytes) {
  auto fail = [&](const std::string& why) {
    return InputError(what + ": cannot read " + path + ": " + why);
  };
  // stat before open: opening a FIFO would block until a writer comes, and a device may act.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (std::string target; is_broken_link(path, &target))
      throw fail("a link to " + target + ", which " + (err == ELOOP ? "loops" : "does not exist") +
                 "; fix or remove the link");
    throw fail(std::strerror(err));
  }
  if (!S_ISREG(st.st_mode))
    throw fail(std::string("not a regular file (") + file_kind(st.st_mode) + ")");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) throw fail(std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::fstat(fd, &st) != 0) throw fail(std::strerror(errno));
  if (!S_ISREG(st.st_mode))  // replaced between stat and open
    throw fail(std::string("not a regular file (") + file_kind(st.st_mode) + ")");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes)
    throw fail(std::to_string(size) + " bytes, over the " + limit_str(max_bytes) +
               " limit for one input file");
  out.resize(static_cast<size_t>(size));
  size_t got = 0;
  while (got < out.size()) {  // a file that grows meanwhile is read up to its size at open
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw fail(std::strerror(errno));
    if (n == 0) break;  // shrank meanwhile
    got += static_cast<size_t>(n);
  }
  out.resize(got);
}

uint64_t fnv1a(const void* data, size_t size, uint64_t h) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < size; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

std::string to_lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

static bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

bool is_archive_name(const std::string& path) {
  std::string p = to_lower(path);
  return ends_with(p, ".tar") || ends_with(p, ".tar.gz") || ends_with(p, ".tgz");
}

bool is_image_name(const std::string& name) {
  std::string n = to_lower(name);
  return ends_with(n, ".jpg") || ends_with(n, ".jpeg") || ends_with(n, ".png");
}

std::vector<std::string> split_path(const std::string& p) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= p.size()) {
    size_t j = p.find('/', i);
    if (j == std::string::npos) j = p.size();
    if (j > i) out.push_back(p.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

namespace {

std::string normalise_entry_path(const char* raw) {
  std::string p = raw ? raw : "";
  for (;;) {
    if (p.rfind("./", 0) == 0) {
      p.erase(0, 2);
    } else if (!p.empty() && p[0] == '/') {
      p.erase(0, 1);
    } else {
      break;
    }
  }
  while (!p.empty() && p.back() == '/') p.pop_back();
  return p;
}

using ArchiveReader = std::unique_ptr<archive, int (*)(archive*)>;

// A reader of every format and filter libarchive knows, not yet opened.
ArchiveReader new_archive_reader() {
  ArchiveReader a(archive_read_new(), &archive_read_free);
  if (!a) throw Error("libarchive: out of memory");
  archive_read_support_filter_all(a.get());
  archive_read_support_format_all(a.get());
  return a;
}

InputError archive_error(archive* a, const std::string& archive_path, const std::string& what) {
  const char* msg = archive_error_string(a);
  return InputError("cannot read archive " + archive_path + ": " + what +
                    (msg ? std::string(" (") + msg + ")" : std::string()) +
                    "; check the file or unpack it and pass the folder");
}

// scan_archive's loop over an opened reader.
std::vector<ArchiveEntry> scan_open_archive(
    archive* a, const std::string& archive_path,
    const std::function<bool(const std::string&, bool)>& want) {
  auto fail = [&](const std::string& what) { return archive_error(a, archive_path, what); };
  std::vector<ArchiveEntry> out;
  archive_entry* entry = nullptr;
  for (;;) {
    int r = archive_read_next_header(a, &entry);
    if (r == ARCHIVE_EOF) break;
    if (r == ARCHIVE_WARN) r = ARCHIVE_OK;
    if (r != ARCHIVE_OK) throw fail("bad entry header");
    mode_t type = archive_entry_filetype(entry);
    std::string path = normalise_entry_path(archive_entry_pathname(entry));
    if (path.empty()) continue;
    bool is_dir = type == AE_IFDIR;
    bool keep = want(path, is_dir);
    if (is_dir || type != AE_IFREG || !keep) continue;
    ArchiveEntry e;
    e.path = std::move(path);
    // The size a header claims (a PAX size record, a sparse file's logical size) is checked
    // before any buffer is reserved, and every block's end again while reading.
    auto too_large = [&](const std::string& bytes) {
      return InputError("cannot read archive " + archive_path + ": member " + e.path + " is " +
                        bytes + " bytes, over the " + limit_str(kMaxInputFileBytes) +
                        " limit for one file (a corrupt archive?); check the file");
    };
    if (archive_entry_size_is_set(entry)) {
      const la_int64_t claimed = archive_entry_size(entry);
      if (claimed < 0 || static_cast<uint64_t>(claimed) > kMaxInputFileBytes)
        throw too_large(std::to_string(claimed));
      if (claimed > 0) e.data.reserve(static_cast<size_t>(claimed));
    }
    const void* buf;
    size_t len;
    la_int64_t offset;
    for (;;) {
      r = archive_read_data_block(a, &buf, &len, &offset);
      if (r == ARCHIVE_EOF) break;
      if (r != ARCHIVE_OK && r != ARCHIVE_WARN) throw fail("cannot read " + e.path);
      if (offset < 0 || static_cast<uint64_t>(offset) > kMaxInputFileBytes ||
          len > kMaxInputFileBytes - static_cast<uint64_t>(offset))
        throw too_large("at least " + std::to_string(offset) + " + " + std::to_string(len));
      size_t off = static_cast<size_t>(offset);
      if (e.data.size() < off) e.data.resize(off, 0);  // sparse hole
      const uint8_t* p = static_cast<const uint8_t*>(buf);
      if (e.data.size() == off) {
        e.data.insert(e.data.end(), p, p + len);
      } else {
        if (e.data.size() < off + len) e.data.resize(off + len);
        std::memcpy(e.data.data() + off, p, len);
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

std::vector<ArchiveEntry> scan_archive(const std::string& archive_path,
                                       const std::function<bool(const std::string&, bool)>& want) {
  ArchiveReader a = new_archive_reader();
  if (archive_read_open_filename(a.get(), archive_path.c_str(), 1 << 16) != ARCHIVE_OK)
    throw archive_error(a.get(), archive_path, "cannot open");
  return scan_open_archive(a.get(), archive_path, want);
}

std::vector<ArchiveEntry> scan_archive_memory(
    const uint8_t* data, size_t size, const std::string& name,
    const std::function<bool(const std::string&, bool)>& want) {
  ArchiveReader a = new_archive_reader();
  if (archive_read_open_memory(a.get(), data, size) != ARCHIVE_OK)
    throw archive_error(a.get(), name, "cannot open");
  return scan_open_archive(a.get(), name, want);
}

}  // namespace hpcnet::data::detail
