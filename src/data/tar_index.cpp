// Tar indexing from the headers alone (ustar, GNU, pax), pread of members, and the one-time
// decompression of a compressed tar into the cache. One parser (index_source) serves the archive
// in memory (index_tar, fuzzed) and on disk (TarFile::open), so both refuse the same inputs.
#include "src/data/tar_index.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string_view>

#include "hpcnet/error.h"
#include "hpcnet/io.h"
#include "src/data/internal.h"

namespace hpcnet::data::detail {

namespace {

namespace fs = std::filesystem;

constexpr uint64_t kBlock = 512;
// The most bytes one GNU long name or pax header may hold, and the most extension headers before
// one member (libarchive's limits too).
constexpr uint64_t kMaxExtensionBytes = uint64_t{1} << 20;
constexpr int kMaxExtensionsInRow = 32;

// The archive as the parser sees it: read(offset, n, out) fills out with the n bytes at offset
// (offset + n <= size) or throws InputError.
struct ByteSource {
  uint64_t size = 0;
  std::function<void(uint64_t offset, size_t n, uint8_t* out)> read;
};

// s for a one-line message: bytes outside printable ASCII as '?', at most 200 of them.
std::string printable(std::string_view s) {
  std::string out(s.substr(0, 200));
  for (char& c : out)
    if (c < 0x20 || c > 0x7e) c = '?';
  return s.size() > 200 ? out + "..." : out;
}

// "./a/b/" -> "a/b": leading "./" and "/" and trailing "/" removed (as scan_archive does).
std::string normalise_member_path(std::string p) {
  size_t i = 0;
  for (;;) {
    if (p.compare(i, 2, "./") == 0)
      i += 2;
    else if (i < p.size() && p[i] == '/')
      ++i;
    else
      break;
  }
  p.erase(0, i);
  while (!p.empty() && p.back() == '/') p.pop_back();
  return p;
}

// The bytes of a NUL-terminated header field of n bytes at h + at.
std::string header_field(const uint8_t* h, size_t at, size_t n) {
  const char* p = reinterpret_cast<const char*>(h + at);
  return std::string(p, strnlen(p, n));
}

// A numeric header field of n bytes: octal (leading spaces, digits, then spaces or NULs; no
// digits is 0) or, when base256, GNU's base-256 (first byte 0x80, then big-endian). nullopt for
// anything else, a negative base-256 value (0xff) or one of 2^63 or more.
std::optional<uint64_t> header_number(const uint8_t* p, size_t n, bool base256) {
  if (p[0] & 0x80) {
    if (!base256 || p[0] != 0x80) return std::nullopt;
    uint64_t v = 0;
    for (size_t i = 1; i < n; ++i) {
      if (v >> 55) return std::nullopt;
      v = (v << 8) | p[i];
    }
    return v;
  }
  size_t i = 0;
  while (i < n && p[i] == ' ') ++i;
  uint64_t v = 0;
  for (; i < n && p[i] >= '0' && p[i] <= '7'; ++i) {
    if (v >> 59) return std::nullopt;
    v = v * 8 + static_cast<uint64_t>(p[i] - '0');
  }
  for (; i < n; ++i)
    if (p[i] != ' ' && p[i] != '\0') return std::nullopt;
  return v;
}

bool is_zero_block(const uint8_t* h) {
  return std::all_of(h, h + kBlock, [](uint8_t b) { return b == 0; });
}

// Whether the checksum field (octal, at 148) equals the sum of the header's bytes with that field
// read as spaces: unsigned as POSIX says, or signed as some old tars computed it.
bool checksum_ok(const uint8_t* h) {
  const std::optional<uint64_t> stored = header_number(h + 148, 8, false);
  if (!stored) return false;
  int64_t sum = 0, signed_sum = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    const uint8_t b = i >= 148 && i < 156 ? ' ' : h[i];
    sum += b;
    signed_sum += static_cast<int8_t>(b);
  }
  return static_cast<int64_t>(*stored) == sum || static_cast<int64_t>(*stored) == signed_sum;
}

// The path a header names: ustar's prefix + "/" + name (not in GNU headers, whose prefix bytes
// hold other fields), else the name alone.
std::string header_path(const uint8_t* h) {
  std::string name = header_field(h, 0, 100);
  const bool gnu = std::memcmp(h + 257, "ustar  \0", 8) == 0;
  if (gnu || std::memcmp(h + 257, "ustar", 5) != 0 || h[345] == 0) return name;
  std::string prefix = header_field(h, 345, 155);
  if (prefix.back() != '/') prefix += '/';
  return prefix + name;
}

// What the extension headers ('x', 'L', ...) since the last member said about the next one.
struct Pending {
  int headers = 0;        // extension headers read
  uint64_t first = 0;     // offset of the first of them
  std::string long_name;  // GNU 'L'
  bool has_long_name = false;
  std::string pax_path;  // pax "path"
  bool has_pax_path = false;
  std::optional<uint64_t> pax_size;
  bool sparse = false;      // GNU.sparse.* or SUN.holesdata
  std::string sparse_name;  // GNU.sparse.name, the real name of a sparse member
};

// The walk over an archive's headers (index_source's state and steps).
class TarIndexer {
 public:
  TarIndexer(const ByteSource& src, const std::string& name, std::vector<TarMember>* members,
             std::vector<std::string>* dirs)
      : src_(src), name_(name), members_(members), dirs_(dirs) {}

