// Tests of the tar index (src/data/tar_index.h): members, offsets and folders of ustar, GNU and pax
// archives written by libarchive, reads by offset, the hostile headers it must refuse (crafted
// here byte by byte), and the one-time decompression of a .tar.gz (.tar.xz, ...) into the cache.
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <clocale>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "src/data/internal.h"
#include "src/data/tar_index.h"
#include "src/io/write_fault.h"
#include "test_util.h"

namespace hpcnet {
namespace {

using data::detail::decompressed_tar;
using data::detail::index_tar;
using data::detail::is_compressed_file;
using data::detail::TarFile;
using data::detail::TarMember;
using namespace test_util;

// ---- archives written by libarchive -------------------------------------------------------------

enum class Format { kUstar, kGnu, kPax };

struct Entry {
  std::string path;
  std::string data;  // a regular file's bytes
  char type = 'f';   // 'f' file, 'd' folder, 's' symlink to link, 'h' hard link to link
  std::string link;
};

// Bytes that differ from member to member: n of them from seed.
std::string bytes_from(uint64_t seed, size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i)
    s[i] = static_cast<char>((i * 131 + seed * 7919 + (i >> 7)) & 0xff);
  return s;
}

// The archive as libarchive writes it (mtime fixed, no padding after the end blocks), compressed
// with filter (e.g. archive_write_add_filter_gzip) when given.
std::string make_tar(const std::vector<Entry>& entries, Format format,
                     int (*filter)(archive*) = nullptr) {
  size_t cap = 1 << 16;
  for (const Entry& e : entries) cap += e.data.size() + 4096;
  std::string buf(cap, '\0');
  size_t used = 0;
  archive* a = archive_write_new();
  if (format == Format::kUstar) archive_write_set_format_ustar(a);
  if (format == Format::kGnu) archive_write_set_format_gnutar(a);
  if (format == Format::kPax) archive_write_set_format_pax_restricted(a);
  if (filter && filter(a) != ARCHIVE_OK) {
    const std::string why = archive_error_string(a) ? archive_error_string(a) : "no reason given";
    archive_write_free(a);
    throw std::runtime_error(why);
  }
  archive_write_set_bytes_in_last_block(a, 1);
  if (archive_write_open_memory(a, buf.data(), buf.size(), &used) != ARCHIVE_OK)
    throw std::runtime_error("libarchive cannot open its output");
  for (const Entry& e : entries) {
    archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, e.path.c_str());
    archive_entry_set_mtime(entry, 1700000000, 0);
    archive_entry_set_perm(entry, e.type == 'd' ? 0755 : 0644);
    archive_entry_set_filetype(entry, e.type == 'd'   ? AE_IFDIR
                                      : e.type == 's' ? AE_IFLNK
                                                      : AE_IFREG);
    if (e.type == 's') archive_entry_set_symlink(entry, e.link.c_str());
    if (e.type == 'h') archive_entry_set_hardlink(entry, e.link.c_str());
    archive_entry_set_size(entry, e.type == 'f' ? static_cast<la_int64_t>(e.data.size()) : 0);
    if (archive_write_header(a, entry) != ARCHIVE_OK)
      throw std::runtime_error("libarchive cannot write " + e.path);
    if (e.type == 'f') archive_write_data(a, e.data.data(), e.data.size());
    archive_entry_free(entry);
  }
  archive_write_close(a);
  archive_write_free(a);
  buf.resize(used);
  return buf;
}

struct Index {
  std::vector<TarMember> members;
  std::vector<std::string> dirs;
};

Index index_of(const std::string& tar, const std::string& name = "mem.tar") {
  Index ix;
  index_tar(reinterpret_cast<const uint8_t*>(tar.data()), tar.size(), name, &ix.members, &ix.dirs);
  return ix;
}

std::vector<std::string> paths_of(const std::vector<TarMember>& members) {
  std::vector<std::string> out;
  for (const TarMember& m : members) out.push_back(m.path);
  return out;
}

// Every member's bytes, found at its offset in tar, are those of the entry of that path.
void expect_bytes_at_offsets(const std::string& tar, const std::vector<TarMember>& members,
                             const std::map<std::string, std::string>& want) {
  for (const TarMember& m : members) {
    ASSERT_TRUE(want.count(m.path)) << m.path;
    ASSERT_LE(m.offset + m.size, tar.size()) << m.path;
    EXPECT_EQ(m.size, want.at(m.path).size()) << m.path;
    EXPECT_TRUE(tar.compare(m.offset, m.size, want.at(m.path)) == 0) << m.path;
  }
}

// ---- headers crafted byte by byte ---------------------------------------------------------------

std::string octal(uint64_t v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*llo", digits, static_cast<unsigned long long>(v));
  return buf;
}

// Recomputes the checksum of the header at `at` (after a test changed its bytes).
void fix_checksum(std::string& tar, size_t at) {
  tar.replace(at + 148, 8, "        ");
  unsigned sum = 0;
  for (size_t i = 0; i < 512; ++i) sum += static_cast<unsigned char>(tar[at + i]);
  tar.replace(at + 148, 8, octal(sum, 6) + std::string("\0 ", 2));
}

// One ustar header (name up to 99 bytes), checksum filled in.
std::string header(const std::string& name, uint64_t size, char type) {
  std::string h(512, '\0');
  h.replace(0, name.size(), name);
  h.replace(100, 7, "0000644");
  h.replace(124, 11, octal(size, 11));
  h.replace(136, 11, octal(1700000000, 11));
  h[156] = type;
  h.replace(257, 8,
            std::string("ustar\0"
                        "00",
                        8));
  fix_checksum(h, 0);
  return h;
}

std::string pad(std::string s) { return s.append((512 - s.size() % 512) % 512, '\0'); }

std::string file_entry(const std::string& name, const std::string& data) {
  return header(name, data.size(), '0') + pad(data);
}

// "LEN key=value\n", LEN counting itself.
std::string pax_record(const std::string& key, const std::string& value) {
  const std::string body = " " + key + "=" + value + "\n";
  size_t len = body.size() + 1;
  while (std::to_string(len).size() + body.size() != len) ++len;
  return std::to_string(len) + body;
}

std::string pax_header(const std::string& records, char type = 'x') {
  return header("PaxHeaders/x", records.size(), type) + pad(records);
}

const std::string kEnd(1024, '\0');

