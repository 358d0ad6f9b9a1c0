// FileStore and FileTree (file_tree.h): reading a dataset's files from a folder or an indexed tar,
// and listing them, the same way for every loader.
#include "src/data/file_tree.h"

#include <sys/stat.h>

#include <algorithm>

#include "src/data/internal.h"
#include "src/data/tar_index.h"

namespace fs = std::filesystem;

namespace hpcnet::data::detail {

FileRef member_ref(const TarMember& m, uint32_t archive) {
  return FileRef{m.path, m.offset, m.size, archive};
}

// ---- FileStore --------------------------------------------------------------------------------

uint32_t FileStore::add_archive(std::shared_ptr<const TarFile> tar, std::string name) {
  HPCNET_CHECK(tar != nullptr, "FileStore: a null archive");
  tars_.push_back(std::move(tar));
  names_.push_back(std::move(name));
  return static_cast<uint32_t>(tars_.size() - 1);
}

void FileStore::read(const FileRef& f, std::vector<uint8_t>& out, const std::string& what) const {
  if (tars_.empty()) return read_file_into(f.path, what, out);
  HPCNET_CHECK(f.archive < tars_.size(), "FileRef of an archive the store does not hold");
  tars_[f.archive]->read_into(TarMember{f.path, f.offset, f.size}, out);
}

std::string FileStore::display(const FileRef& f) const {
  if (tars_.empty() || f.archive >= names_.size()) return f.path;
  return names_[f.archive] + ":" + f.path;
}

std::string FileStore::identity() const {
  std::string id;
  for (const auto& tar : tars_) {
    struct stat st {};
    ::stat(tar->path().c_str(), &st);
    id += tar->path() + "|" + std::to_string(st.st_size) + "|" + std::to_string(st.st_mtime) + ";";
  }
  return id;
}

// ---- FileTree ---------------------------------------------------------------------------------

bool is_hidden_name(const std::string& name) { return !name.empty() && name[0] == '.'; }

FileTree FileTree::folder(std::string what) {
  FileTree t;
  t.what_ = std::move(what);
  t.store_ = std::make_shared<FileStore>();
  return t;
}

FileTree FileTree::open_archive(const std::string& archive, std::string what) {
  FileTree t;
  t.what_ = std::move(what);
  t.archive_ = archive;
  t.tar_ = TarFile::open(decompressed_tar(archive));
  for (const std::string& d : t.tar_->dirs()) t.dirs_.insert(d);
  for (const TarMember& m : t.tar_->members()) {
    const std::vector<std::string> parts = split_path(m.path);
    std::string d;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      d += (i ? "/" : "") + parts[i];
      t.dirs_.insert(d);
    }
    t.files_.insert(m.path);
  }
  t.store_ = std::make_shared<FileStore>(t.tar_, archive);
  return t;
}

std::string FileTree::join(const std::string& base, const std::string& rel) const {
  fs::path p = fs::path(rel);
  if (!is_archive() && p.is_absolute()) return normal(p);
  return normal(base.empty() ? p : fs::path(base) / p);
}

std::string FileTree::normal(const fs::path& p) {
  std::string s = p.lexically_normal().generic_string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  if (s == ".") s.clear();
  return s;
}

bool FileTree::inside(const std::string& p) const {
  return !is_archive() || (p != ".." && p.rfind("../", 0) != 0 && (p.empty() || p[0] != '/'));
}

bool FileTree::is_file(const std::string& p) const {
  if (is_archive()) return files_.count(p) != 0;
  std::error_code ec;
  return fs::exists(p, ec) && !fs::is_directory(p, ec);  // a FIFO is refused when read
}

bool FileTree::is_dir(const std::string& p) const {
  if (is_archive()) return p.empty() || dirs_.count(p) != 0;
  std::error_code ec;
  return fs::is_directory(p.empty() ? "." : p, ec);
}

std::vector<std::string> FileTree::list_files(const std::string& dir) const {
  std::vector<std::string> out;
  if (is_archive()) {
    const std::string pre = dir.empty() ? "" : dir + "/";
    for (auto it = files_.lower_bound(pre);
         it != files_.end() && it->compare(0, pre.size(), pre) == 0; ++it)
      if (it->find('/', pre.size()) == std::string::npos) out.push_back(*it);
    return out;
  }
  std::error_code ec;
  for (fs::directory_iterator it(dir.empty() ? "." : dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code fec;
    if (it->is_regular_file(fec)) out.push_back(join(dir, it->path().filename().string()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> FileTree::list_images(const std::string& dir,
                                               std::vector<std::string>* broken) const {
  std::vector<std::string> out;
  if (is_archive()) {
    const std::string pre = dir.empty() ? "" : dir + "/";
    for (auto it = files_.lower_bound(pre);
         it != files_.end() && it->compare(0, pre.size(), pre) == 0; ++it) {
      const std::vector<std::string> parts = split_path(it->substr(pre.size()));
      if (!std::any_of(parts.begin(), parts.end(), is_hidden_name) && is_image_name(*it))
        out.push_back(*it);
    }
    return out;
  }
  std::error_code ec;
  const fs::path root(dir.empty() ? "." : dir);
  for (fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec),
       end;
       !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code fec;
    if (is_hidden_name(name)) {
      if (it->is_directory(fec)) it.disable_recursion_pending();
      continue;
    }
    if (!is_image_name(name) || it->is_directory(fec)) continue;
    const std::string p = join(dir, it->path().lexically_relative(root).generic_string());
    if (it->is_regular_file(fec))
      out.push_back(p);
    else if (std::string target; is_broken_link(it->path().string(), &target))
      broken->push_back(p + " -> " + target);
  }
  HPCNET_REQUIRE(!ec, what_ + ": cannot list " + dir + ": " + ec.message());
  std::sort(out.begin(), out.end());
  std::sort(broken->begin(), broken->end());
  return out;
}

std::vector<std::string> FileTree::top_dirs() const {
  std::vector<std::string> out;
  for (const std::string& d : dirs_)
    if (d.find('/') == std::string::npos && !is_hidden_name(d)) out.push_back(d);
  return out;
}

std::vector<uint8_t> FileTree::read(const std::string& p) const {
  if (!is_archive()) return read_whole_file(p, what_);
  return tar_->read(member(p));
}

std::string FileTree::text(const std::string& p) const {
  std::vector<uint8_t> b = read(p);
  return std::string(b.begin(), b.end());
}

FileRef FileTree::ref(const std::string& p) const {
  if (!is_archive()) return FileRef{p};
  return member_ref(member(p));
}

std::string FileTree::display(const std::string& p) const {
  if (is_archive()) return archive_ + ":" + p;
  return p.empty() ? "." : p;
}

std::string FileTree::display_dir(const std::string& d) const {
  if (is_archive()) return archive_ + ":" + (d.empty() ? "" : d + "/");
  return d.empty() ? "./" : (d == "/" ? d : d + "/");
}

const TarMember& FileTree::member(const std::string& p) const {
  const TarMember* m = tar_->find(p);
  HPCNET_REQUIRE(m != nullptr,
                 what_ + ": cannot read " + display(p) + ": not a regular file of the archive");
  return *m;
}

}  // namespace hpcnet::data::detail