  void run();

 private:
  InputError fail(const std::string& what, const std::string& todo = "check the file") const {
    return InputError("cannot read archive " + name_ + ": " + what + "; " + todo);
  }
  InputError truncated(const std::string& what) const {
    return fail(what + " (truncated: an interrupted download or copy?)", "fetch it again");
  }
  std::string where(uint64_t at) const {
    return "the header at offset " + std::to_string(at) +
           (last_.empty() ? std::string() : " (after member " + printable(last_) + ")");
  }
  std::string read_extension(const uint8_t* h, uint64_t at, uint64_t size, const char* what);
  void parse_pax(const std::string& body, uint64_t at);
  void take_header(const uint8_t* h, uint64_t at, uint64_t header_size);
  void add_dir(std::string dir);

  const ByteSource& src_;
  const std::string& name_;
  std::vector<TarMember>* members_;
  std::vector<std::string>* dirs_;
  Pending pending_;
  bool seen_pax_ = false;   // a pax header was read: hard links' size fields are obeyed
  std::string last_;        // the last entry's path, for messages
  uint64_t data_size_ = 0;  // of the header being read: what follows it before the next
  std::string current_;     // that header, for messages: "member X (header at offset N)"
};

void TarIndexer::run() {
  uint64_t pos = 0;
  uint8_t h[kBlock];
  while (pos < src_.size) {
    if (src_.size - pos < kBlock)
      throw truncated("it ends " + std::to_string(src_.size - pos) + " bytes into " + where(pos));
    src_.read(pos, kBlock, h);
    if (is_zero_block(h)) break;  // the end-of-archive mark (libarchive and tar stop here too)
    if (!checksum_ok(h))
      throw fail(where(pos) + " has a bad checksum: not a tar archive, or a corrupt one");
    const std::optional<uint64_t> size = header_number(h + 124, 12, true);
    if (!size)
      throw fail(where(pos) + ", for '" + printable(header_path(h)) +
                 "', has a size field that is not an octal or base-256 number: a corrupt archive");
    data_size_ = *size;
    take_header(h, pos, *size);
    const uint64_t left = src_.size - pos - kBlock;
    const uint64_t padded = data_size_ + (-data_size_ & (kBlock - 1));
    if (data_size_ > left || padded > left)
      throw truncated(current_ + " claims " + std::to_string(data_size_) + " bytes of data but " +
                      std::to_string(left) + " bytes follow its header");
    pos += kBlock + padded;
  }
  if (pending_.headers > 0)
    throw truncated("the extension header at offset " + std::to_string(pending_.first) +
                    " has no member after it");
  std::sort(dirs_->begin(), dirs_->end());
  dirs_->erase(std::unique(dirs_->begin(), dirs_->end()), dirs_->end());
}

// The data of a GNU long name or pax header (size bytes after the header at `at`).
std::string TarIndexer::read_extension(const uint8_t* h, uint64_t at, uint64_t size,
                                       const char* what) {
  if (size > kMaxExtensionBytes)
    throw fail(std::string(what) + " at offset " + std::to_string(at) + " claims " +
               std::to_string(size) + " bytes, over the " + limit_str(kMaxExtensionBytes) +
               " limit: a corrupt archive");
  if (size > src_.size - at - kBlock)
    throw truncated(std::string(what) + " at offset " + std::to_string(at) + " claims " +
                    std::to_string(size) + " bytes but " + std::to_string(src_.size - at - kBlock) +
                    " follow it");
  std::string body(size, '\0');
  src_.read(at + kBlock, size, reinterpret_cast<uint8_t*>(body.data()));
  return body;
}

// Records "LEN key=value\n" (LEN counting the whole record, in decimal): "path", "size" and the
// sparse keys are noted for the next member; others are ignored.
void TarIndexer::parse_pax(const std::string& raw, uint64_t at) {
  const std::string_view body(raw.data(), strnlen(raw.data(), raw.size()));  // a NUL ends them
  int record = 0;
  for (size_t pos = 0; pos < body.size();) {
    ++record;
    auto bad = [&](const std::string& why) {
      return fail("pax record " + std::to_string(record) + " of the header at offset " +
                  std::to_string(at) + " is malformed: " + why);
    };
    size_t i = pos;
    uint64_t len = 0;
    for (; i < body.size() && body[i] >= '0' && body[i] <= '9'; ++i) {
      len = len * 10 + static_cast<uint64_t>(body[i] - '0');
      if (len > body.size() - pos) throw bad("its length runs past the header's data");
    }
    if (i == pos || i == body.size() || body[i] != ' ')
      throw bad("it does not start with a length and a space");
    const size_t end = pos + len;
    if (end <= i + 1 || body[end - 1] != '\n') throw bad("its length does not end at a newline");
    const std::string_view kv = body.substr(i + 1, end - 1 - (i + 1));
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0) throw bad("it is not key=value");
    const std::string_view key = kv.substr(0, eq), value = kv.substr(eq + 1);
    if (key == "path") {
      pending_.pax_path = std::string(value);
      pending_.has_pax_path = !value.empty();  // an empty value restores the header's
    } else if (key == "size") {
      if (value.empty()) {
        pending_.pax_size.reset();
      } else {
        if (value.size() > 18 || value.find_first_not_of("0123456789") != std::string::npos)
          throw bad("size '" + printable(value) + "' is not a decimal number below 10^18");
        pending_.pax_size = std::stoull(std::string(value));
      }
    } else if (key.substr(0, 11) == "GNU.sparse." || key == "SUN.holesdata") {
      pending_.sparse = true;
      if (key == "GNU.sparse.name") pending_.sparse_name = std::string(value);
    }
    pos = end;
  }
}