// The message of the InputError that indexing tar (in memory, and as file `path` through TarFile)
// throws; both must agree apart from the name. Returns the in-memory one.
std::string refusal(const std::string& tar, const fs::path& path) {
  write_file(path, tar);
  const std::string from_memory = input_error([&] { index_of(tar, path.string()); });
  const std::string from_file = input_error([&] { TarFile::open(path.string()); });
  EXPECT_EQ(from_memory, from_file) << "index_tar and TarFile::open disagree";
  return from_memory;
}

::testing::AssertionResult mentions(const std::string& message,
                                    std::initializer_list<std::string> parts) {
  for (const std::string& p : parts)
    if (message.find(p) == std::string::npos)
      return ::testing::AssertionFailure() << "'" << p << "' not in: " << message;
  return ::testing::AssertionSuccess();
}

// ---- environment --------------------------------------------------------------------------------

// Sets (or with nullptr unsets) variables, restoring what they were when it goes.
class EnvGuard {
 public:
  void set(const char* name, const char* value) {
    if (!saved_.count(name)) {
      const char* old = std::getenv(name);
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~EnvGuard() {
    for (const auto& [name, value] : saved_)
      value ? ::setenv(name.c_str(), value->c_str(), 1) : ::unsetenv(name.c_str());
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

std::vector<std::string> tars_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const std::string& f : files_in(dir))
    if (f.size() > 4 && f.compare(f.size() - 4, 4, ".tar") == 0) out.push_back(f);
  return out;
}

// ---- members, offsets, folders ------------------------------------------------------------------

const std::string kLongDir = "deep/" + std::string(120, 'd');  // over ustar's 100-byte name

std::vector<Entry> sample_entries() {
  return {{"data/", "", 'd'},
          {"data/a.bin", bytes_from(1, 1000)},
          {"data/empty.txt", ""},
          {"./top.txt", "hello"},
          {"data/link", "", 's', "a.bin"},
          {"data/hard", "", 'h', "data/a.bin"},
          {"data/sub/c.bin", bytes_from(2, 512)},
          {kLongDir + "/f.txt", bytes_from(3, 77)}};
}

const std::map<std::string, std::string> kSampleBytes = {{"data/a.bin", bytes_from(1, 1000)},
                                                         {"data/empty.txt", ""},
                                                         {"top.txt", "hello"},
                                                         {"data/sub/c.bin", bytes_from(2, 512)},
                                                         {kLongDir + "/f.txt", bytes_from(3, 77)}};

const std::vector<std::string> kSamplePaths = {"data/a.bin", "data/empty.txt", "top.txt",
                                               "data/sub/c.bin", kLongDir + "/f.txt"};
const std::vector<std::string> kSampleDirs = {"data", "data/sub", "deep", kLongDir};

// ustar: the layout is one 512-byte header per entry, data padded to 512, so offsets are known:
// data/ at 0, a.bin's header at 512 (data 1024..2024, padded to 2048), empty.txt's at 2048
// (data at 2560, none), top.txt's at 2560 (data at 3072). The long path goes in the prefix field.
TEST(TarIndex, UstarMembersOffsetsAndFolders) {
  const std::string tar = make_tar(sample_entries(), Format::kUstar);
  ASSERT_EQ(tar[512 + 156], '0');
  const Index ix = index_of(tar);
  EXPECT_EQ(paths_of(ix.members), kSamplePaths);
  ASSERT_EQ(ix.members.size(), 5u);
  EXPECT_EQ(ix.members[0].offset, 1024u);
  EXPECT_EQ(ix.members[1].offset, 2560u);
  EXPECT_EQ(ix.members[2].offset, 3072u);
  expect_bytes_at_offsets(tar, ix.members, kSampleBytes);
  EXPECT_EQ(ix.dirs, kSampleDirs);
  const size_t long_header = ix.members[4].offset - 512;  // the path is split: prefix + name
  EXPECT_EQ(tar.compare(long_header + 345, kLongDir.size(), kLongDir), 0);
  EXPECT_EQ(tar.compare(long_header, 6, "f.txt\0", 6), 0);
}

// GNU: names over 100 bytes come in a 'L' header before the entry, link names in a 'K' one.
TEST(TarIndex, GnuLongNamesAndLinks) {
  std::vector<Entry> entries = sample_entries();
  entries.push_back({"data/long_link", "", 's', std::string(150, 'k')});
  const std::string name = kLongDir + "/" + std::string(60, 'n') + ".bin";
  entries.push_back({name, bytes_from(4, 3000)});
  const std::string tar = make_tar(entries, Format::kGnu);
  ASSERT_NE(tar.find("././@LongLink"), std::string::npos);
  const Index ix = index_of(tar);
  std::vector<std::string> want = kSamplePaths;
  want.push_back(name);
  EXPECT_EQ(paths_of(ix.members), want);
  std::map<std::string, std::string> bytes = kSampleBytes;
  bytes[name] = bytes_from(4, 3000);
  expect_bytes_at_offsets(tar, ix.members, bytes);
  EXPECT_EQ(ix.dirs, kSampleDirs);
  // The entries before the long names keep the ustar layout; a long name adds its 'L' header and
  // a block of name before the entry's header.
  EXPECT_EQ(ix.members[0].offset, 1024u);
  EXPECT_EQ(tar[ix.members.back().offset - 1536 + 156], 'L');
}

// pax: a path over 255 bytes, and one that is not ASCII, come in 'x' records (libarchive writes
// the latter in a UTF-8 locale only).
TEST(TarIndex, PaxLongAndUtf8Paths) {
  const std::string old_locale = std::setlocale(LC_CTYPE, nullptr);
  if (!std::setlocale(LC_CTYPE, "C.UTF-8")) GTEST_SKIP() << "no C.UTF-8 locale";
  struct Restore {
    std::string locale;
    ~Restore() { std::setlocale(LC_CTYPE, locale.c_str()); }
  } restore{old_locale};
  std::vector<Entry> entries = sample_entries();
  const std::string long_path = "p/" + std::string(300, 'q') + "/r.bin";
  const std::string utf8 =
      "donn\xc3\xa9"
      "es/\xc3\xa9t\xc3\xa9.txt";
  entries.push_back({long_path, bytes_from(5, 10000)});
  entries.push_back({utf8, "\xc3\xa9"});
  const std::string tar = make_tar(entries, Format::kPax);
  const Index ix = index_of(tar);
  std::vector<std::string> want = kSamplePaths;
  want.push_back(long_path);
  want.push_back(utf8);
  EXPECT_EQ(paths_of(ix.members), want);
  ASSERT_EQ(ix.members.size(), 7u);
  EXPECT_EQ(tar[ix.members[5].offset - 1536 + 156], 'x');  // 'x', its records, the entry
  std::map<std::string, std::string> bytes = kSampleBytes;
  bytes[long_path] = bytes_from(5, 10000);
  bytes[utf8] = "\xc3\xa9";
  expect_bytes_at_offsets(tar, ix.members, bytes);
  std::vector<std::string> dirs = kSampleDirs;
  for (const char* d : {"donn\xc3\xa9"
                        "es",
                        "p"})
    dirs.push_back(d);
  dirs.push_back("p/" + std::string(300, 'q'));
  std::sort(dirs.begin(), dirs.end());
  EXPECT_EQ(ix.dirs, dirs);
}

// The index agrees with libarchive's sequential reader (scan_archive, which the loaders used so
// far) on every format: the same regular files, in the same order, with the same bytes.
TEST(TarIndex, AgreesWithScanArchive) {
  TempDir tmp("tar_index_scan");
  std::vector<Entry> entries = sample_entries();
  entries.push_back(
      {std::string(110, 'w') + "/" + std::string(110, 'v') + ".bin", bytes_from(7, 9)});
  for (Format format : {Format::kGnu, Format::kPax, Format::kUstar}) {
    if (format == Format::kUstar) entries.pop_back();  // over ustar's 255 bytes
    const fs::path path = tmp / "s.tar";
    write_file(path, make_tar(entries, format));
    const auto scanned =
        data::detail::scan_archive(path.string(), [](const std::string&, bool) { return true; });
    const auto tf = TarFile::open(path.string());
    ASSERT_EQ(tf->members().size(), scanned.size());
    for (size_t i = 0; i < scanned.size(); ++i) {
      EXPECT_EQ(tf->members()[i].path, scanned[i].path);
      EXPECT_EQ(tf->read(tf->members()[i]), scanned[i].data) << scanned[i].path;
    }
  }
}

// A pax "size" record overrides the header's size field; a pax "path" its name; 'g' global
// headers are skipped; an empty "path=" value keeps the header's name. Regular entries whose
// name ends in '/' are folders (old tars).
TEST(TarIndex, PaxRecordsOverrideTheHeader) {
  const std::string data = bytes_from(6, 700);
  const std::string tar =
      pax_header(pax_record("comment", "global"), 'g') +
      pax_header(pax_record("size", "700") + pax_record("path", "real/name.bin")) +
      header("short.bin", 0, '0') + pad(data) + pax_header(pax_record("path", "")) +
      file_entry("kept.txt", "k") + header("old_dir/", 0, '\0') + kEnd;
  const Index ix = index_of(tar);
  ASSERT_EQ(paths_of(ix.members), (std::vector<std::string>{"real/name.bin", "kept.txt"}));
  EXPECT_EQ(ix.members[0].size, 700u);
  EXPECT_EQ(tar.compare(ix.members[0].offset, 700, data), 0);
  EXPECT_EQ(tar.compare(ix.members[1].offset, 1, "k"), 0);
  EXPECT_EQ(ix.dirs, (std::vector<std::string>{"old_dir", "real"}));
}

// The archive ends at its first zero block (what follows is not read) or where the data ends at a
// header boundary; an empty input is an empty archive.
TEST(TarIndex, EndOfArchive) {
  const std::string body = file_entry("a.txt", "aa") + file_entry("b.txt", "bbb");
  const std::vector<std::string> both = {"a.txt", "b.txt"};
  EXPECT_EQ(paths_of(index_of(body + kEnd).members), both);
  EXPECT_EQ(paths_of(index_of(body).members), both);
  EXPECT_EQ(paths_of(index_of(body + std::string(512, '\0')).members), both);
  EXPECT_EQ(paths_of(index_of(body + kEnd + "junk after the end").members), both);
  EXPECT_EQ(paths_of(index_of(file_entry("a.txt", "aa") + kEnd + file_entry("b.txt", "b")).members),
            std::vector<std::string>{"a.txt"});
  EXPECT_TRUE(index_of("").members.empty());
  EXPECT_TRUE(index_of(kEnd).members.empty());
}

// Folders implied by paths with doubled slashes have none at their end (found by fuzz_tar_index:
// "deep//cat/x" gave the folder "deep/").
TEST(TarIndex, FoldersOfPathsWithDoubledSlashes) {
  const Index ix = index_of(file_entry("deep//cat/x.bin", "x") + header("d//e//", 0, '5') + kEnd);
  EXPECT_EQ(paths_of(ix.members), std::vector<std::string>{"deep//cat/x.bin"});
  EXPECT_EQ(ix.dirs, (std::vector<std::string>{"d", "d//e", "deep", "deep//cat"}));
}

// ---- TarFile ------------------------------------------------------------------------------------

TEST(TarIndex, TarFileFindsAndReadsMembers) {
  TempDir tmp("tar_index_file");
  std::vector<Entry> entries = sample_entries();
  entries.push_back({"data/a.bin", "a newer a.bin"});  // a path stored twice: the later one wins
  const std::string tar = make_tar(entries, Format::kPax);
  write_file(tmp / "d.tar", tar);
  const auto tf = TarFile::open(tmp.str("d.tar"));
  EXPECT_EQ(tf->path(), tmp.str("d.tar"));
  std::vector<std::string> want = kSamplePaths;
  want.push_back("data/a.bin");
  EXPECT_EQ(paths_of(tf->members()), want);
  EXPECT_EQ(tf->dirs(), kSampleDirs);
  const Index ix = index_of(tar);
  for (size_t i = 0; i < ix.members.size(); ++i) {
    EXPECT_EQ(tf->members()[i].offset, ix.members[i].offset);
    EXPECT_EQ(tf->members()[i].size, ix.members[i].size);
  }
  for (const auto& [path, bytes] : kSampleBytes) {
    if (path == "data/a.bin") continue;
    const TarMember* m = tf->find(path);
    ASSERT_NE(m, nullptr) << path;
    EXPECT_EQ(m->path, path);
    const std::vector<uint8_t> got = tf->read(*m);
    EXPECT_EQ(std::string(got.begin(), got.end()), bytes) << path;
  }
  const TarMember* a = tf->find("data/a.bin");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a, &tf->members().back());
  const std::vector<uint8_t> newer = tf->read(*a);
  EXPECT_EQ(std::string(newer.begin(), newer.end()), "a newer a.bin");
  for (const char* absent : {"data", "data/link", "data/hard", "./top.txt", "top", "zzz", ""})
    EXPECT_EQ(tf->find(absent), nullptr) << absent;

  // read_into overwrites and keeps the buffer's capacity; threads read at once.
  std::vector<uint8_t> buf(5000, 0xab);
  const uint8_t* before = buf.data();
  tf->read_into(*tf->find("top.txt"), buf);
  EXPECT_EQ(std::string(buf.begin(), buf.end()), "hello");
  EXPECT_EQ(buf.data(), before);
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::vector<uint8_t> out;
      for (int r = 0; r < 200; ++r)
        for (const TarMember& m : tf->members()) {
          tf->read_into(m, out);
          if (out.size() != m.size || std::memcmp(out.data(), tar.data() + m.offset, m.size) != 0)
            ++bad[t];
        }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(bad, std::vector<int>(4, 0));

  // A member over the size limit is refused before reading; one past the end on a short read.
  const TarMember huge{"huge.bin", 0, data::detail::kMaxInputFileBytes + 1};
  EXPECT_TRUE(input_error([&] { tf->read(huge); }, tmp.str("d.tar") + ":huge.bin: "));
  EXPECT_TRUE(input_error([&] { tf->read(huge); }, "over the 1 GiB limit"));
  const TarMember past{"past.bin", tar.size() - 10, 20};
  EXPECT_TRUE(input_error([&] { tf->read(past); }, tmp.str("d.tar") + ":past.bin: short read"));
}

// Bytes this process has read through read()/pread() so far (/proc/self/io's rchar), or nullopt.
std::optional<uint64_t> bytes_read_so_far() {
  std::ifstream io("/proc/self/io");
  std::string key;
  uint64_t value = 0;
  while (io >> key >> value)
    if (key == "rchar:") return value;
  return std::nullopt;
}

// Whether files in dir can be sparse (a byte written 1 MiB in allocates less than 1 MiB).
bool sparse_files_work(const fs::path& dir) {
  const fs::path probe = dir / "probe";
  {
    std::ofstream f(probe, std::ios::binary);
    f.seekp(1 << 20);
    f.put('x');
  }
  struct stat st;
  const bool sparse = ::stat(probe.c_str(), &st) == 0 && st.st_blocks * 512 < (1 << 20);
  fs::remove(probe);
  return sparse;
}

// Indexing reads the headers only: a member of 16 GiB (a sparse file here; its size in GNU's
// base-256, being over octal's 8 GiB) is stepped over unread, and reading it is refused from its
// size.
TEST(TarIndex, TarFileSkipsDataUnread) {
  TempDir tmp("tar_index_big");
  if (!sparse_files_work(tmp.path())) GTEST_SKIP() << "no sparse files in " << tmp.str();
  const uint64_t big = uint64_t{16} << 30;
  std::string h = header("big.bin", 0, '0');
  h[124] = static_cast<char>(0x80);
  for (int i = 0; i < 11; ++i)  // bytes 125..135, big-endian
    h[135 - i] = static_cast<char>(i < 8 ? (big >> (8 * i)) & 0xff : 0);
  fix_checksum(h, 0);
  const std::string tail = file_entry("small.txt", "tail") + kEnd;
  const fs::path path = tmp / "big.tar";
  write_file(path, h);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(512 + big));
    f.write(tail.data(), static_cast<std::streamsize>(tail.size()));
  }
  ASSERT_EQ(fs::file_size(path), 512 + big + tail.size());
  const std::optional<uint64_t> read0 = bytes_read_so_far();
  const auto tf = TarFile::open(path.string());
  const std::optional<uint64_t> read1 = bytes_read_so_far();
  ASSERT_EQ(paths_of(tf->members()), (std::vector<std::string>{"big.bin", "small.txt"}));
  EXPECT_EQ(tf->members()[0].size, big);
  EXPECT_EQ(tf->members()[1].offset, 512 + big + 512);
  // Block 0 (is it compressed?), the two headers and the end mark; and the ~110 bytes of
  // /proc/self/io read for read0.
  if (read0 && read1) EXPECT_LE(*read1 - *read0, 5u * 512) << "bytes read to index the archive";
  const std::vector<uint8_t> small = tf->read(tf->members()[1]);
  EXPECT_EQ(std::string(small.begin(), small.end()), "tail");
  EXPECT_TRUE(
      input_error([&] { tf->read(tf->members()[0]); }, "17179869184 bytes, over the 1 GiB"));
}

