// File and archive reading for the dataset loaders: whole files into memory, and a sequential
// libarchive scan of .tar/.tar.gz that keeps only the entries a loader asks for.
#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "src/data/internal.h"

namespace hpcnet::data::detail {

std::vector<uint8_t> read_whole_file(const std::string& path, const std::string& what) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw InputError(what + ": cannot read " + path + ": " + std::strerror(errno));
  std::vector<uint8_t> out;
  if (std::fseek(f.get(), 0, SEEK_END) == 0) {
    long n = std::ftell(f.get());
    if (n > 0) out.reserve(static_cast<size_t>(n));
    std::fseek(f.get(), 0, SEEK_SET);
  }
  uint8_t buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f.get())) > 0) out.insert(out.end(), buf, buf + n);
  if (std::ferror(f.get()))
    throw InputError(what + ": cannot read " + path + ": " + std::strerror(errno));
  return out;
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

}  // namespace

std::vector<ArchiveEntry> scan_archive(const std::string& archive_path,
                                       const std::function<bool(const std::string&, bool)>& want) {
  std::unique_ptr<archive, int (*)(archive*)> a(archive_read_new(), &archive_read_free);
  if (!a) throw Error("libarchive: out of memory");
  archive_read_support_filter_all(a.get());
  archive_read_support_format_all(a.get());
  auto fail = [&](const std::string& what) -> InputError {
    const char* msg = archive_error_string(a.get());
    return InputError("cannot read archive " + archive_path + ": " + what +
                      (msg ? std::string(" (") + msg + ")" : std::string()) +
                      "; check the file or unpack it and pass the folder");
  };
  if (archive_read_open_filename(a.get(), archive_path.c_str(), 1 << 16) != ARCHIVE_OK)
    throw fail("cannot open");
  std::vector<ArchiveEntry> out;
  archive_entry* entry = nullptr;
  for (;;) {
    int r = archive_read_next_header(a.get(), &entry);
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
    if (archive_entry_size_is_set(entry) && archive_entry_size(entry) > 0)
      e.data.reserve(static_cast<size_t>(archive_entry_size(entry)));
    const void* buf;
    size_t len;
    la_int64_t offset;
    for (;;) {
      r = archive_read_data_block(a.get(), &buf, &len, &offset);
      if (r == ARCHIVE_EOF) break;
      if (r != ARCHIVE_OK && r != ARCHIVE_WARN) throw fail("cannot read " + e.path);
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

}  // namespace hpcnet::data::detail