// One header at `at` (checksum and size field checked): an extension noted in pending_, or an
// entry added; sets data_size_ to the bytes of data that follow it.
void TarIndexer::take_header(const uint8_t* h, uint64_t at, uint64_t header_size) {
  const char type = static_cast<char>(h[156]);
  const bool extension = type == 'x' || type == 'X' || type == 'g' || type == 'L' || type == 'K' ||
                         type == 'A' || type == 'V';
  if (extension) {
    current_ = std::string("the '") + type + "' extension header at offset " + std::to_string(at);
    if (pending_.headers++ == 0) pending_.first = at;
    if (pending_.headers > kMaxExtensionsInRow)
      throw fail(std::to_string(pending_.headers) + " extension headers in a row from offset " +
                 std::to_string(pending_.first) + ": a corrupt archive");
    if (type == 'x' || type == 'X') {
      seen_pax_ = true;
      parse_pax(read_extension(h, at, header_size, "the pax header"), at);
    } else if (type == 'L') {
      const std::string body = read_extension(h, at, header_size, "the GNU long-name header");
      pending_.long_name = body.substr(0, strnlen(body.data(), body.size()));
      pending_.has_long_name = true;
    } else if (type == 'g') {
      seen_pax_ = true;  // global records are not used: skipped with the data
    }
    return;
  }
  const Pending p = std::move(pending_);
  pending_ = Pending();
  const std::string raw = p.has_pax_path    ? p.pax_path
                          : p.has_long_name ? p.long_name
                                            : header_path(h);
  std::string path = normalise_member_path(raw);
  last_ = path.empty() ? raw : path;
  current_ = "member " + printable(last_) + " (header at offset " + std::to_string(at) + ")";
  if (p.sparse || type == 'S')
    throw fail("sparse member " +
                   printable(p.sparse_name.empty() ? last_ : normalise_member_path(p.sparse_name)),
               "re-create the archive without --sparse (-S)");
  // Links, devices, FIFOs and folders carry no data whatever their size field says (hard links
  // do in pax archives), unless a pax size record says so.
  const bool no_data = type == '2' || type == '3' || type == '4' || type == '5' || type == '6' ||
                       (type == '1' && !seen_pax_);
  data_size_ = p.pax_size ? *p.pax_size : no_data ? 0 : header_size;
  const bool regular = type == '0' || type == '\0' || type == '7';
  if (path.empty()) return;
  if (type == '5' || type == 'D' || (regular && raw.back() == '/')) {
    add_dir(path);
  } else if (regular) {
    members_->push_back({path, at + kBlock, data_size_});
    const size_t slash = path.rfind('/');
    if (slash != std::string::npos) add_dir(path.substr(0, slash));
  }
}