TEST(TarIndex, TarFileRefusesCompressedFilesAndNonFiles) {
  TempDir tmp("tar_index_open");
  const std::vector<Entry> entries = {{"a.txt", "a"}};
  write_file(tmp / "x.tar", make_tar(entries, Format::kPax));
  write_file(tmp / "x.tar.gz", make_tar(entries, Format::kPax, archive_write_add_filter_gzip));
  EXPECT_TRUE(is_compressed_file(tmp.str("x.tar.gz")));
  EXPECT_FALSE(is_compressed_file(tmp.str("x.tar")));
  EXPECT_FALSE(is_compressed_file(tmp.str("missing")));
  EXPECT_FALSE(is_compressed_file(tmp.str()));
  // A tar whose first member's name starts with bzip2's magic is a tar.
  write_file(tmp / "bzh.tar", file_entry("BZh91AY&SY", "x") + kEnd);
  EXPECT_FALSE(is_compressed_file(tmp.str("bzh.tar")));
  EXPECT_EQ(paths_of(TarFile::open(tmp.str("bzh.tar"))->members()),
            std::vector<std::string>{"BZh91AY&SY"});

  const std::string gz = input_error([&] { TarFile::open(tmp.str("x.tar.gz")); });
  EXPECT_TRUE(mentions(gz, {tmp.str("x.tar.gz"), "gzip-compressed", "decompressed_tar()"}));
  EXPECT_TRUE(mentions(input_error([&] { TarFile::open(tmp.str()); }),
                       {tmp.str(), "not a regular file (a folder)"}));
  EXPECT_TRUE(mentions(input_error([&] { TarFile::open(tmp.str("missing.tar")); }),
                       {tmp.str("missing.tar"), "No such file"}));
}

// ---- hostile archives ---------------------------------------------------------------------------

TEST(TarIndex, TruncatedArchivesAreRefused) {
  TempDir tmp("tar_index_trunc");
  const fs::path path = tmp / "t.tar";
  const std::string tar = make_tar(sample_entries(), Format::kUstar);
  // In a.bin's data (1024..2024), in its padding, and in the header after it.
  for (size_t cut : {1500u, 2030u, 2048u + 100u}) {
    const std::string e = refusal(tar.substr(0, cut), path);
    EXPECT_TRUE(mentions(e, {path.string(), "truncated", "fetch it again"})) << cut;
    if (cut < 2048) EXPECT_TRUE(mentions(e, {"member data/a.bin", "claims 1000 bytes"})) << cut;
  }
  EXPECT_TRUE(
      mentions(refusal(tar.substr(0, 2048 + 100), path),
               {"ends 100 bytes into the header at offset 2048 (after member data/a.bin)"}));
  // Extension headers and then the end: the member they announced is missing.
  const std::string pax = file_entry("a.txt", "a") + pax_header(pax_record("path", "b.txt"));
  for (const std::string& t : {pax, pax + kEnd})
    EXPECT_TRUE(mentions(refusal(t, path),
                         {"extension header at offset 1024", "no member after it", "truncated"}));
}