// dir and each folder above it, less trailing slashes ("a//b" gives "a" and "a//b", never "a/");
// a repeat of the last folder added is skipped (members come folder by folder), the rest are
// sorted and made unique at the end.
void TarIndexer::add_dir(std::string dir) {
  while (!dir.empty() && dir.back() == '/') dir.pop_back();
  if (dir.empty() || (!dirs_->empty() && dirs_->back() == dir)) return;
  for (size_t end = dir.find('/'); end != std::string::npos; end = dir.find('/', end + 1))
    if (end > 0 && dir[end - 1] != '/') dirs_->push_back(dir.substr(0, end));
  dirs_->push_back(std::move(dir));
}

void index_source(const ByteSource& src, const std::string& name, std::vector<TarMember>* members,
                  std::vector<std::string>* dirs) {
  members->clear();
  dirs->clear();
  TarIndexer(src, name, members, dirs).run();
}

// The compression whose magic bytes start the file on fd ("gzip", ...), or nullptr. A first block
// that is a valid tar header is never taken for one (a member may be named "BZh...").
const char* compression_of(int fd) {
  uint8_t h[kBlock] = {};
  ssize_t n;
  do n = ::pread(fd, h, sizeof h, 0);
  while (n < 0 && errno == EINTR);
  if (n < 6) return nullptr;
  if (n == static_cast<ssize_t>(kBlock) && checksum_ok(h)) return nullptr;
  if (h[0] == 0x1f && h[1] == 0x8b) return "gzip";
  if (h[0] == 'B' && h[1] == 'Z' && h[2] == 'h') return "bzip2";
  if (std::memcmp(h,
                  "\xfd"
                  "7zXZ\0",
                  6) == 0)
    return "xz";
  if (std::memcmp(h, "\x28\xb5\x2f\xfd", 4) == 0) return "zstd";
  return nullptr;
}