TEST(TarIndex, BadChecksumsAndSizeFieldsAreRefused) {
  TempDir tmp("tar_index_header");
  const fs::path path = tmp / "h.tar";
  const std::string tar = make_tar(sample_entries(), Format::kUstar);
  std::string t = tar;
  t[2048 + 3] ^= 1;  // empty.txt's name, checksum not fixed
  EXPECT_TRUE(mentions(refusal(t, path),
                       {path.string(), "the header at offset 2048 (after member data/a.bin)",
                        "bad checksum", "not a tar archive"}));
  t = tar;
  t.replace(148, 8, "       x");
  EXPECT_TRUE(mentions(refusal(t, path), {"offset 0 has a bad checksum"}));
  EXPECT_TRUE(mentions(refusal(std::string(512, 'x') + kEnd, path), {"bad checksum"}));

  // a.bin claims more than the archive holds.
  t = tar;
  t.replace(512 + 124, 11, octal(1u << 20, 11));
  fix_checksum(t, 512);
  EXPECT_TRUE(mentions(refusal(t, path), {path.string(), "member data/a.bin (header at offset 512)",
                                          "claims 1048576 bytes", "truncated"}));
  // Size fields that are not numbers, or negative in base-256.
  t = tar;
  t.replace(512 + 124, 11, "0000001750x");
  fix_checksum(t, 512);
  EXPECT_TRUE(mentions(refusal(t, path), {"the header at offset 512", "'data/a.bin'",
                                          "size field that is not an octal or base-256"}));
  t = tar;
  t.replace(512 + 124, 12, std::string(12, '\xff'));
  fix_checksum(t, 512);
  EXPECT_TRUE(mentions(refusal(t, path), {"'data/a.bin'", "not an octal or base-256"}));
  // A pax size record past the end (test_bounds's 10^15 bytes): refused before any reservation.
  const std::string pax =
      pax_header(pax_record("size", "1000000000000000")) + header("train/cat/a.png", 0, '0') + kEnd;
  EXPECT_TRUE(mentions(refusal(pax, path), {"member train/cat/a.png (header at offset 1024)",
                                            "claims 1000000000000000 bytes"}));
}

TEST(TarIndex, SparseMembersAreRefused) {
  TempDir tmp("tar_index_sparse");
  const fs::path path = tmp / "s.tar";
  // GNU's old sparse type 'S'.
  std::string t = make_tar(sample_entries(), Format::kGnu);
  t[512 + 156] = 'S';
  fix_checksum(t, 512);
  EXPECT_TRUE(mentions(refusal(t, path), {path.string(), "sparse member data/a.bin",
                                          "re-create the archive without --sparse"}));
  // pax GNU sparse 1.0, as GNU tar --sparse --format=pax writes it (test_bounds's case): named by
  // GNU.sparse.name, not the synthetic path of its header.
  const std::string map = pad("1\n999999999999488\n512\n");
  const std::string gnu10 =
      file_entry("train/ok.txt", "ok") +
      pax_header(pax_record("GNU.sparse.major", "1") + pax_record("GNU.sparse.minor", "0") +
                 pax_record("GNU.sparse.name", "train/cat/b.png") +
                 pax_record("GNU.sparse.realsize", "1000000000000000")) +
      header("train/cat/GNUSparseFile.0/b.png", 1024, '0') + map + std::string(512, 'x') + kEnd;
  EXPECT_TRUE(mentions(refusal(gnu10, path), {"sparse member train/cat/b.png", "--sparse"}));
  // pax GNU sparse 0.1 (a map record) and Solaris holes.
  for (const std::string& rec :
       {pax_record("GNU.sparse.map", "0,512"), pax_record("SUN.holesdata", "0 512")}) {
    const std::string s = pax_header(rec) + file_entry("c.bin", "c") + kEnd;
    EXPECT_TRUE(mentions(refusal(s, path), {"sparse member c.bin"}));
  }
}

TEST(TarIndex, MalformedPaxAndGnuHeadersAreRefused) {
  TempDir tmp("tar_index_pax");
  const fs::path path = tmp / "p.tar";
  const std::string member = file_entry("m.txt", "m") + kEnd;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"10 path=ab\n", "its length does not end at a newline"},
      {"99 path=ab\n", "its length runs past"},
      {"path=ab\n", "does not start with a length and a space"},
      {"12\tpath=abc\n", "does not start with a length and a space"},
      {"9 pathab\n", "not key=value"},
      {"7 =abc\n", "not key=value"},
      {"2 \n", "its length does not end at a newline"},
      {pax_record("size", "12x"), "size '12x' is not a decimal number"},
      {pax_record("size", "-1"), "size '-1' is not a decimal number"},
      {pax_record("path", "ok") + "5 a=b", "pax record 2"},
  };
  for (const auto& [records, why] : cases) {
    const std::string e = refusal(file_entry("a.txt", "a") + pax_header(records) + member, path);
    EXPECT_TRUE(mentions(e, {path.string(), "the header at offset 1024 is malformed", why}))
        << records;
  }
  // A NUL ends the records (as libarchive reads them).
  const Index ix =
      index_of(pax_header(pax_record("path", "n.txt") + std::string("\0junk", 5)) + member);
  EXPECT_EQ(paths_of(ix.members), std::vector<std::string>{"n.txt"});
  // A GNU long name over 1 MiB; 33 extension headers in a row.
  const std::string long_name = header("././@LongLink", 2u << 20, 'L') + member;
  EXPECT_TRUE(
      mentions(refusal(long_name, path),
               {"GNU long-name header at offset 0 claims 2097152 bytes", "over the 1 MiB limit"}));
  std::string many;
  for (int i = 0; i < 33; ++i) many += pax_header(pax_record("path", "p" + std::to_string(i)));
  EXPECT_TRUE(mentions(refusal(many + member, path), {"33 extension headers in a row"}));
  many.erase(0, 1024);  // 32 are accepted: the last path wins
  EXPECT_EQ(paths_of(index_of(many + member).members), std::vector<std::string>{"p32"});
}

// ---- decompressed_tar ---------------------------------------------------------------------------

struct CacheCase {
  TempDir tmp{"tar_index_cache"};
  EnvGuard env;
  CacheCase() { env.set("HPCNET_CACHE_DIR", tmp.str("cache").c_str()); }
  fs::path cache() const { return tmp / "cache" / "tar"; }
};

// decompressed_tar(A), the stderr it printed into *err.
std::string decompress(const std::string& archive, std::string* err) {
  ::testing::internal::CaptureStderr();
  std::string out;
  try {
    out = decompressed_tar(archive);
  } catch (...) {
    *err = ::testing::internal::GetCapturedStderr();
    throw;
  }
  *err = ::testing::internal::GetCapturedStderr();
  return out;
}

TEST(TarIndex, TarGzDecompressesOnceIntoTheCache) {
  CacheCase c;
  const std::string tar = make_tar(sample_entries(), Format::kPax);
  write_file(c.tmp / "data.tar", tar);
  const fs::path gz = c.tmp / "data.tar.gz";
  write_file(gz, make_tar(sample_entries(), Format::kPax, archive_write_add_filter_gzip));
  ASSERT_NE(read_file(gz), tar);

  std::string err;
  EXPECT_EQ(decompress(c.tmp.str("data.tar"), &err), c.tmp.str("data.tar"));  // read in place
  EXPECT_EQ(err, "");
  EXPECT_FALSE(fs::exists(c.tmp / "cache"));
  const std::string out = decompress(gz.string(), &err);
  const std::vector<std::string> cached = tars_in(c.cache());
  ASSERT_EQ(cached.size(), 1u);
  EXPECT_EQ(out, (c.cache() / cached[0]).string());
  EXPECT_TRUE(cached[0].size() == 25 && cached[0].rfind("data-", 0) == 0 &&
              cached[0].find_first_not_of("0123456789abcdef", 5) == 21)
      << cached[0];
  EXPECT_EQ(read_file(out), tar);
  EXPECT_EQ(split_lines(err).size(), 1u) << err;
  EXPECT_TRUE(mentions(err, {"hpcnet: decompressing " + gz.string(), "once to " + out,
                             "an uncompressed .tar is read in place"}));
  const auto tf = TarFile::open(out);
  const Index ix = index_of(tar);
  ASSERT_EQ(paths_of(tf->members()), paths_of(ix.members));
  for (size_t i = 0; i < ix.members.size(); ++i) {
    EXPECT_EQ(tf->members()[i].offset, ix.members[i].offset);
    const std::vector<uint8_t> got = tf->read(tf->members()[i]);
    EXPECT_EQ(std::string(got.begin(), got.end()), kSampleBytes.at(ix.members[i].path));
  }
  EXPECT_EQ(tf->dirs(), ix.dirs);

  // Again: the cache file is returned as it is (not rewritten), silently, without reading the
  // archive: here replaced by junk of the same size and mtime.
  write_file(out, "marker");
  struct stat st;
  ASSERT_EQ(::stat(gz.c_str(), &st), 0);
  const std::string gz_bytes = read_file(gz);
  write_file(gz, std::string(gz_bytes.size(), 'j'));
  const struct timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, gz.c_str(), times, 0), 0);
  EXPECT_EQ(decompress(gz.string(), &err), out);
  EXPECT_EQ(err, "");
  EXPECT_EQ(read_file(out), "marker");

  // A changed archive (another mtime) gets a cache file of its own.
  write_file(gz, gz_bytes);
  const struct timespec later[2] = {st.st_atim, {st.st_mtim.tv_sec + 10, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, gz.c_str(), later, 0), 0);
  const std::string out2 = decompress(gz.string(), &err);
  EXPECT_NE(out2, out);
  EXPECT_EQ(read_file(out2), tar);
  EXPECT_EQ(tars_in(c.cache()).size(), 2u);
}

// Every compression libarchive writes here; the cache name drops the compression and ".tar".
TEST(TarIndex, OtherCompressionsDecompressToTheSameTar) {
  CacheCase c;
  const std::string tar = make_tar(sample_entries(), Format::kGnu);
  const std::vector<std::tuple<const char*, int (*)(archive*), const char*>> kinds = {
      {"d.tgz", archive_write_add_filter_gzip, "d-"},
      {"d.tar.bz2", archive_write_add_filter_bzip2, "d-"},
      {"D.TAR.XZ", archive_write_add_filter_xz, "D-"},
      {"d.tar.zst", archive_write_add_filter_zstd, "d-"},
      {"plain.gz", archive_write_add_filter_gzip, "plain-"}};
  for (const auto& [name, filter, stem] : kinds) {
    std::string compressed;
    try {
      compressed = make_tar(sample_entries(), Format::kGnu, filter);
    } catch (const std::exception& e) {
      std::printf("[ skipped  ] %s: libarchive cannot write it here (%s)\n", name, e.what());
      continue;
    }
    write_file(c.tmp / name, compressed);
    ASSERT_TRUE(is_compressed_file(c.tmp.str(name))) << name;
    std::string err;
    const std::string out = decompress(c.tmp.str(name), &err);
    EXPECT_EQ(fs::path(out).parent_path(), c.cache()) << name;
    EXPECT_EQ(fs::path(out).filename().string().rfind(stem, 0), 0u) << out;
    EXPECT_EQ(read_file(out), tar) << name;
  }
}