// Opens path for reading after checking (with stat, before opening: a FIFO would block) that it
// is a regular file; InputError "cannot read archive PATH: ..." otherwise. Returns the fd.
int open_regular(const std::string& path, struct stat* st) {
  auto fail = [&](const std::string& why) {
    return InputError("cannot read archive " + path + ": " + why);
  };
  if (::stat(path.c_str(), st) != 0)
    throw fail(std::string(std::strerror(errno)) + "; check the path");
  if (!S_ISREG(st->st_mode))
    throw fail(std::string("not a regular file (") + file_kind(st->st_mode) + ")");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) throw fail(std::strerror(errno));
  if (::fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {  // replaced between stat and open
    ::close(fd);
    throw fail("not a regular file");
  }
  return fd;
}

}  // namespace

void index_tar(const uint8_t* data, size_t size, const std::string& name,
               std::vector<TarMember>* members, std::vector<std::string>* dirs) {
  ByteSource src;
  src.size = size;
  src.read = [data](uint64_t offset, size_t n, uint8_t* out) {
    std::memcpy(out, data + offset, n);
  };
  index_source(src, name, members, dirs);
}

// ---- TarFile ------------------------------------------------------------------------------------

TarFile::TarFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

TarFile::~TarFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::shared_ptr<const TarFile> TarFile::open_unindexed(const std::string& path) {
  struct stat st;
  const int fd = open_regular(path, &st);
  std::shared_ptr<TarFile> tar(new TarFile(path, fd));  // owns fd from here
  if (const char* kind = compression_of(fd))
    throw InputError("cannot read archive " + path + ": it is " + kind + "-compressed");
  return tar;
}