// The cache folder comes from HPCNET_CACHE_DIR, else XDG_CACHE_HOME/hpcnet, else
// HOME/.cache/hpcnet.
TEST(TarIndex, CacheFolderFromTheEnvironment) {
  TempDir tmp("tar_index_env");
  write_file(tmp / "e.tar.gz",
             make_tar({{"a.txt", "a"}}, Format::kPax, archive_write_add_filter_gzip));
  EnvGuard env;
  env.set("HPCNET_CACHE_DIR", nullptr);
  env.set("XDG_CACHE_HOME", tmp.str("xdg").c_str());
  env.set("HOME", tmp.str("home").c_str());
  std::string err;
  EXPECT_EQ(fs::path(decompress(tmp.str("e.tar.gz"), &err)).parent_path(), tmp / "xdg/hpcnet/tar");
  env.set("XDG_CACHE_HOME", nullptr);
  EXPECT_EQ(fs::path(decompress(tmp.str("e.tar.gz"), &err)).parent_path(),
            tmp / "home/.cache/hpcnet/tar");
  env.set("HOME", nullptr);
  EXPECT_TRUE(mentions(input_error([&] { decompress(tmp.str("e.tar.gz"), &err); }),
                       {tmp.str("e.tar.gz"), "no cache folder", "HPCNET_CACHE_DIR"}));
}

// What cannot be decompressed, or written, leaves neither a .tar nor a temporary file.
TEST(TarIndex, FailedDecompressionLeavesNoFile) {
  CacheCase c;
  const std::string gz = make_tar(sample_entries(), Format::kPax, archive_write_add_filter_gzip);
  std::string err;
  write_file(c.tmp / "cut.tar.gz", gz.substr(0, gz.size() / 2));
  EXPECT_TRUE(mentions(input_error([&] { decompress(c.tmp.str("cut.tar.gz"), &err); }),
                       {"cannot decompress archive " + c.tmp.str("cut.tar.gz"), "fetch it again"}));
  EXPECT_EQ(tars_in(c.cache()), std::vector<std::string>{});

  // A gzip of something else than a tar.
  size_t used = 0;
  std::string buf(1 << 16, '\0');
  archive* a = archive_write_new();
  archive_write_set_format_raw(a);
  archive_write_add_filter_gzip(a);
  ASSERT_EQ(archive_write_open_memory(a, buf.data(), buf.size(), &used), ARCHIVE_OK);
  archive_entry* e = archive_entry_new();
  archive_entry_set_filetype(e, AE_IFREG);
  ASSERT_EQ(archive_write_header(a, e), ARCHIVE_OK);
  const std::string text(2000, 't');
  archive_write_data(a, text.data(), text.size());
  archive_entry_free(e);
  archive_write_close(a);
  archive_write_free(a);
  write_file(c.tmp / "text.gz", buf.substr(0, used));
  EXPECT_TRUE(mentions(input_error([&] { decompress(c.tmp.str("text.gz"), &err); }),
                       {c.tmp.str("text.gz"), "does not hold a tar archive"}));
  EXPECT_EQ(tars_in(c.cache()), std::vector<std::string>{});

  // A full disk after 1000 bytes (write_file_atomic's fault hook).
  write_file(c.tmp / "ok.tar.gz", gz);
  WriteFault full;
  full.action = WriteFault::Action::kEnospc;
  full.byte = 1000;
  set_write_fault(full);
  const std::string e_full = input_error([&] { decompress(c.tmp.str("ok.tar.gz"), &err); });
  set_write_fault(WriteFault{});
  EXPECT_TRUE(mentions(e_full, {c.tmp.str("ok.tar.gz"), "cache folder " + c.cache().string(),
                                "No space left", "HPCNET_CACHE_DIR"}));
  for (const std::string& f : files_in(c.cache()))
    EXPECT_EQ(f.find(".tmp."), std::string::npos) << f;
  EXPECT_EQ(tars_in(c.cache()), std::vector<std::string>{});

  // A cache folder that cannot be made (a file is in the way).
  write_file(c.tmp / "blocker", "");
  c.env.set("HPCNET_CACHE_DIR", c.tmp.str("blocker").c_str());
  EXPECT_TRUE(mentions(
      input_error([&] { decompress(c.tmp.str("ok.tar.gz"), &err); }),
      {c.tmp.str("ok.tar.gz"), "cache folder " + c.tmp.str("blocker/tar"), "HPCNET_CACHE_DIR"}));
  EXPECT_TRUE(mentions(input_error([&] { decompressed_tar(c.tmp.str("missing.tar.gz")); }),
                       {c.tmp.str("missing.tar.gz"), "No such file"}));
}

// A temporary file left by a killed writer is removed by the next one; threads (or processes)
// asking at once decompress once, under the lock.
TEST(TarIndex, ConcurrentCallersDecompressOnce) {
  CacheCase c;
  const std::string tar = make_tar(sample_entries(), Format::kPax);
  write_file(c.tmp / "c.tar.gz",
             make_tar(sample_entries(), Format::kPax, archive_write_add_filter_gzip));
  std::string err;
  const std::string out = decompress(c.tmp.str("c.tar.gz"), &err);
  fs::remove(out);
  const std::string stale = out + ".tmp.999999";
  write_file(stale, "half a file");
  std::vector<std::string> outs(4);
  ::testing::internal::CaptureStderr();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] { outs[t] = decompressed_tar(c.tmp.str("c.tar.gz")); });
  for (std::thread& t : threads) t.join();
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(outs, std::vector<std::string>(4, out));
  EXPECT_EQ(split_lines(err).size(), 1u) << err;
  EXPECT_EQ(read_file(out), tar);
  EXPECT_FALSE(fs::exists(stale));
}

// ---- a dataset's index sent as bytes (rank 0 walks, the other ranks rebuild) --------------------

// b rebuilt from a's bytes: the same items, targets and decoded pixels, and the same bytes again.
void expect_same_dataset(const data::Dataset& a, const data::Dataset& b) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(a.classes(), b.classes());
  EXPECT_EQ(a.target_kind(), b.target_kind());
  EXPECT_EQ(a.describe(), b.describe());
  EXPECT_EQ(data::dataset_index_bytes(b), data::dataset_index_bytes(a));
  data::ExampleBuffer ba, bb;
  for (int64_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a.item_name(i), b.item_name(i));
    const data::Example ea = a.get(i, ba), eb = b.get(i, bb);
    ASSERT_EQ(ea.height, eb.height) << i;
    ASSERT_EQ(ea.width, eb.width) << i;
    EXPECT_EQ(0, std::memcmp(ea.pixels, eb.pixels, static_cast<size_t>(ea.nbytes()))) << i;
    EXPECT_EQ(ea.label, eb.label) << i;
    ASSERT_EQ(ea.num_boxes, eb.num_boxes) << i;
    for (int64_t k = 0; k < ea.num_boxes; ++k) EXPECT_EQ(ea.boxes[k], eb.boxes[k]) << i;
    ASSERT_EQ(ea.mask != nullptr, eb.mask != nullptr) << i;
    if (ea.mask)
      EXPECT_EQ(0, std::memcmp(ea.mask, eb.mask, static_cast<size_t>(ea.height * ea.width)));
  }
}

std::shared_ptr<data::Dataset> round_trip(const data::Dataset& ds) {
  const std::string bytes = data::dataset_index_bytes(ds);
  EXPECT_FALSE(bytes.empty());
  return data::dataset_from_index_bytes(bytes);
}

TEST(DatasetIndex, EveryLazyFormatRoundTripsThroughBytes) {
  TempDir d("index");
  // An image folder, as a folder and as a tar.
  for (int k = 0; k < 6; ++k) {
    const fs::path f = d / "folder" / "train" / (k % 2 ? "cat" : "dog") /
                       ("img" + std::to_string(k) + (k == 5 ? ".png" : ".jpg"));
    fs::create_directories(f.parent_path());
    const std::vector<uint8_t> px = noisy_pixels(20 + k, 16, 90, 120, 150, k, 0, 40);
    if (k == 5)
      write_png_file(f, 20 + k, 16, px);
    else
      write_jpeg_file(f, 20 + k, 16, px);
  }
  ASSERT_EQ(std::system(("tar -cf " + shell_quote(d.str("folder.tar")) + " -C " +
                         shell_quote(d.str("folder")) + " train")
                            .c_str()),
            0);
  for (const std::string path : {d.str("folder"), d.str("folder.tar")}) {
    SCOPED_TRACE(path);
    auto ds = data::open_dataset("imagefolder", path, "train");
    data::set_decode_min_side(*ds, 8);  // a reduced decode is a reader's setting, not the index's
    auto back = round_trip(*ds);
    data::set_decode_min_side(*back, 8);
    expect_same_dataset(*ds, *back);
  }
  // YOLO rows and COCO boxes (crowd and area kept) over the same images.
  write_tiny_detect(d / "det", 5, 2);
  auto yolo = data::load_detection_dataset(d.str("det/data.yaml"), "train").dataset;
  expect_same_dataset(*yolo, *round_trip(*yolo));
  fs::create_directories(d / "det" / "annotations");
  write_file(d / "det" / "annotations" / "instances_train.json",
             R"({"images": [{"id": 1, "file_name": "images/train/000.jpg", "width": 64,
                 "height": 64}, {"id": 2, "file_name": "images/train/001.jpg", "width": 64,
                 "height": 64}],
                 "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [2, 3, 20, 10],
                 "area": 150.5, "iscrowd": 0}, {"id": 2, "image_id": 2, "category_id": 2,
                 "bbox": [10, 10, 30, 30], "area": 700, "iscrowd": 1}],
                 "categories": [{"id": 1, "name": "red"}, {"id": 2, "name": "blue"}]})");
  auto coco =
      data::load_detection_dataset(d.str("det/annotations/instances_train.json"), "train").dataset;
  auto coco_back = round_trip(*coco);
  expect_same_dataset(*coco, *coco_back);
  data::ExampleBuffer b;
  const data::Example crowd = coco_back->get(1, b);
  ASSERT_EQ(crowd.num_boxes, 1);
  EXPECT_TRUE(crowd.boxes[0].crowd);
  EXPECT_FLOAT_EQ(crowd.boxes[0].area, 700.f);
  // Segmentation: images with their masks.
  write_tiny_detect(d / "seg-src", 3, 0);
  fs::create_directories(d / "seg" / "images" / "train");
  fs::create_directories(d / "seg" / "masks" / "train");
  for (int k = 0; k < 3; ++k) {
    const std::string name = "00" + std::to_string(k);
    fs::copy_file(d / "seg-src" / "images" / "train" / (name + ".jpg"),
                  d / "seg" / "images" / "train" / (name + ".jpg"));
    std::vector<uint8_t> m(64 * 64);
    for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<uint8_t>((i / 64 + k) % 3);
    const std::vector<uint8_t> png =
        data::encode_png_index(m.data(), 64, 64, data::class_palette(256));
    write_file(d / "seg" / "masks" / "train" / (name + ".png"),
               std::string(png.begin(), png.end()));
  }
  write_file(d / "seg" / "classes.txt", "a\nb\nc\n");
  auto seg = data::load_segmentation(d.str("seg"), "train");
  expect_same_dataset(*seg, *round_trip(*seg));
}

TEST(DatasetIndex, InMemoryDatasetsHaveNoIndexAndBadBytesAreRefused) {
  TempDir d("index-bad");
  write_tiny_cifar10(d.path(), 4, 2, 5);
  EXPECT_EQ(data::dataset_index_bytes(*data::open_dataset("cifar10", d.str(), "train")), "");
  write_tiny_detect(d / "det", 3, 1);
  const std::string bytes = data::dataset_index_bytes(
      *data::load_detection_dataset(d.str("det/data.yaml"), "train").dataset);
  for (size_t cut : {size_t{0}, size_t{7}, size_t{30}, bytes.size() / 2, bytes.size() - 1})
    EXPECT_NE(input_error([&] {
                data::dataset_from_index_bytes(bytes.substr(0, cut));
              }).find("dataset index: malformed"),
              std::string::npos)
        << cut;
  EXPECT_NE(input_error([&] {
              data::dataset_from_index_bytes(bytes + "x");
            }).find("dataset index: malformed"),
            std::string::npos);
}

}  // namespace
}  // namespace hpcnet