std::shared_ptr<const TarFile> TarFile::open(const std::string& path) {
  struct stat st;
  const int fd = open_regular(path, &st);
  std::shared_ptr<TarFile> tar(new TarFile(path, fd));  // owns fd from here
  if (const char* kind = compression_of(fd))
    throw InputError("cannot read archive " + path + ": it is " + kind +
                     "-compressed, and only an uncompressed .tar is read in place; open "
                     "decompressed_tar()'s copy, or decompress it and pass the .tar");
  ByteSource src;
  src.size = static_cast<uint64_t>(st.st_size);
  src.read = [&](uint64_t offset, size_t n, uint8_t* out) {
    for (size_t got = 0; got < n;) {
      const ssize_t r = ::pread(fd, out + got, n - got, static_cast<off_t>(offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0)
        throw InputError("cannot read archive " + path + ": reading offset " +
                         std::to_string(offset + got) + ": " +
                         (r < 0 ? std::strerror(errno) : "end of file (it shrank meanwhile?)") +
                         "; check the file and its disk");
      got += static_cast<size_t>(r);
    }
  };
  index_source(src, path, &tar->members_, &tar->dirs_);
  tar->by_path_.resize(tar->members_.size());
  for (size_t i = 0; i < tar->by_path_.size(); ++i) tar->by_path_[i] = i;
  const std::vector<TarMember>& m = tar->members_;
  std::stable_sort(tar->by_path_.begin(), tar->by_path_.end(),
                   [&](size_t a, size_t b) { return m[a].path < m[b].path; });
  return tar;
}

const TarMember* TarFile::find(const std::string& member_path) const {
  auto it = std::upper_bound(by_path_.begin(), by_path_.end(), member_path,
                             [&](const std::string& p, size_t i) { return p < members_[i].path; });
  if (it == by_path_.begin()) return nullptr;
  const TarMember& m = members_[*(it - 1)];
  return m.path == member_path ? &m : nullptr;
}

std::vector<uint8_t> TarFile::read(const TarMember& m) const {
  std::vector<uint8_t> out;
  read_into(m, out);
  return out;
}

void TarFile::read_into(const TarMember& m, std::vector<uint8_t>& out) const {
  auto fail = [&](const std::string& why) {
    return InputError(path_ + ":" + printable(m.path) + ": " + why);
  };
  if (m.size > kMaxInputFileBytes)
    throw fail(std::to_string(m.size) + " bytes, over the " + limit_str(kMaxInputFileBytes) +
               " limit for one file (a corrupt archive?); check the file");
  out.resize(static_cast<size_t>(m.size));
  for (size_t got = 0; got < out.size();) {
    const ssize_t r =
        ::pread(fd_, out.data() + got, out.size() - got, static_cast<off_t>(m.offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      throw fail(std::string("read error at offset ") + std::to_string(m.offset + got) + ": " +
                 std::strerror(errno) + "; check the file and its disk");
    if (r == 0)
      throw fail("short read: " + std::to_string(got) + " of " + std::to_string(m.size) +
                 " bytes at offset " + std::to_string(m.offset) +
                 " (the archive changed since it was indexed?); open it again");
    got += static_cast<size_t>(r);
  }
}

bool is_compressed_file(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return false;
  const bool compressed = compression_of(fd) != nullptr;
  ::close(fd);
  return compressed;
}

// ---- the cache of decompressed tars -------------------------------------------------------------

namespace {

// The archive's file name less its compression suffix and then ".tar" (any case):
// "train.tar.gz" -> "train", "x.tgz" -> "x".
std::string cache_stem(const std::string& archive) {
  std::string name = fs::path(archive).filename().string();
  const std::string lower = to_lower(name);
  auto strip = [&](const char* suffix) {
    const size_t n = std::strlen(suffix);
    if (lower.size() <= n || lower.compare(lower.size() - n, n, suffix) != 0) return false;
    name.resize(name.size() - n);
    return true;
  };
  for (const char* s : {".tgz", ".tbz2", ".tbz", ".txz", ".tzst"})
    if (strip(s)) return name.substr(0, 200);
  for (const char* s : {".gz", ".bz2", ".xz", ".zst"})
    if (strip(s)) break;
  if (to_lower(name).ends_with(".tar") && name.size() > 4) name.resize(name.size() - 4);
  return name.substr(0, 200);
}

// 16 hex digits of FNV-1a over the archive's absolute path, size and mtime.
std::string cache_key(const std::string& archive, const struct stat& st) {
  std::error_code ec;
  fs::path abs = fs::weakly_canonical(fs::absolute(archive, ec), ec);
  if (ec) abs = fs::absolute(archive, ec);
  const std::string text = abs.string() + '\0' + std::to_string(st.st_size) + '\0' +
                           std::to_string(st.st_mtim.tv_sec) + '.' +
                           std::to_string(st.st_mtim.tv_nsec);
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

// An exclusive flock on a lock file, held until destruction. held() is false where the lock file
// cannot be made or the filesystem has no locks: the caller then goes on without one.
class CacheLock {
 public:
  explicit CacheLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) return;
    int r;
    do r = ::flock(fd_, LOCK_EX);
    while (r != 0 && errno == EINTR);
    held_ = r == 0;
  }
  ~CacheLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  CacheLock(const CacheLock&) = delete;
  CacheLock& operator=(const CacheLock&) = delete;
  bool held() const { return held_; }

 private:
  int fd_ = -1;
  bool held_ = false;
};

using ArchiveReader = std::unique_ptr<archive, int (*)(archive*)>;

// Writes archive's decompressed bytes to os (returning early once os fails: the caller reports
// the write error). InputError naming archive when it cannot be read or what it holds is no tar
// (its first block neither a valid header nor zeros).
void decompress_to(const std::string& archive, std::ostream& os) {
  ArchiveReader a(archive_read_new(), &archive_read_free);
  if (!a) throw Error("libarchive: out of memory");
  archive_read_support_filter_all(a.get());
  archive_read_support_format_raw(a.get());
  auto fail = [&](const std::string& what) {
    const char* msg = archive_error_string(a.get());
    return InputError("cannot decompress archive " + archive + ": " + what +
                      (msg ? std::string(" (") + msg + ")" : std::string()) +
                      "; check the file or fetch it again");
  };
  if (archive_read_open_filename(a.get(), archive.c_str(), 1 << 20) != ARCHIVE_OK)
    throw fail("cannot open it");
  archive_entry* entry = nullptr;
  const int r = archive_read_next_header(a.get(), &entry);
  if (r == ARCHIVE_EOF) return;
  if (r != ARCHIVE_OK && r != ARCHIVE_WARN) throw fail("cannot read it");
  std::vector<char> buf(1 << 20);
  uint8_t first[kBlock];
  size_t have = 0;  // bytes of first[] filled
  for (;;) {
    const la_ssize_t n = archive_read_data(a.get(), buf.data(), buf.size());
    if (n < 0) throw fail("corrupt or truncated data");
    if (n == 0) break;
    if (have < kBlock) {
      const size_t take = std::min(kBlock - have, static_cast<size_t>(n));
      std::memcpy(first + have, buf.data(), take);
      have += take;
      if (have == kBlock && !is_zero_block(first) && !checksum_ok(first))
        throw InputError("cannot decompress archive " + archive +
                         ": it does not hold a tar archive (its first block is no tar header); "
                         "pass a .tar or a compressed .tar");
    }
    if (!os.write(buf.data(), n)) return;
  }
  if (have > 0 && have < kBlock)
    throw InputError("cannot decompress archive " + archive + ": it holds " + std::to_string(have) +
                     " bytes, less than one tar header; check the file");
}

// Removes what killed writers left of path ("PATH.tmp.PID", write_file_atomic's temp files).
// Only called under the lock, when no other process is writing path.
void remove_stale_temps(const fs::path& path) {
  const std::string prefix = path.filename().string() + ".tmp.";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(path.parent_path(), ec))
    if (e.path().filename().string().starts_with(prefix)) fs::remove(e.path(), ec);
}

}  // namespace

std::string decompressed_tar(const std::string& archive) {
  struct stat st;
  const int fd = open_regular(archive, &st);
  // A cache file of this archive (path, size, mtime) is returned without reading it.
  const std::string cache = default_cache_dir();  // "" when no cache folder is set
  const std::optional<fs::path> root =
      cache.empty() ? std::nullopt : std::optional<fs::path>(fs::path(cache));
  const fs::path dir = root ? *root / "tar" : fs::path();
  const fs::path out = dir / (cache_stem(archive) + "-" + cache_key(archive, st) + ".tar");
  std::error_code ec;
  if (root && fs::is_regular_file(out, ec)) {
    ::close(fd);
    return out.string();
  }
  const char* kind = compression_of(fd);
  ::close(fd);
  if (!kind) return archive;
  if (!root)
    throw InputError("cannot decompress archive " + archive +
                     ": no cache folder (HOME is not set); set HPCNET_CACHE_DIR to a folder with "
                     "room");
  auto cache_error = [&](const std::string& why) {
    return InputError("cannot decompress archive " + archive + " into the cache folder " +
                      dir.string() + ": " + why +
                      "; free space there or set HPCNET_CACHE_DIR to another folder");
  };
  fs::create_directories(dir, ec);
  if (ec) throw cache_error(ec.message());
  const CacheLock lock(out.string() + ".lock");
  if (fs::is_regular_file(out, ec)) return out.string();  // another process wrote it meanwhile
  if (lock.held()) remove_stale_temps(out);
  std::fprintf(stderr,
               "hpcnet: decompressing %s (%.1f MB, %s) once to %s; an uncompressed .tar is read "
               "in place\n",
               archive.c_str(), static_cast<double>(st.st_size) / 1e6, kind, out.c_str());
  bool archive_failed = false;
  try {
    write_file_atomic(out.string(), [&](std::ostream& os) {
      try {
        decompress_to(archive, os);
      } catch (...) {
        archive_failed = true;
        throw;
      }
    });
  } catch (const Error& e) {
    if (archive_failed) throw;
    throw cache_error(e.what());
  }
  return out.string();
}

}  // namespace hpcnet::data::detail
